"""Whisper tiny.en's final on this CPU by ctranslate2 compute type: the asr CPU engine loads it int8; does float32
(or int8_float32 / int16) decode the turn-taking set's 18 complete lines faster on an AVX2-only CPU? Each line
(0.2 s before the speech to 96 ms after it) through the engine's own fitted-window final, one thread, beam 5,
three rounds alternated; the text must not change (printed when it does)."""

import asyncio
import statistics
import time

from complete_lines import complete_line_clips
from faster_whisper import WhisperModel

from bench.evaluation import cpu_engine
from services.engines.asr.models import tiny_en_dir

TYPES = ("int8", "float32", "int8_float32")  # int16: "the target device or backend do not support efficient int16" here


async def main() -> None:
    engine = await cpu_engine()
    _, clips = complete_line_clips()
    models = {
        t: WhisperModel(str(tiny_en_dir()), device="cpu", compute_type=t, cpu_threads=1, local_files_only=True)
        for t in TYPES
    }
    took: dict[str, list[float]] = {t: [] for t in TYPES}
    texts: dict[str, list[str]] = {t: [] for t in TYPES}
    for _ in range(3):
        for t, model in models.items():
            engine.final.tiny = model
            engine.final.recognize(clips[0], "en", ())  # warm
            for clip in clips:
                t0 = time.perf_counter()
                text = engine.final.recognize(clip, "en", ()).text
                took[t].append(1000 * (time.perf_counter() - t0))
                texts[t].append(text)
    for t in TYPES:
        changed = sum(a != b for a, b in zip(texts[t], texts["int8"], strict=True))
        v = took[t]
        print(
            f"{t:13s} median {statistics.median(v):4.0f} ms, min {min(v):4.0f}, max {max(v):4.0f}; texts unlike int8's: {changed}/{len(v)}"
        )
    await engine.close()


asyncio.run(main())
