"""How much of a live input stream each resampler holds back, fed 20 ms frames to 16 kHz (issue 44: the Realtime
route heard speech end later than gRPC). Output: held_back.txt.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/resampler-2026-11-29/held_back.py
"""

import numpy as np
import soxr

from services.common.audio import LiveResampler

for src in (8000, 24000, 48000):
    for name, make in (
        ("soxr HQ", lambda s: soxr.ResampleStream(s, 16000, 1, dtype="int16", quality="HQ")),
        ("soxr MQ", lambda s: soxr.ResampleStream(s, 16000, 1, dtype="int16", quality="MQ")),
        ("LiveResampler", lambda s: LiveResampler(s, 16000)),
    ):
        r, n, out, held = make(src), src // 50, 0, []
        for i in range(100):
            x = np.zeros(n, dtype=np.int16)
            y = r.resample_chunk(x) if name.startswith("soxr") else np.frombuffer(r.feed(x.tobytes()), np.int16)
            out += len(y)
            held.append(((i + 1) * 320 - out) / 16)
        h = np.array(held[10:])
        print(f"{src} Hz -> 16 kHz, {name}: held back mean {h.mean():.1f} ms, min {h.min():.1f}, max {h.max():.1f}")
