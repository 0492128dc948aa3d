"""tiny.en's encoder alone (int8) on 4 s of audio in a 5, 10 and 30 s window: the floor of a final's cost.

T=1|2 PYTHONPATH=.:gen/python .venv/bin/python bench/results/latency-probes-2026-11-29/encoder_window.py
"""

import os
import statistics
import time

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel

from services.engines.asr.models import tiny_en_dir

threads = int(os.environ.get("T", "1"))
model = WhisperModel(str(tiny_en_dir()), device="cpu", compute_type="int8", cpu_threads=threads, local_files_only=True)
audio = (np.random.default_rng(0).standard_normal(16000 * 4) * 0.01).astype(np.float32)
for seconds in (10, 5, 30):
    features_ms, encode_ms = [], []
    for i in range(6):
        t0 = time.perf_counter()
        features = model.feature_extractor(audio)
        t1 = time.perf_counter()
        window = np.zeros((features.shape[0], seconds * 100), np.float32)
        window[:, : features.shape[-1]] = features
        model.model.encode(ctranslate2.StorageView.from_array(window[None]), to_cpu=False)
        t2 = time.perf_counter()
        if i:  # the first is a warm-up
            features_ms.append((t1 - t0) * 1000)
            encode_ms.append((t2 - t1) * 1000)
    print(
        f"T={threads} window {seconds}s: features {statistics.median(features_ms):.0f} ms,"
        f" encode {statistics.median(encode_ms):.0f} ms",
        flush=True,
    )
