"""Barge-in by words (services/conversation/barge_in.py): which transcripts of speech over a reply interrupt it.

The transcripts are what the recognizers wrote for piper saying each word (pass 1 = pocketsphinx interims, pass 2 =
whisper finals), collected on the dev machine on 2026-11-25 — not made up to fit the rule.
"""

from __future__ import annotations

import pytest

from services.conversation.barge_in import DEFAULT_MIN_WORDS, WordRule, words

RULE = WordRule((), (), 0)


@pytest.mark.parametrize(
    "transcript",
    ["Stop.", "stop please", "Wait.", "wait", "Hold on.", "hold on a second", "No, no, no.", "Excuse me?"],
)
def test_a_stop_word_interrupts(transcript):
    verdict = RULE.judge(transcript)
    assert (verdict.interrupt, verdict.why) == (True, "stop_word")


@pytest.mark.parametrize(
    "transcript",
    # whisper finals and pocketsphinx interims of piper saying "Mm-hm.", "Uh-huh.", "Yeah.", "Okay.", "Right."
    ["Mm-hmm.", "m m h m", "Uh-huh.", "ah", "Yeah.", "yeah", "Okay.", "okay", "Right.", "right", "Okay, okay."],
)
def test_a_backchannel_never_interrupts(transcript):
    verdict = RULE.judge(transcript)
    assert not verdict.interrupt
    assert verdict.why == "backchannel"


def test_enough_words_interrupt_and_fewer_wait():
    assert RULE.judge("What about tomorrow at noon?") == RULE.judge("what about tomorrow")
    assert RULE.judge("what about tomorrow").interrupt
    assert RULE.judge("what about tomorrow").why == "words"
    # pass 1's guesses at a hum: too few words that are neither backchannels nor fillers
    assert not RULE.judge("and i'm a").interrupt
    assert RULE.judge("and i'm a").why == "too_few_words"
    assert RULE.judge("and the nature of them").why == "too_few_words"
    assert not RULE.judge("").interrupt


def test_session_settings_replace_the_defaults():
    rule = WordRule(("pineapple",), ("sure",), 2)
    assert rule.judge("pineapple").why == "stop_word"
    assert not rule.judge("stop").interrupt  # not a stop word for this session; one content word < 2
    assert rule.judge("stop now").why == "words"
    assert not rule.judge("sure sure").interrupt
    assert rule.min_words == 2 and DEFAULT_MIN_WORDS != 2


def test_words_are_normalised_like_the_recognizers_write_them():
    assert words("Mm-hm, UH-HUH! it's") == ["mmhm", "uhhuh", "it's"]
