"""The strict listener (tests/speech.py) can fail: near-miss sentences, one or two content words changed and really
synthesized by the CPU voices, are not heard as the sentence they imitate; the sentence itself is."""

from __future__ import annotations

import pytest

from bench import evaluation as ev
from services.common import audio
from tests.speech import INTELLIGIBLE, intelligible, wer

# (voice, test sentence, near misses): the sentences the tests use, each with its one- and two-word near misses.
CASES = [
    (
        "joe",
        "the quick brown fox jumps over the lazy dog",
        ["the quick brown box jumps over the lazy dog", "the quick brown box jumps over the hazy log"],
    ),
    ("joe", "hello world this is a test", ["hello world this is a tent", "yellow world this is a tent"]),
    (
        "espeak",
        "the children are playing in the garden",
        ["the children are praying in the garden", "the children are playing in the garage"],
    ),
]


@pytest.fixture(scope="module")
async def speakers():
    s = ev.Speakers()
    await s.start()
    yield s
    await s.close()


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize(("voice", "sentence", "near_misses"), CASES, ids=[f"{c[0]}-{c[1][:14]}" for c in CASES])
async def test_near_misses_fail_the_listener_and_the_sentence_passes(speakers, voice, sentence, near_misses):
    pcm, rate = await speakers.say(voice, sentence)
    error, heard = intelligible(sentence, audio.resample(pcm, rate, 16000), 16000)
    assert error <= INTELLIGIBLE, heard
    for near_miss in near_misses:
        pcm, rate = await speakers.say(voice, near_miss)
        error, heard = intelligible(sentence, audio.resample(pcm, rate, 16000), 16000)
        assert error > INTELLIGIBLE, f"{near_miss!r} was heard as {heard!r}, which passes for {sentence!r}"
        # It failed because the listener heard the changed words, not because it heard noise.
        assert wer(near_miss, heard) < error, heard


def test_normalisation_ignores_case_punctuation_and_digit_spelling():
    assert wer("my order number is four five six seven", "My order number is 4567.") == 0
    assert wer("the doctor will see you in ten minutes", "The doctor will see you in 10 minutes!") == 0
    assert wer("hello world this is a test", "Hello, world -- this is a tent.") == pytest.approx(1 / 6)
