"""piper joe synthesizing 2-word first segments (moss_sts.reply_first_segment_words) on an idle CPU, 1 and 2 intra-op
threads. Output: reply_floor_piper.log."""

import statistics
import time

from piper import SynthesisConfig

from services.engines.piper_engine import _load_joe_voice

segs = ["The capital", "Spain is", "I'd be", "Sure, the", "Yes, I", "Two plus", "In Italy,", "One day,"]
for threads in (1, 2):
    v = _load_joe_voice(threads)
    for s in segs[:2]:
        v.session.use(1, None)
        b"".join(c.audio_int16_bytes for c in v.synthesize(s, SynthesisConfig()))
    times = []
    for _rep in range(3):
        for s in segs:
            v.session.use(1, None)
            t = time.perf_counter()
            b"".join(c.audio_int16_bytes for c in v.synthesize(s, SynthesisConfig()))
            times.append((time.perf_counter() - t) * 1000)
    print(
        f"threads {threads}: 2-word first segment, n={len(times)}: median {statistics.median(times):.0f} ms, min {min(times):.0f}, max {max(times):.0f}"
    )
