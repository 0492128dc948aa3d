"""The turn model (Smart Turn v3.2, services/engines/asr/turn_model.py) on piper joe: p(complete) for whole sentences and for
sentences cut after a mid-sentence word, at the silences where semantic endpointing judges (min_silence_ms 160, then
every 200 ms), and its compute per call (one intra-op thread, as the asr service runs it). Numbers go to
docs/asr.md#semantic-endpointing. Not part of `make bench` (no service involved): ``python -m bench.turn_model``.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from bench import evaluation as ev
from bench.harness import machine
from services.common import audio
from services.engines.asr.turn_model import TurnModel, turn_model_path

RATE = 16000
SILENCES_MS = (160, 360, 560, 760)
WHOLE = (
    "please call me back when you get home",
    "can you tell me how to get to the station",
    "he might have been made amiable himself",
    "i would like to book a table for two at seven",
    "i think that we should probably leave before it gets dark",
    "tomorrow i am going to visit my grandmother in the hospital",
    "we need to buy some milk and a loaf of bread",
    "the weather is nice today so we could go for a walk in the park",
)
CUTS = (
    ("i would like to book a table for two at seven", "book"),
    ("i think that we should probably leave before it gets dark", "should"),
    ("tomorrow i am going to visit my grandmother in the hospital", "the"),
    ("tomorrow i am going to visit my grandmother in the hospital", "my"),
    ("we need to buy some milk and a loaf of bread", "and"),
    ("the weather is nice today so we could go for a walk in the park", "could"),
    ("please call me back when you get home", "you"),
    ("he might have been made amiable himself", "made"),
)


async def main() -> None:
    from faster_whisper import WhisperModel

    from services.engines.asr.models import base_model_dir

    started = machine()
    speakers = ev.Speakers()
    await speakers.start()
    model = TurnModel("bench", turn_model_path())
    listener = WhisperModel(str(base_model_dir()), device="cpu", compute_type="int8", cpu_threads=2)

    async def say(text: str) -> np.ndarray:
        pcm, rate = await speakers.say("joe", text)
        return np.frombuffer(audio.resample(pcm, rate, RATE), dtype=np.int16)

    def judged(samples: np.ndarray) -> list[float]:
        x = samples.astype(np.float32) / 32768.0
        return [model.probability(np.concatenate([x, np.zeros(RATE * s // 1000, np.float32)])) for s in SILENCES_MS]

    header = "| speech | " + " | ".join(f"{s} ms" for s in SILENCES_MS) + " |"
    print(header + "\n|---|" + "---|" * len(SILENCES_MS))
    for text in WHOLE:
        print(f"| {text} | " + " | ".join(f"{p:.2f}" for p in judged(await say(text))) + " |")
    for text, word in CUTS:
        said = await say(text)
        cut = ev.cut_after(said, word, listener)
        print(f"| {text.split(f' {word} ')[0]} {word} … | " + " | ".join(f"{p:.2f}" for p in judged(said[:cut])) + " |")

    x = (await say(WHOLE[0])).astype(np.float32) / 32768.0
    for _ in range(3):
        model.probability(x)
    costs = []
    for _ in range(50):
        t0 = time.perf_counter()
        model.probability(x)
        costs.append((time.perf_counter() - t0) * 1000)
    print(
        f"\ncompute per call (features + inference, 1 thread, 50 calls): p50 {np.percentile(costs, 50):.1f} ms,"
        f" p95 {np.percentile(costs, 95):.1f} ms; machine {started}; load after {machine()['load_average_1min']}"
    )
    await speakers.close()


if __name__ == "__main__":
    asyncio.run(main())
