"""Backchannel cues of the turn set (seed 29, 12 of them), prefixes every 64 ms up to 1.2 s, decoded as spotting does per
encoder window floor: any prefix heard as a stop phrase is listed."""

import sys

import numpy as np

import services.engines.asr.cpu_engine as ce
from bench.turn_set import Counts, build
from services.common.config.asr import AsrServiceConfig
from services.common.config.base import DEFAULT_STOP_WORDS
from services.common.text import has_phrase, spoken_words
from services.engines.asr.cpu_engine import WhisperFinals

ts = build(29, Counts(0, 0, 12, 0, 0))
cues = {line.id: line for line in ts.lines.values() if line.kind == "cue"}
finals = WhisperFinals(AsrServiceConfig(port=1))
finals.load()
phrases = [spoken_words(p) for p in DEFAULT_STOP_WORDS]  # the dialogue's
for floor in [int(x) for x in sys.argv[1:]]:
    ce.SPOT_WINDOW_SECONDS = floor
    hits = []
    for cid, line in sorted(cues.items()):
        pcm = np.frombuffer(line.pcm, np.int16).astype(np.float32) / 32768
        s0 = int(line.speech_start_ms * 16)
        for ms in range(192, 1200, 64):
            text = finals.quick(pcm[max(0, s0 - 3200) : s0 + ms * 16], "en")
            if any(has_phrase(spoken_words(text), p) for p in phrases):
                hits.append((cid, ms, text))
    print(f"floor {floor}: backchannel prefixes heard as a stop phrase: {hits}")
