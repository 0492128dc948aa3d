"""The turn model alone on piper joe's sentences (seed 7, as tests/asr/test_asr_turn.py says them) cut after a word,
with 0.5 s of silence before and 0.2 s (and 0.16 s) after: p(complete)."""

import asyncio

import numpy as np

import bench.evaluation as ev
from bench.evaluation import Speakers
from services.common import audio
from services.engines.asr.turn_model import TurnModel, turn_model_path
from tests import speech

RATE = 16000
CUTS = (
    ("i would like to book a table for two at seven", ("i", "like", "to", "book", "a", "for")),
    ("please call me back when you get home", ("back", "when", "you")),
)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), dtype=np.int16)


async def main() -> None:
    speakers = Speakers()
    await speakers.start()
    model = TurnModel("probe", turn_model_path())
    listener = speech._whisper("base")
    for text, words in CUTS:
        pcm, rate = await speakers.say("joe", text)
        said = np.frombuffer(audio.resample(pcm, rate, RATE), dtype=np.int16)
        for word in words:
            at = ev.cut_after(said, word, listener)
            p = [
                model.probability(np.concatenate([silence(0.5), said[:at], silence(after)]).astype(np.float32) / 32768)
                for after in (0.2, 0.16)
            ]
            print(f"{text} | cut after {word!r}: {p[0]:.3f} (0.2 s after), {p[1]:.3f} (0.16 s after)")
    await speakers.close()


asyncio.run(main())
