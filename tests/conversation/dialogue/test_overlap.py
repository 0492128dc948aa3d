"""Overlap: does speech over the agent's reply interrupt it? Stop words at once, enough stable words after
barge_in.min_speech_ms, long unheard speech, never a backchannel or the reply's own words
(services/conversation/dialogue/overlap.py)."""

from __future__ import annotations

from prometheus_client import REGISTRY

from services.common.engines import LISTENING, SPEAKING, BargeIn, Hypothesis, SpottedPhrase
from services.conversation.dialogue.caller_sound import CallerSound
from services.conversation.dialogue.heard import SentPiece
from services.conversation.dialogue.overlap import Overlap, reply_echo
from services.conversation.dialogue.reply import Reply, UserTurn

LABELS = ("test_overlap", "engine")


def refused(why: str) -> float:
    labels = {"service": LABELS[0], "engine": LABELS[1], "why": why}
    return REGISTRY.get_sample_value("voicefleet_sts_barge_in_refused_total", labels) or 0.0


def interim(text: str, utt: int = 1) -> Hypothesis:
    return Hypothesis(text, False, utt, 0, 0, 0)


def final(text: str, utt: int = 1) -> Hypothesis:
    return Hypothesis(text, True, utt, 0, 0, 0)


def nobody(_: str) -> bool:
    return False


def over(start_ms: int = 3000, **barge_in) -> Overlap:
    overlap = Overlap(BargeIn(**barge_in), 1500, LABELS)
    overlap.began(1, start_ms)
    return overlap


def test_a_stop_word_interrupts_at_once():
    overlap = over()
    assert overlap.judge_interim(interim("stop"), 3020, True, nobody) == "stop_word"
    assert overlap.judge_interim(interim("please hold on"), 3020, True, nobody) == "stop_word"


def test_words_interrupt_only_once_two_interims_agree_and_the_speech_lasted_min_speech():
    overlap = over()
    assert overlap.judge_interim(interim("what do you mean"), 3600, True, nobody) is None  # nothing stable yet
    assert overlap.judge_interim(interim("what do you mean by"), 3600, True, nobody) == "words"
    early = over()
    early.judge_interim(interim("what do you mean"), 3100, True, nobody)
    assert early.judge_interim(interim("what do you mean"), 3100, True, nobody) is None  # 100 ms < 500 ms
    wild = over()
    wild.judge_interim(interim("and i'm home tonight"), 3600, True, nobody)
    assert wild.judge_interim(interim("and then we chant"), 3600, True, nobody) is None  # pass 1 guessing at a hum


def test_backchannels_the_replys_echo_and_disabled_barge_in_never_interrupt():
    overlap = over()
    for _ in range(2):
        assert overlap.judge_interim(interim("mm hmm okay"), 4000, True, nobody) is None
    assert overlap.judge_interim(interim("stop"), 4000, True, lambda t: True) is None
    off = over(enabled=False)
    assert off.judge_interim(interim("stop"), 4000, True, nobody) is None
    assert 1 in off.ignored
    assert overlap.judge_interim(interim("stop"), 4000, False, nobody) is None  # the speech has ended


def test_a_final_of_speech_that_ended_over_the_reply_interrupts_only_with_a_stop_word():
    overlap = over()
    overlap.ended()
    assert overlap.finals == {1: 3000} and overlap.utt is None
    before = refused("backchannel")
    assert overlap.judge_final(final("Mm-hm."), 0, SPEAKING, nobody) is None
    assert refused("backchannel") == before + 1 and overlap.finals == {}
    overlap.began(2, 5000)
    overlap.ended()
    before = refused("short_speech")
    assert overlap.judge_final(final("Tell me more about it.", utt=2), 0, SPEAKING, nobody) is None
    assert refused("short_speech") == before + 1
    overlap.began(3, 6000)
    overlap.ended()
    assert overlap.judge_final(final("Stop.", utt=3), 0, SPEAKING, nobody) == ("stop_word", 6000)
    overlap.began(4, 7000)
    overlap.ended()
    assert overlap.judge_final(final("Stop.", utt=4), 0, SPEAKING, lambda t: True) is None  # its echo
    overlap.began(5, 8000)
    overlap.ended()
    assert overlap.judge_final(final("Stop.", utt=5), 0, LISTENING, lambda t: True) == ("stop_word", 8000)


def test_a_spotted_stop_word_interrupts_speech_over_the_reply_even_after_it_ended():
    overlap = over()
    spotted = SpottedPhrase("stop", "Stop. Stop. Stop.", 1, 0, 200)
    seen = []
    assert overlap.spotted(spotted, lambda t: seen.append(t) or False)
    assert seen == ["stop"]  # the repeats of a padded young utterance are compared once
    assert (overlap.start_ms, overlap.utt) == (3000, 1)
    ended = over(start_ms=4000)
    ended.ended()
    assert ended.spotted(SpottedPhrase("stop", "stop", 1, 0, 200), nobody)
    assert ended.finals == {} and (ended.start_ms, ended.utt) == (4000, 1)
    assert not over().spotted(SpottedPhrase("stop", "stop", 7, 0, 200), nobody)  # not speech over the reply


def test_long_speech_interrupts_after_barge_in_unheard_ms_of_sound_without_a_pause():
    overlap = over(start_ms=3000)
    sound = CallerSound()
    sound.sound_since_ms, sound.last_loud_ms = 2900, 4499
    assert not overlap.long_speech(4500, sound, True, SPEAKING)
    sound.last_loud_ms = 4500
    assert overlap.long_speech(4500, sound, True, SPEAKING)
    assert not overlap.long_speech(4500 + 160, sound, True, SPEAKING)  # it stopped sounding
    assert not overlap.long_speech(4500, sound, True, LISTENING)
    sound.sound_since_ms = 3500  # a pause in it: counted from the new run of sound
    assert not overlap.long_speech(4500, sound, True, SPEAKING)


def test_the_barging_utterance_becomes_the_next_turns():
    overlap = over(start_ms=3000)
    assert overlap.barged() == (3000, 1)
    assert overlap.barged_utt == 1 and overlap.start_ms is None
    overlap.began(2, 5000)
    assert overlap.reply_over() == (5000, 2) and overlap.utt is None
    overlap.new_stream()
    assert overlap.barged_utt is None and overlap.finals == {} and overlap.ignored == set()


def test_the_replys_own_words_heard_back_are_its_echo():
    reply = Reply(UserTurn(0, "q", None, None, 0.0), text="You can say stop at any time.")
    reply.pieces.append(SentPiece(0, len(reply.text), 100, 100))
    before = refused("own_words")
    assert reply_echo(reply, "say stop at any time", LABELS)
    assert refused("own_words") == before + 1
    assert not reply_echo(reply, "what is the weather like", LABELS)
    assert not reply_echo(None, "stop", LABELS)
