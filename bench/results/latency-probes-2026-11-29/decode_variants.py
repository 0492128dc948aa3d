"""The final's decode alone, per variant (beam, whisper threads, window floor), on the turn set's 18 complete lines
(each up to 200 ms after its speech end): encode median, whole decode median and max, and the lines whose text differs
from the shipped beam 5 / 1 thread / 10 s floor.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/latency-probes-2026-11-29/decode_variants.py
"""

import statistics
import time

import numpy as np

from bench.turn_set import Counts, build
from services.common.config.asr import AsrServiceConfig
from services.engines.asr.cpu_engine import WhisperFinals

LINES = [build(23, Counts(6, 4, 6, 6, 2)).line(i) for i in build(23, Counts(6, 4, 6, 6, 2)).complete]


def pcm(line) -> np.ndarray:
    return np.frombuffer(line.pcm[: int(line.speech_end_ms * 16 + 3200) * 2], np.int16).astype(np.float32) / 32768


def run(beam: int, threads: int, floor: int) -> list:
    config = AsrServiceConfig(port=1)
    config.beam_size, config.whisper_threads, config.final_window_min_seconds = beam, threads, floor
    finals = WhisperFinals(config)
    finals.load()
    finals._fitted_window(pcm(LINES[0]), "en", ())  # warm
    encode_ms, decode_ms, texts = [], [], []
    for line in LINES:
        audio = pcm(line)
        t0 = time.perf_counter()
        finals._encode(finals.tiny, audio)
        t1 = time.perf_counter()
        result = finals._fitted_window(audio, "en", ())
        t2 = time.perf_counter()
        encode_ms.append((t1 - t0) * 1000)
        decode_ms.append((t2 - t1) * 1000)
        texts.append(result.text if result else None)  # None: looked degenerate, the service would use 30 s
    print(
        f"beam {beam} threads {threads} floor {floor}: encode median {statistics.median(encode_ms):.0f} ms,"
        f" full decode median {statistics.median(decode_ms):.0f} max {max(decode_ms):.0f} ms",
        flush=True,
    )
    return texts


shipped = None
for variant in [(5, 1, 10), (1, 1, 10), (2, 1, 10), (5, 2, 10), (1, 2, 10), (5, 1, 5)]:
    texts = run(*variant)
    if shipped is None:
        shipped = texts
        continue
    differ = [(a, b) for a, b in zip(shipped, texts, strict=True) if a != b]
    print("   differs from beam5/1/10:", len(differ), differ[:3])
