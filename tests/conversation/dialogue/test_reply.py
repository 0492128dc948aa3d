"""Reply: the held reply's bookkeeping (held text, release at the commit, discard) and the turn's timings
(services/conversation/dialogue/reply.py)."""

from __future__ import annotations

import asyncio

from services.conversation.dialogue.reply import Reply, UserTurn


def turn(**kw) -> UserTurn:
    return UserTurn(3, "Hello there.", None, speech_end_wall=10.0, transcript_wall=10.2, **kw)


def test_a_held_reply_keeps_its_text_until_released():
    reply = Reply(turn(), held=True)
    assert reply.hold_text("Hi") and reply.hold_text(" there.")
    assert not reply.released.is_set()
    assert reply.release() == ["Hi", " there."]
    assert reply.released.is_set() and not reply.held and reply.held_text == []
    assert not reply.hold_text(" More.")  # released: text goes out as it comes


def test_a_reply_not_held_sends_its_text_at_once():
    reply = Reply(turn())
    assert not reply.hold_text("Hi") and reply.held_text == []


async def test_a_discarded_reply_cancels_its_generation_and_wakes_the_commit_waiters():
    reply = Reply(turn(), held=True)
    reply.gen_task = asyncio.create_task(asyncio.sleep(10))
    reply.discard()
    assert reply.discarded and reply.released.is_set()
    await asyncio.wait({reply.gen_task})
    assert reply.gen_task.cancelled()


def test_the_result_times_every_step_from_the_speech_end():
    reply = Reply(turn(commit_wall=10.3, discarded=2, preemptive=True), text="Hi.", served_by="s/e")
    reply.first_text_wall, reply.first_audio_wall, reply.sent_s = 10.5, 10.9, 1.25
    result = reply.result("Hi.", interrupted=False)
    t = result.timings
    assert (result.user_text, result.reply_text, result.interrupted, result.served_by) == (
        "Hello there.",
        "Hi.",
        False,
        "s/e",
    )
    assert round(t.speech_end_to_first_audio, 6) == 0.9
    assert round(t.speech_end_to_transcript, 6) == 0.2
    assert round(t.transcript_to_first_text, 6) == 0.3
    assert round(t.speech_end_to_commit, 6) == 0.3
    assert (t.reply_audio, t.discarded_replies, t.preemptive) == (1.25, 2, True)
    no_end = Reply(UserTurn(0, "x", None, None, 1.0)).result("", False).timings
    assert no_end.speech_end_to_first_audio is None and no_end.speech_end_to_transcript is None
