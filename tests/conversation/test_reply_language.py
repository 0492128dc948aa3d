"""The cascade's language guard (services/conversation/reply_language.py): a reply in a language the session's voice
does not speak is never handed to the voice. The identifier is the real one (langid.py's model); the reply model and
the voice are stand-ins that say what a test scripts (the real model's drift is rare: 1 reply in 21)."""

from __future__ import annotations

import asyncio

import pytest

from services.common.engines import AudioPiece, SessionOptions, VoiceInfo
from services.common.errors import FailedPrecondition
from services.conversation.brain import DEFAULT_SEED
from services.conversation.cascade import CascadeSession, CascadeStsEngine
from services.conversation.dialogue import DialogueLimits
from services.conversation.dialogue.reply import UserTurn
from services.conversation.reply_language import HeldClauses, LanguageGuard

JOE = VoiceInfo("joe", "Joe", ("en-US",), 22050, "test", "piper", "")
SPANISH = "El primer capital del país, it is Madrid."  # SmolLM2-135M's reply to "What is the capital of Spain?"
ENGLISH = "The capital of Spain is Madrid. It is a big city."


def test_english_passes_and_a_confident_other_language_does_not():
    guard = LanguageGuard(("en-US",))
    for text in (
        "Sure,",
        "The capital",
        "Madrid is the capital of Spain.",
        "Berlin is",
        "I think so,",
        "2 plus 2 is 4.",
    ):
        assert guard.foreign(text) is None, text
    assert guard.foreign("El primer capital del país,") == "es"
    assert guard.foreign("Berlin ist die Hauptstadt.") == "de"
    assert guard.foreign("La capitale de la France est Paris.") == "fr"
    assert LanguageGuard(("es-ES",)).foreign("El primer capital del país,") is None  # a Spanish voice reads it


def test_text_is_held_until_a_clause_ends_and_the_first_text_after_the_first_words():
    held = HeldClauses(first_words=2)
    # two complete words with 10 letters: "The capital " (a shorter start waits for its next word)
    assert [held.add(d) for d in ("The", " capital", " of")] == ["", "", "The capital "]
    assert [held.add(d) for d in (" Spain", " is", " Madrid", ".")] == ["", "", "", "of Spain is Madrid."]
    short = HeldClauses(first_words=2)
    assert [short.add(d) for d in ("2", " plus", " 2", " is", " four", " now")] == [
        "",
        "",
        "",
        "",
        "",
        "2 plus 2 is four ",
    ]
    assert [held.add(d) for d in (" It", " is", " big")] == ["", "", ""]  # not the first text: a clause, no words
    assert held.rest() == " It is big"


class Brain:
    """Stands in for ChatBrain: the scripted reply for each seed, in deltas of a word."""

    def __init__(self, replies: dict[int, str]):
        self.replies = replies
        self.seeds: list[int] = []
        self.queue = None

    async def stream_chat(self, messages, sampling, max_tokens, request_id="", kind=None):
        seed = sampling.seed or DEFAULT_SEED
        self.seeds.append(seed)
        for i, word in enumerate(self.replies[seed].split(" ")):
            await asyncio.sleep(0)
            yield (" " if i else "") + word


class Voice:
    """Stands in for the TTS engine: what text it was given to read."""

    def __init__(self):
        self.read = ""

    async def synthesize_text_stream(self, events, options, policy):
        async for event in events:
            self.read += event.text
        if self.read:
            yield AudioPiece(b"\x00\x00" * 100, 22050, 0, len(self.read), "test/voice")


class Sink:
    def __init__(self):
        self.text = ""
        self.pieces = []

    async def text_(self, delta):
        self.text += delta


async def reply_to(replies: dict[int, str]) -> tuple[Brain, Voice, str]:
    brain, voice = Brain(replies), Voice()
    engine = CascadeStsEngine("test", asr=None, brain=brain, tts=voice, limits=DialogueLimits(echo_cancellation=False))
    session = CascadeSession(engine, SessionOptions(language="en", request_id="t"), JOE)
    said = []

    class ReplySink:
        async def text(self, delta):
            said.append(delta)

        async def audio(self, piece):
            pass

    await session.generate_reply(UserTurn(0, "What is the capital of Spain?", None, None, 0.0, 0.0), ReplySink())
    return brain, voice, "".join(said)


async def test_a_foreign_reply_is_asked_again_and_only_the_english_one_is_read():
    brain, voice, said = await reply_to({DEFAULT_SEED: SPANISH, DEFAULT_SEED + 1: ENGLISH})
    assert brain.seeds == [DEFAULT_SEED, DEFAULT_SEED + 1]
    assert voice.read == said == ENGLISH


async def test_a_reply_foreign_twice_fails_the_turn_with_nothing_read():
    with pytest.raises(FailedPrecondition) as failed:
        await reply_to({DEFAULT_SEED: SPANISH, DEFAULT_SEED + 1: "La ciudad más grande es Madrid."})
    assert "'es'" in str(failed.value.message) and "joe" in str(failed.value.message)


async def test_a_reply_that_turns_foreign_ends_at_the_text_already_read():
    brain, voice, said = await reply_to({DEFAULT_SEED: "Madrid is lovely. La ciudad más grande de España es Madrid."})
    assert brain.seeds == [DEFAULT_SEED]
    assert voice.read == said == "Madrid is lovely."
