"""Fixtures shared by the asr test modules."""

from __future__ import annotations

import numpy as np
import pytest

from services.common import audio

RATE = 16000


@pytest.fixture(scope="module")
def joe(speakers):
    """piper joe in process (the session's speakers, tests/conftest.py); ``say(text)`` -> 16 kHz int16 samples."""

    async def say(text: str) -> np.ndarray:
        pcm, rate = await speakers.say("joe", text)
        return np.frombuffer(audio.resample(pcm, rate, RATE), dtype=np.int16)

    return say
