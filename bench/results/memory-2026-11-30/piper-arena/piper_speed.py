"""Same texts, piper sessions interleaved: arena (default), arena + shrinkage per run, [no arena]. Median ms per segment.
Run on the code before the change (piper_engine.py at 946a90b): piper_speed.py N KEPT_MB [noarena]."""

import random
import statistics
import sys
import time

sys.path[:0] = [".", "gen/python"]
import onnxruntime  # noqa: E402 - after the sys.path line

import services.engines.piper_engine as pe  # noqa: E402 - after the sys.path line

orig = onnxruntime.InferenceSession


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


flag = {}


def patched(model, so, **kw):
    if flag.get("noarena"):
        so.enable_cpu_mem_arena = False
    if flag.get("same"):
        so.add_session_config_entry("session.use_env_allocators", "1")
    return orig(model, so, **kw)


onnxruntime.InferenceSession = patched
voices = {}
voices["arena"] = pe._load_joe_voice(1)
if int(sys.argv[2]):  # shrink on an env arena whose first region is argv[2] MB; 0: on the session's own arena (1 MB)
    flag["same"] = True
    register_same(int(sys.argv[2]))
voices["shrink"] = pe._load_joe_voice(1)
flag.clear()
if "noarena" in sys.argv[3:]:
    flag["noarena"] = True
    voices["noarena"] = pe._load_joe_voice(1)
words = (
    "the library opens at nine tomorrow morning and closes late on weekends so you can come any time you like".split()
)
rng = random.Random(2)


class E:
    pass


times = {k: [] for k in voices}
n = int(sys.argv[1])
for i in range(n):
    text = " ".join(rng.choice(words) for _ in range(rng.randint(2, 20))) + "."
    order = list(voices)
    rng.shuffle(order)
    for k in order:
        eng = E()
        eng._voice = voices[k]
        ro = onnxruntime.RunOptions()
        if k == "shrink":
            ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        t = time.perf_counter()
        pe.PiperTtsEngine._synthesize_segment(eng, text, 1.0, i, ro)
        times[k].append((len(text.split()), time.perf_counter() - t))
for k, v in times.items():
    v = v[5:]
    for lo, hi in ((2, 5), (6, 12), (13, 20)):
        b = [t for w, t in v if lo <= w <= hi]
        print(k, f"{lo}-{hi} words", len(b), "median %.1f ms" % (1000 * statistics.median(b)))
