import sys

sys.path[:0] = [".", "gen/python"]
import onnxruntime  # noqa: E402 - after the sys.path line

import services.engines.piper_engine as pe  # noqa: E402 - after the sys.path line

orig = onnxruntime.InferenceSession


def patched(model, so, **kw):
    so.enable_cpu_mem_arena = False
    return orig(model, so, **kw)


onnxruntime.InferenceSession = patched
v = pe._load_joe_voice(1)


class E:
    pass


e = E()
e._voice = v
words = (
    "the library opens at nine tomorrow morning and closes late on weekends so you can come any time you like".split()
    * 4
)


def status(k):
    for line in open("/proc/self/status"):
        if line.startswith(k):
            return int(line.split()[1]) >> 10


pe.PiperTtsEngine._synthesize_segment(e, "Warm up.", 1.0, 1, onnxruntime.RunOptions())
for n in (3, 5, 8, 12, 16, 20, 30, 45, 60):
    text = " ".join(words[:n]) + "."
    open("/proc/self/clear_refs", "w").write("5")
    before = status("VmRSS")
    pcm, _ = pe.PiperTtsEngine._synthesize_segment(e, text, 1.0, 1, onnxruntime.RunOptions())
    print(
        n,
        "words",
        len(text),
        "chars",
        round(len(pcm) / 2 / 22050, 1),
        "s audio; peak over idle",
        status("VmHWM") - before,
        "MB",
        flush=True,
    )
