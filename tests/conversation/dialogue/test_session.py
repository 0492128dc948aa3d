"""DialogueSession as the composition of its parts: whole scripted sessions with a stand-in recognizer and reply, in
virtual time (tests/conversation/dialogue/kit.py): the commit's timing, a held reply dropped when the user goes on,
barge-in by a stop word, a backchannel that does not interrupt, a turn that runs too long."""

from __future__ import annotations

import pytest

from services.common.config import MossStsConfig
from services.common.engines import (
    INTERRUPT,
    INTERRUPTED,
    REPLY_TEXT,
    RESPOND,
    STATE,
    THINKING,
    TURN_COMPLETE,
    TURN_ERROR,
    USER_TRANSCRIPT,
    BargeIn,
    SessionOptions,
)
from services.common.errors import FailedPrecondition
from services.conversation.dialogue import DialogueLimits
from tests.conversation.dialogue.kit import (
    Replies,
    ScriptedAsr,
    end,
    estimate,
    final,
    interim,
    start,
    talk,
    virtual_time,
)

OPTIONS = SessionOptions(language="en", barge_in=BargeIn(), request_id="test")
TURN = [start(300), interim(700, 0, "hello"), end(1100, 1000), final(1100, 0, "Hello there.")]


def session(*scripts, cls=Replies, **limits) -> Replies:
    asr = ScriptedAsr(*scripts)
    return cls(
        "test_dialogue", "test_dialogue/scripted", asr, OPTIONS, DialogueLimits(echo_cancellation=False, **limits)
    )


# Events are timed when they come out; the frame fed at t carries the stream's audio up to t + 20 ms, so a decision
# at stream ms X comes out at about X - 20.


def of(events, kind):
    return [(ms, e) for ms, e in events if e.kind == kind]


def test_a_reply_held_at_the_final_commits_turn_commit_ms_after_the_speech_ended(monkeypatch):
    s = session(TURN)
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 1000)], 5000))
    thinking = [ms for ms, e in of(events, STATE) if e.state == THINKING]
    assert len(thinking) == 1 and 1250 - 20 <= thinking[0] <= 1250 + 20, thinking
    [(_, done)] = of(events, TURN_COMPLETE)
    t = done.result.timings
    assert t.preemptive and abs(t.speech_end_to_commit - 0.25) <= 0.03
    assert s.asked == ["Hello there."]
    assert [m.role for m in s.context.messages] == ["user", "assistant"]


def test_a_turn_commits_at_its_final_with_turn_commit_ms_0(monkeypatch):
    s = session(TURN, turn_commit_ms=0)
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 1000)], 5000))
    thinking = [ms for ms, e in of(events, STATE) if e.state == THINKING]
    assert len(thinking) == 1 and 1100 - 20 <= thinking[0] <= 1100 + 20, thinking
    assert not of(events, TURN_COMPLETE)[0][1].result.timings.preemptive


def test_the_held_reply_is_dropped_when_the_user_goes_on(monkeypatch):
    script = [
        *[start(300), end(1000, 900), final(1000, 0, "I want")],
        *[start(1100), end(1900, 1600), final(1900, 1, "a pizza please.")],
    ]
    s = session(script)
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 900), (1080, 1600)], 6000))
    assert s.asked == ["I want", "I want a pizza please."]
    [(_, done)] = of(events, TURN_COMPLETE)
    assert done.result.user_text == "I want a pizza please." and done.result.timings.discarded_replies == 1
    texts = of(events, REPLY_TEXT)
    assert texts and min(ms for ms, _ in texts) >= 1850  # nothing of the dropped reply went out
    assert [m.text for m in s.context.messages][0] == "I want a pizza please."


class JudgedReplies(Replies):
    judges_words = True
    logprobs = {"From fairest creatures we deserve it.": -0.49}


@pytest.mark.parametrize("confidence,commit_ms", [(0.93, 1250), (0.59, 2400)])
def test_words_the_recognizer_was_unsure_of_wait_the_doubt(monkeypatch, confidence, commit_ms):
    """The brain reads the words finished either way; with the turn model's judgement of the pause (0.78) and the
    final's confidence they read surely finished (commit turn_commit_ms after the speech), or doubtfully (a cut phrase
    whisper completed into a sentence: the commit waits words_doubt_ms after the speech ended at 1000)."""
    script = [
        *[start(300), end(1100, 1000), estimate(1100, 0, 100, probability=0.78)],
        final(1120, 0, "From fairest creatures we deserve it.", confidence),
    ]
    rule = DialogueLimits.from_config(MossStsConfig()).words_sure  # the shipped rule
    s = session(script, cls=JudgedReplies, words_unfinished_below=-3.0, words_sure=rule, words_doubt_ms=1400)
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 1000)], 5000))
    thinking = [ms for ms, e in of(events, STATE) if e.state == THINKING]
    assert len(thinking) == 1 and commit_ms - 20 <= thinking[0] <= commit_ms + 40, thinking
    assert s.judged == ["From fairest creatures we deserve it."]


def test_a_stop_word_over_the_reply_interrupts_it_and_starts_the_next_turn(monkeypatch):
    script = [*TURN, start(3000), interim(3200, 1, "stop"), end(3600, 3400), final(3700, 1, "Stop.")]
    s = session(script)
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 1000), (3000, 3400)], 7000))
    [(cut_ms, cut)] = of(events, INTERRUPTED)
    assert cut.turn_index == 0 and cut.reason == "barge_in" and 3200 - 20 <= cut_ms <= 3300
    assert cut.heard_text and s.reply_text.startswith(cut.heard_text)
    finals = [e for _, e in of(events, USER_TRANSCRIPT) if e.transcript.is_final]
    assert [(e.turn_index, e.transcript.transcript) for e in finals] == [(0, "Hello there."), (1, "Stop.")]
    assert s.asked == ["Hello there.", "Stop."]
    assert [m.text for m in s.context.messages][:2] == ["Hello there.", cut.heard_text]


def test_a_backchannel_over_the_reply_does_not_interrupt_it(monkeypatch):
    script = [*TURN, start(3000), interim(3200, 1, "mm hm"), end(3600, 3300), final(3700, 1, "Mm-hm.")]
    s = session(script)
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 1000), (3000, 3300)], 9000))
    assert not of(events, INTERRUPTED)
    [(_, done)] = of(events, TURN_COMPLETE)
    assert not done.result.interrupted and done.result.reply_text == s.reply_text
    assert s.asked == ["Hello there."]


def test_a_turn_past_max_user_turn_s_fails_and_the_next_one_is_heard(monkeypatch):
    script = [
        *[start(300), interim(1000, 0, "blah"), end(4500, 4000), final(4600, 0, "Blah.")],
        *[start(5000), end(5600, 5300), final(5700, 1, "Short.")],
    ]
    s = session(script, max_user_turn_s=2.0)
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 4000), (5000, 5300)], 9000))
    [(_, error)] = of(events, TURN_ERROR)
    assert error.turn_index == 0 and error.code == 8  # RESOURCE_EXHAUSTED
    assert s.asked == ["Short."]


def test_a_reply_played_from_a_buffer_is_cut_after_it_ended_to_what_was_played(monkeypatch):
    """The caller got the whole reply and played 2.5 s of it before its user cut in (a Realtime client's truncate
    of a finished item): the context keeps the text of 2.5 s, and INTERRUPTED says so for that turn."""
    s = session(TURN)
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 1000)], 9000, controls=[(8000, INTERRUPT, 2500)]))
    [(_, done)] = of(events, TURN_COMPLETE)
    assert not done.result.interrupted and done.result.reply_text == s.reply_text  # it ended whole
    [(cut_ms, cut)] = of(events, INTERRUPTED)
    assert cut_ms >= 8000 and cut.turn_index == 0 and cut.reason == "client"
    first_sentence = "Sure, here is a fairly long answer."  # 1.81 s of its audio: played whole
    assert cut.heard_text.startswith(first_sentence) and len(cut.heard_text) < len(s.reply_text)
    assert s.reply_text.startswith(cut.heard_text)
    assert [m.text for m in s.context.messages] == ["Hello there.", cut.heard_text]


def test_a_played_position_with_no_reply_ended_whole_changes_nothing(monkeypatch):
    s = session(TURN)
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 1000)], 9000, controls=[(200, INTERRUPT, 1000)]))
    assert not of(events, INTERRUPTED)
    assert [m.text for m in s.context.messages] == ["Hello there.", s.reply_text]


def test_respond_gives_the_agent_a_turn_of_its_own_with_no_user_message(monkeypatch):
    """ACTION_RESPOND while nobody speaks: a reply from the conversation as it is (a greeting here); its TurnComplete
    has no user text, the context holds the reply alone, and the next user turn is the next index."""
    s = session([start(3000), end(3600, 3500), final(3600, 0, "Hello there.")])
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(3000, 3500)], 8000, controls=[(200, RESPOND)]))
    done = [e for _, e in of(events, TURN_COMPLETE)]
    assert [(e.turn_index, e.result.user_text) for e in done] == [(0, ""), (1, "Hello there.")], done
    assert min(ms for ms, _ in of(events, REPLY_TEXT)) < 3000  # the agent spoke before the user said anything
    assert s.asked == ["", "Hello there."]
    assert [m.role for m in s.context.messages] == ["assistant", "user", "assistant"]


def test_respond_while_the_user_has_words_pending_answers_them_and_is_a_no_op_while_the_agent_speaks(monkeypatch):
    s = session(TURN, turn_commit_ms=3000)  # the commit would wait long: RESPOND ends the turn at once
    with virtual_time(monkeypatch) as run:
        events = run(talk(s, [(300, 1000)], 6000, controls=[(1400, RESPOND), (1700, RESPOND)]))
    done = [e for _, e in of(events, TURN_COMPLETE)]
    assert [e.result.user_text for e in done] == ["Hello there."], done
    thinking = [ms for ms, e in of(events, STATE) if e.state == THINKING]
    assert len(thinking) == 1 and thinking[0] < 1500, thinking  # at the control, not at 1000 + 3000 ms


def test_an_engine_that_answers_only_speech_refuses_respond_naming_the_field(monkeypatch):
    class SpeechOnly(Replies):
        speaks_unprompted = False

    s = session(TURN, cls=SpeechOnly)
    with virtual_time(monkeypatch) as run, pytest.raises(FailedPrecondition) as refused:
        run(talk(s, [], 1000, controls=[(100, RESPOND)]))
    assert refused.value.message.startswith("control.action: ACTION_RESPOND:"), refused.value.message
