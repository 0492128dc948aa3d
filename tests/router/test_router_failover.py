"""The router's record of a streaming-text call (services/router/failover.py TextLog): a fallback backend replays the
caller's text from any character, with the caller's flushes and end where they were, and still gets the caller's bad
message as an error. End-to-end failover on real processes: tests/fleet/test_faults_router.py."""

from __future__ import annotations

import asyncio

import pytest

from services.common.engines import BufferPolicy, TextEvent
from services.common.errors import InvalidArgument
from services.router.failover import TextLog


async def events(items, gap=0.0):
    for item in items:
        if isinstance(item, BaseException):
            raise item
        if gap:
            await asyncio.sleep(gap)
        yield item


def flat(replayed: list[TextEvent]) -> str:
    """Text with | for a flush and $ for the end."""
    return "".join(e.text or ("|" if e.flush else "$") for e in replayed)


async def replay(log: TextLog, start: int) -> list[TextEvent]:
    return [e async for e in log.replay(start)]


async def test_replay_from_a_position_keeps_later_flushes_and_the_end():
    log = TextLog(
        events(
            [
                TextEvent("One. "),
                TextEvent(flush=True),
                TextEvent("Two, three. "),
                TextEvent(flush=True),
                TextEvent("Four."),
                TextEvent(end=True),
            ]
        )
    )
    await log.pump()
    assert flat(await replay(log, 0)) == "One. |Two, three. |Four.$"
    assert flat(await replay(log, 5)) == "Two, three. |Four.$"  # the flush at 5 is behind the replay point
    assert flat(await replay(log, 10)) == "three. |Four.$"


async def test_replay_follows_text_that_is_still_arriving():
    log = TextLog(events([TextEvent("Hello "), TextEvent("there. "), TextEvent("Bye."), TextEvent(end=True)], gap=0.02))
    pump = asyncio.create_task(log.pump())
    got = await asyncio.wait_for(replay(log, 0), 5)
    await pump
    assert flat(got) == "Hello there. Bye.$"


async def test_the_callers_bad_message_reaches_whoever_replays():
    bad = InvalidArgument("text_delta", "arrived after end_of_text")
    log = TextLog(events([TextEvent("Hi. "), TextEvent(end=True), bad]))
    await log.pump()
    got = []
    with pytest.raises(InvalidArgument):
        async for e in log.replay(0):
            got.append(e)
    assert flat(got) == "Hi. $"


async def test_stalled_only_when_speakable_text_waited_past_the_timeout(monkeypatch):
    policy = BufferPolicy(min_chars=60, max_wait_s=0.4)
    log = TextLog(events([TextEvent("Hel")]))
    await log.pump()
    clock = [log.arrived[-1][1]]
    monkeypatch.setattr("services.router.failover.time.monotonic", lambda: clock[0])
    clock[0] += 100
    assert not log.stalled(0, 0.0, 2.0, policy), "one unfinished word: nothing is due"
    log.text += "lo world"
    log.arrived.append((len(log.text), clock[0]))
    clock[0] += 2.0
    assert not log.stalled(0, 0.0, 2.0, policy), "due only after the max-wait timer"
    clock[0] += 0.5
    assert log.stalled(0, 0.0, 2.0, policy)
    assert not log.stalled(len(log.text), 0.0, 2.0, policy), "all spoken: nothing owed"
    assert not log.stalled(0, clock[0] - 1.0, 2.0, policy), "audio came a second ago"


async def test_a_finished_sentence_is_due_when_it_arrived(monkeypatch):
    policy = BufferPolicy(min_chars=60, max_wait_s=5.0)
    log = TextLog(events([TextEvent("One more"), TextEvent(" thing. And")]))
    await log.pump()
    clock = [log.arrived[-1][1] + 2.5]
    monkeypatch.setattr("services.router.failover.time.monotonic", lambda: clock[0])
    assert log.stalled(0, 0.0, 2.0, policy), "the sentence end came 2.5 s ago; the timer rule would wait 5 s more"
    assert not log.stalled(0, 0.0, 3.0, policy)
