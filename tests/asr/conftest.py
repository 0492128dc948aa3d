"""Fixtures shared by the asr test modules."""

from __future__ import annotations

import numpy as np
import pytest

from bench import evaluation as ev
from services.common import audio

RATE = 16000


@pytest.fixture(scope="module")
async def joe():
    """piper joe in process; ``say(text)`` -> 16 kHz int16 samples."""
    speakers = ev.Speakers()
    await speakers.start()

    async def say(text: str) -> np.ndarray:
        pcm, rate = await speakers.say("joe", text)
        return np.frombuffer(audio.resample(pcm, rate, RATE), dtype=np.int16)

    yield say
    await speakers.close()
