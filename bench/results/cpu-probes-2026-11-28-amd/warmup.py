"""The asr's whisper warm-up on 1 s of noise (seed 0), in process: ``recognize`` (the old warm-up: its fitted decode of
noise looks degenerate and falls back to the full 30 s window), the full window alone cold and warm, and
``WhisperFinals.warm`` (the fitted decodes only). Seconds per call."""

import time

import numpy as np

from services.common.config.asr import AsrServiceConfig
from services.engines.asr.cpu_engine import WhisperFinals


def timed(call, *args) -> float:
    t0 = time.perf_counter()
    call(*args)
    return time.perf_counter() - t0


finals = WhisperFinals(AsrServiceConfig(port=1))
finals.load()
noise = np.random.default_rng(0).normal(0, 0.01, 16000).astype(np.float32)
for language in ("en", None, "en", None):
    print(f"recognize, language {language}: {timed(finals.recognize, noise, language, ()):.2f} s")
for n in (1, 2):
    print(f"full window alone, en, call {n}: {timed(finals._full_window, noise, 'en', (), False):.2f} s")
for n in (1, 2):
    print(f"warm, call {n}: {timed(finals.warm, noise):.2f} s")
