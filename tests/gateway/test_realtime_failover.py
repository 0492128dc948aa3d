"""The same Realtime session survives moss_sts SIGKILL (issue 44, item 6): the official ``openai`` SDK on
``/v1/realtime`` of a real CPU fleet (cosyvoice_tts + asr + brain + moss_sts + router + gateway). A spoken question is
answered by moss_sts; moss_sts is SIGKILLed between turns; the next spoken question in the same session is answered
by the router's fallback (its cascade: asr -> brain -> cosyvoice_tts, docs/router.md) with reply audio the strict
listener hears, and the user's turn is not lost: its item and transcript are there. Marked ``resilience``
(`make test-resilience`, with the other tests that kill fleet members; tests/fleet/test_faults_router.py does the same
on the gRPC Converse stream, with the kill in the middle of a reply)."""

from __future__ import annotations

import asyncio
import os
import signal

import openai
import pytest

from tests.conftest import start_fleet
from tests.gateway.test_realtime import (
    CLEARED,
    RELAX,
    SPOKEN_SESSION,
    check_spoken_reply,
    connect,
    next_event,
    of,
    url,
)
from tests.gateway.test_realtime import speak_until as _speak_until
from tests.speech import INTELLIGIBLE, intelligible, wer

pytestmark = [pytest.mark.resilience, pytest.mark.timeout(360)]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = start_fleet(
        tmp_path_factory.mktemp("realtime-failover"),
        services=("cosyvoice_tts", "asr", "brain", "moss_sts", "router", "gateway"),
        moss_sts={"default_max_tokens": 40},
    )
    yield running
    running.fleet.stop()


def failovers(fleet) -> float:
    labels = {"from": "moss_sts", "to": "router/cascade"}
    return fleet.metric("router", "voicefleet_router_failovers_total", **labels)


async def moved(fleet, before: float) -> bool:
    """Whether the router counts a move from moss_sts to its cascade within a minute (polled without blocking the
    event loop: the session's socket answers the gateway's pings meanwhile)."""
    for _ in range(300):
        if failovers(fleet) > before:
            return True
        await asyncio.sleep(0.2)
    return False


async def spoken_turn(connection, pcm24: bytes, question: str, listened: bool = True) -> list:
    """One spoken question, streamed at real time until response.done: a completed response with the user's
    transcript and reply audio (``listened``: the strict listener hears it as the reply's transcript). All its
    events."""
    events = await _speak_until(connection, pcm24, "response.done")
    assert not of(events, "error"), of(events, "error")
    committed = of(events, "input_audio_buffer.committed")
    heard = of(events, "conversation.item.input_audio_transcription.completed")
    assert committed and heard and heard[-1].item_id == committed[-1].item_id, [e.type for e in events]
    assert wer(question, heard[-1].transcript) <= 0.2, heard[-1].transcript
    transcript, pcm = check_spoken_reply(events)
    if listened:
        error, said = intelligible(transcript, pcm, 24_000)
        assert error <= INTELLIGIBLE, (transcript, said)
    return events


async def test_the_same_session_is_answered_by_the_fallback_after_moss_sts_is_killed(fleet):
    # The questions said by the fleet (cosyvoice_tts's piper); a 429 with its retry hint just after the start is retried.
    speech = openai.OpenAI(base_url=url(fleet), api_key="unused", max_retries=5, timeout=120).audio.speech
    said = {
        q: speech.create(model="tts-1", voice="joe", input=q, response_format="pcm").content for q in (CLEARED, RELAX)
    }
    before = failovers(fleet)
    async with connect(fleet) as connection:
        await next_event(connection, "session.created")
        await connection.session.update(session=SPOKEN_SESSION)
        await next_event(connection, "session.updated")
        # moss_sts's reply is not what is under test here (the strict listener judges it in test_realtime.py).
        first = await spoken_turn(connection, said[CLEARED], CLEARED, listened=False)
        assert failovers(fleet) == before, "moss_sts did not answer the first turn: nothing to fail over from"

        moss = fleet.fleet.members["moss_sts"].process
        os.kill(moss.pid, signal.SIGKILL)
        moss.wait(timeout=30)
        # The router sees its Converse stream to moss_sts break and moves the session to its cascade (counted).
        assert await moved(fleet, before), "the router never failed over"

        second = await spoken_turn(connection, said[RELAX], RELAX)
        # The same session and conversation: both user items and both replies are in it.
        user_items = [of(turns, "input_audio_buffer.committed")[-1].item_id for turns in (first, second)]
        assert user_items[0] != user_items[1]
        for item_id, question in zip(user_items, (CLEARED, RELAX), strict=True):
            await connection.conversation.item.retrieve(item_id=item_id)
            retrieved = await next_event(connection, "conversation.item.retrieved")
            assert retrieved.item.id == item_id and retrieved.item.role == "user", retrieved
            assert wer(question, retrieved.item.content[0].transcript or "") <= 0.2, retrieved.item
