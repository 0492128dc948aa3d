"""The spotting decode alone on this CPU (docs/asr.md#spot-phrases): joe's stop-word cues of the turn set (seed 29), prefixes
every 64 ms from 192 ms, per encoder window floor given as arguments: decode median / p90 and the first prefix that
holds the word. Run from the repository root with PYTHONPATH=.:gen/python."""

import statistics
import sys
import time

import numpy as np

import services.engines.asr.cpu_engine as ce
from bench.turn_set import Counts, build
from services.common.config.asr import AsrServiceConfig
from services.engines.asr.cpu_engine import WhisperFinals

ts = build(29, Counts(0, 0, 0, 12, 0))
cues = {line.id: line for line in ts.lines.values() if line.kind == "cue"}
finals = WhisperFinals(AsrServiceConfig(port=1))
finals.load()
for floor in [int(x) for x in sys.argv[1:]] or [3]:
    ce.SPOT_WINDOW_SECONDS = floor
    finals.quick(np.zeros(8000, np.float32), "en")
    costs = []
    first = {}
    for cid, line in sorted(cues.items()):
        pcm = np.frombuffer(line.pcm, np.int16).astype(np.float32) / 32768
        s0 = int(line.speech_start_ms * 16)
        for ms in range(192, 1000, 64):
            audio = pcm[max(0, s0 - 3200) : s0 + ms * 16]
            t0 = time.perf_counter()
            text = finals.quick(audio, "en")
            costs.append(time.perf_counter() - t0)
            w = cid.split("-", 1)[1].replace("_", " ")
            if w in text.lower().replace(",", "").replace(".", "") and cid not in first:
                first[cid] = ms
    print(
        f"floor {floor}s: decode median {1000 * statistics.median(costs):.0f} ms, p90 {1000 * sorted(costs)[int(0.9 * len(costs))]:.0f} ms; first heard at (ms of its audio): {first}"
    )
