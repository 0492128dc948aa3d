"""A stop word over the agent's reply interrupts it through the recognizer's early spotting (PhraseSpotted, before the
stop word's final): the dialogue (services/conversation/dialogue/, shared by moss_sts and the router's fallback)
listening to a real asr service over gRPC on loopback, as moss_sts does; the caller is piper joe at the pace of real
time.

The reply is a test double (quiet audio with its text: no brain, no TTS) so each test takes seconds. The recognizer's
interim results are held back from the dialogue (``FinalsOnly``): pocketsphinx sometimes hears "stop" too, and
these tests are about the spot path, so only spots and finals reach the dialogue here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from services.common import audio
from services.common.engines import (
    INTERRUPTED,
    RESULT,
    SPEAKING,
    STATE,
    TURN_COMPLETE,
    USER_TRANSCRIPT,
    AsrEvent,
    AudioPiece,
    BargeIn,
    SessionOptions,
)
from services.conversation.dialogue import DialogueLimits, DialogueSession, ReplySink, UserTurn
from services.remote.asr import RemoteAsrEngine
from services.remote.direct import DirectBackend
from tests.asr_wrap import PassThroughStream, WrappedAsr

RATE = 16000
FRAME = RATE * 20 // 1000  # samples per 20 ms message
WORD_S = 0.3  # reply audio per word of its text
SERVICE, ENGINE = "test_spotting", "long"


class FinalsOnly(PassThroughStream):
    """The real recognizer's stream with its interim results held back (finals, spots and VAD events pass)."""

    async def events(self) -> AsyncIterator[AsrEvent]:
        async for event in self.inner.events():
            if event.kind == RESULT and not event.result.is_final:
                continue
            yield event


class LongReply(DialogueSession):
    """Answers every turn with ``reply`` (a word per WORD_S of quiet audio)."""

    reply = ""

    async def generate_reply(self, turn: UserTurn, sink: ReplySink) -> None:
        await sink.text(self.reply)
        quiet = bytes(int(WORD_S * RATE) * 2)
        at = 0
        for word in self.reply.split(" "):
            await sink.audio(AudioPiece(quiet, RATE, at, at + len(word), f"{SERVICE}/{ENGINE}"))
            at += len(word) + 1


@pytest.fixture(scope="module")
def joe(speakers):
    """piper joe in process (the session's speakers, tests/conftest.py); ``say(text)`` -> 16 kHz s16le."""

    async def say(text: str) -> bytes:
        pcm, rate = await speakers.say("joe", text)
        return audio.resample(pcm, rate, RATE)

    return say


@pytest.fixture
async def recognizer(asr_fleet):
    engine = RemoteAsrEngine(DirectBackend("asr", asr_fleet.address("asr")), deadline_margin_s=0.0)
    yield WrappedAsr(engine, FinalsOnly, "finals-and-spots")
    await engine.backend.channel.close()


def count(metric: str, **labels) -> float:
    return REGISTRY.get_sample_value(metric, {"service": SERVICE, "engine": ENGINE, **labels}) or 0.0


async def converse(
    recognizer, reply: str, prompt: bytes, over: bytes, listen_s: float, after_s: float = 1.0
) -> list[tuple[float, object]]:
    """A session whose caller says ``prompt``, then ``over`` once the reply has played ~``after_s``, then stays silent
    for ``listen_s``; every event with its arrival time."""
    session_type = type("Session", (LongReply,), {"reply": reply})
    options = SessionOptions(language="en-US", barge_in=BargeIn(), request_id="spot-test")
    session = session_type(SERVICE, f"{SERVICE}/{ENGINE}", recognizer, options, DialogueLimits(echo_cancellation=False))
    await session.start()
    events: list[tuple[float, object]] = []

    async def read() -> None:
        async for event in session.events():
            events.append((time.monotonic(), event))

    reader = asyncio.create_task(read())
    speaking_since: list[float] = []

    async def say(pcm: bytes) -> None:
        for i in range(0, len(pcm), FRAME * 2):
            await session.feed(pcm[i : i + FRAME * 2])
            await asyncio.sleep(0.02)

    try:
        await say(bytes(int(0.3 * RATE) * 2) + prompt + bytes(int(0.3 * RATE) * 2))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # silence until the reply has played a second
            if not speaking_since:
                speaking_since += [t for t, e in events if e.kind == STATE and e.state == SPEAKING][:1]
            elif time.monotonic() - speaking_since[0] > after_s:
                break
            await say(bytes(FRAME * 2))
        assert speaking_since, f"the reply never started: {[e.kind for _, e in events]}"
        await say(over + bytes(int(listen_s * RATE) * 2))
    finally:
        await session.close()
        reader.cancel()
    return events


def kinds(events, turn: int) -> list[str]:
    out = []
    for _, e in events:
        if e.turn_index != turn:
            continue
        if e.kind == USER_TRANSCRIPT:
            out.append("final" if e.transcript.is_final else "interim")
        elif e.kind in (INTERRUPTED, TURN_COMPLETE):
            out.append(e.kind)
    return out


async def test_a_stop_word_over_the_reply_interrupts_through_the_spot_path(recognizer, joe):
    before = count("voicefleet_sts_barge_in_total", why="stop_word_spotted")
    reply = " ".join(["once upon a time a little dragon wanted to fly over the hills and far away"] * 2)
    events = await converse(recognizer, reply, await joe("Tell me a story."), await joe("Stop."), listen_s=1.5)
    interrupted = [e for _, e in events if e.kind == INTERRUPTED]
    assert len(interrupted) == 1 and interrupted[0].turn_index == 0, [e.kind for _, e in events]
    assert interrupted[0].reason == "barge_in"
    assert count("voicefleet_sts_barge_in_total", why="stop_word_spotted") == before + 1
    # Interrupted before the stop word's own final arrived (that final is the next turn's transcript).
    order = [(e.kind, e.turn_index, e.kind == USER_TRANSCRIPT and e.transcript.is_final) for _, e in events]
    cut = order.index((INTERRUPTED, 0, False))
    finals = [i for i, (kind, turn, final) in enumerate(order) if kind == USER_TRANSCRIPT and turn == 1 and final]
    assert finals and cut < finals[0], order
    said = " ".join(e.transcript.transcript for _, e in events if e.kind == USER_TRANSCRIPT and e.turn_index == 1)
    assert "stop" in said.lower(), said


async def test_a_stop_word_the_reply_just_said_itself_is_taken_for_its_echo(recognizer, joe):
    """The echo rule still applies to a spotted word: a lone "stop" while the reply has just said "stop" is the likelier
    echo (services/conversation/echo.py is_own_words), so it does not interrupt."""
    before = count("voicefleet_sts_barge_in_refused_total", why="own_words")
    spotted_before = count("voicefleet_sts_barge_in_total", why="stop_word_spotted")
    reply = "you can say stop at any time and i will be quiet so go on"
    # "stop" is the reply's 4th word (0.9-1.2 s of its audio): the caller's "Stop." comes once it has been sent whole;
    # spotted earlier, while the reply's "stop" was still on its way, the caller's word is the likelier.
    events = await converse(
        recognizer, reply, await joe("Tell me a story."), await joe("Stop."), listen_s=0.5, after_s=1.6
    )
    assert not [e for _, e in events if e.kind == INTERRUPTED], kinds(events, 0)
    assert count("voicefleet_sts_barge_in_refused_total", why="own_words") > before
    assert count("voicefleet_sts_barge_in_total", why="stop_word_spotted") == spotted_before
