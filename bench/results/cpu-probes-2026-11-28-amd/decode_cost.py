"""What the pause's work costs on this CPU, in process and alone: the asr CPU engine's final decode (whisper tiny.en,
beam 5, one thread) of the turn-taking set's 18 complete lines (0.2 s before the speech to 96 ms after it), asking
ctranslate2 for one text or for the beam's five (the text check reads them all), three rounds alternated; and the
turn model on the last 8 s of a line. Compare with the Intel Xeon's figures in docs/conversation.md (a short line's
decode ~60-90 ms, a long one's 125-170; the turn model ~38 ms)."""

import asyncio
import statistics
import time

import numpy as np
from complete_lines import complete_line_clips

from bench.evaluation import cpu_engine


class Hypotheses:
    """ctranslate2's Whisper with num_hypotheses set, everything else passed through."""

    def __init__(self, model, n: int):
        self._model, self._n = model, n

    def generate(self, *args, **kwargs):
        return self._model.generate(*args, **{**kwargs, "num_hypotheses": self._n})

    def __getattr__(self, name):
        return getattr(self._model, name)


async def main() -> None:
    engine = await cpu_engine()
    lines, clips = complete_line_clips()
    whisper = engine.final.tiny.model
    took: dict[int, list[float]] = {1: [], 5: []}
    for _ in range(3):
        for n in took:
            engine.final.tiny.model = Hypotheses(whisper, n)
            for clip in clips:
                t0 = time.perf_counter()
                engine.final.recognize(clip, "en", ())
                took[n].append(1000 * (time.perf_counter() - t0))
    engine.final.tiny.model = whisper
    for n, values in took.items():
        print(
            f"final decode, {n} text(s): median {statistics.median(values):.0f} ms, min {min(values):.0f}, max {max(values):.0f}"
        )
    tail = np.frombuffer(lines[-1].pcm, dtype="<i2").astype(np.float32)[-8 * 16000 :] / 32768.0
    judged = []
    for _ in range(10):
        t0 = time.perf_counter()
        engine.turn.model.probability(tail)
        judged.append(1000 * (time.perf_counter() - t0))
    print(f"turn model, one judgement: median {statistics.median(judged):.0f} ms")
    await engine.close()


asyncio.run(main())
