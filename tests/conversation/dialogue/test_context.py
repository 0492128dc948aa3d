"""Context: the dialogue so far, bounded, trimmed in halves, starting with the user (services/conversation/dialogue/
context.py). Bounds and halving: tests/moss_sts/test_conversation_moss_stream.py."""

from __future__ import annotations

from services.conversation.dialogue.context import Context, Message


def test_user_turns_that_got_no_reply_merge_so_roles_alternate():
    ctx = Context(8, 1000)
    ctx.add(Message("user", "Hello"))
    ctx.add(Message("user", "are you there?"))
    ctx.add(Message("assistant", "Yes."))
    assert ctx.chat("Be brief.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello are you there?"},
        {"role": "assistant", "content": "Yes."},
    ]


def test_user_turns_with_audio_stay_apart_and_empty_messages_are_not_kept():
    ctx = Context(8, 1000)
    ctx.add(Message("user", "Hi", b"\0\0"))
    ctx.add(Message("user", "again", b"\0\0"))
    ctx.add(Message("assistant", ""))
    assert [m.text for m in ctx.messages] == ["Hi", "again"]


def test_the_context_starts_with_the_user_after_a_trim():
    ctx = Context(1, 1000)
    for i in range(3):
        ctx.add(Message("user", f"q{i}"))
        ctx.add(Message("assistant", f"a{i}"))
    assert ctx.messages[0].role == "user"
    assert ctx.chat("")[0] == {"role": "user", "content": "q2"}
