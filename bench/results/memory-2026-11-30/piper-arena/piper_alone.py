"""piper alone: many distinct-length sentences on 2 worker threads; PSS and 64 MiB-arena PSS every 50."""

import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path[:0] = [".", "gen/python"]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # drive_util
import onnxruntime  # noqa: E402 - after the sys.path line
from drive_util import sample  # noqa: E402 - after the sys.path line

import services.engines.piper_engine as pe  # noqa: E402 - after the sys.path line

mode = sys.argv[1]
n = int(sys.argv[2])
orig = onnxruntime.InferenceSession
import re as _re  # noqa: E402 - after the sys.path line


def register_same(mb=0):
    cfg = onnxruntime.OrtArenaCfg(
        {"arena_extend_strategy": 0, "initial_chunk_size_bytes": mb << 20} if mb else {"arena_extend_strategy": 1}
    )
    onnxruntime.create_and_register_allocator(
        onnxruntime.OrtMemoryInfo(
            "Cpu", onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, onnxruntime.OrtMemType.DEFAULT
        ),
        cfg,
    )


def patched(model, so, **kw):
    if "nopattern" in mode:
        so.enable_mem_pattern = False
    if "noarena" in mode:
        so.enable_cpu_mem_arena = False
    if "same" in mode or "env" in mode:
        so.add_session_config_entry("session.use_env_allocators", "1")
    return orig(model, so, **kw)


onnxruntime.InferenceSession = patched
if "same" in mode:
    register_same()
if "env" in mode:
    register_same(int(_re.search(r"env(\d+)", mode).group(1)))
voice = pe._load_joe_voice(1)
words = (
    "the library opens at nine tomorrow morning and closes late on weekends so you can come any time you like".split()
)
rng = random.Random(1)


class E:
    pass


eng = E()
eng._voice = voice
ex = ThreadPoolExecutor(2)


def synth(text, seed):
    ro = onnxruntime.RunOptions()
    if "shrink" in mode:
        ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    t = time.perf_counter()
    pe.PiperTtsEngine._synthesize_segment(eng, text, 1.0, seed, ro)
    return time.perf_counter() - t


synth("Warm up.", 1)
print(mode, 0, sample(os.getpid()), flush=True)
t0 = time.time()
busy = 0.0
for i in range(0, n, 2):
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 20))) + "." for _ in range(2)]
    busy += sum(ex.map(synth, texts, [i, i + 1]))
    if (i + 2) % 50 == 0:
        print(mode, i + 2, round(time.time() - t0), "busy_s", round(busy, 1), sample(os.getpid()), flush=True)
rows = []
cur = None
for line in open(f"/proc/{os.getpid()}/smaps"):
    p = line.split()
    if "-" in p[0] and not p[0].endswith(":"):
        a, b = (int(x, 16) for x in p[0].split("-"))
        cur = [(b - a) >> 20, p[5] if len(p) > 5 else ""]
    elif p[0] == "Rss:":
        if not cur[1] and cur[0] >= 1:
            rows.append((cur[0], int(p[1]) >> 10))
print("anon mappings >=1MiB (size MiB, rss MiB):", sorted(rows, reverse=True))
