"""function_calls: the agent's call of a caller's function (services/conversation/dialogue/function_calls.py): sent
only after the turn commits, answered, cancelled by a barge-in or the timeout, and a filler when the output is late.
Timeouts here are tens of milliseconds of the test's own clock, never asserted as durations."""

from __future__ import annotations

import asyncio

import pytest

from services.common.engines import FUNCTION_CALL, FUNCTION_CALL_CANCELLED
from services.common.errors import DeadlineExceeded, InvalidArgument
from services.conversation.dialogue.function_calls import FunctionCalls
from services.conversation.dialogue.reply import Reply, UserTurn

LABELS = ("test", "cascade")


def setup(timeout_s=5.0, filler_s=0.0):
    events = []
    return (
        FunctionCalls(events.append, timeout_s, LABELS, filler_s),
        events,
        Reply(UserTurn(3, "Weather?", None, None, 0.0)),
    )


async def test_a_held_reply_calls_only_after_its_turn_commits_and_gets_the_output():
    calls, events, reply = setup()
    reply.held = True
    task = asyncio.create_task(calls.call(reply, "get_weather", '{"city": "Paris"}'))
    await asyncio.sleep(0.05)
    assert not events, "a call went out before the turn committed"
    reply.release()
    await asyncio.sleep(0.05)
    assert [e.kind for e in events] == [FUNCTION_CALL, FUNCTION_CALL]
    call_id = events[-1].call.call_id
    assert events[-1].call.done and events[-1].call.arguments == '{"city": "Paris"}' and events[-1].turn_index == 3
    calls.answer(call_id, "sunny")
    done = await task
    assert (done.call_id, done.name, done.output) == (call_id, "get_weather", "sunny")
    calls.answer(call_id, "again")  # answered already: dropped, not an error
    with pytest.raises(InvalidArgument) as caught:
        calls.answer("call_nobody", "x")
    assert caught.value.field == "function_call_output.call_id"


async def test_a_discarded_reply_never_calls():
    calls, events, reply = setup()
    reply.held = True
    task = asyncio.create_task(calls.call(reply, "get_weather", "{}"))
    await asyncio.sleep(0.01)
    reply.discard()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not events


async def test_a_barge_in_cancels_the_call_and_a_late_output_is_dropped():
    calls, events, reply = setup()
    task = asyncio.create_task(calls.call(reply, "get_weather", "{}"))
    await asyncio.sleep(0.01)
    reply.interrupted_reason = "barge_in"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events[-1].kind == FUNCTION_CALL_CANCELLED and events[-1].reason == "barge_in"
    calls.answer(events[0].call.call_id, "late")  # no error


async def test_no_output_in_time_cancels_the_call_and_fails_the_turn():
    calls, events, reply = setup(timeout_s=0.05)
    with pytest.raises(DeadlineExceeded) as caught:
        await calls.call(reply, "get_weather", "{}")
    assert "tool_timeout_ms" in caught.value.message
    assert events[-1].kind == FUNCTION_CALL_CANCELLED and events[-1].reason == "timeout"


async def test_a_late_output_gets_the_filler_once():
    calls, events, reply = setup(timeout_s=5.0, filler_s=0.02)
    said = []

    async def filler():
        said.append("One moment.")

    task = asyncio.create_task(calls.call(reply, "get_weather", "{}", filler))
    await asyncio.sleep(0.1)
    calls.answer(events[-1].call.call_id, "sunny")
    assert (await task).output == "sunny" and said == ["One moment."]
    calls2, events2, reply2 = setup(timeout_s=5.0, filler_s=1.0)
    task = asyncio.create_task(calls2.call(reply2, "get_weather", "{}", filler))
    await asyncio.sleep(0.01)
    calls2.answer(events2[-1].call.call_id, "sunny")  # in time: no filler
    await task
    assert said == ["One moment."]
