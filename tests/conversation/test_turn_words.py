"""WordsJudge (services/conversation/turn_words.py): the brain's log P(end of turn) read as unfinished (below
``moss_sts.brain_turn_logprob``), doubtful (its SureRule score, with the turn model's probability and the recognizer's
confidence, below ``brain_turn_sure_logprob``) or finished, and counted by verdict.
The score is a stand-in for the brain's /v1/end_of_turn (the real one: tests/brain/test_brain_turn.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from services.common import metrics
from services.common.config import MossStsConfig
from services.conversation.dialogue.limits import DialogueLimits
from services.conversation.turn_words import SOUND_LOGODDS_MAX, SureRule, TurnSigns, WordsJudge

LABELS = ("cascade", "test-words")


def count(verdict: str) -> float:
    return metrics.STS_WORDS_JUDGEMENTS.labels(*LABELS, verdict)._value.get()  # noqa: SLF001 - the counter's value


@pytest.mark.parametrize(
    "logprob,verdict",
    [(-4.0, "unfinished"), (-3.0, "doubtful"), (-1.9, "doubtful"), (-1.5, "finished"), (-0.2, "finished")],
)
async def test_a_reading_is_unfinished_doubtful_or_finished_and_counted(logprob, verdict):
    done = asyncio.Event()

    async def score(text: str) -> float:
        return logprob

    judge = WordsJudge(score, -3.0, LABELS, done.set, sure=SureRule(-1.5))
    before = count(verdict)
    judge.start("the train to the coast", 0)
    await asyncio.wait_for(done.wait(), 10)
    assert (judge.unfinished, judge.doubtful) == (verdict == "unfinished", verdict == "doubtful")
    assert count(verdict) == before + 1


async def test_without_a_sure_threshold_nothing_is_doubtful():
    done = asyncio.Event()

    async def score(text: str) -> float:
        return -2.0

    judge = WordsJudge(score, -3.0, LABELS, done.set)
    judge.start("Tell me a joke", 0)
    await asyncio.wait_for(done.wait(), 10)
    assert not judge.unfinished and not judge.doubtful


async def judged(logprob: float, signs: TurnSigns, rule: SureRule) -> WordsJudge:
    done = asyncio.Event()

    async def score(text: str) -> float:
        return logprob

    judge = WordsJudge(score, -3.0, LABELS, done.set, sure=rule)
    judge.start("From fairest creatures we deserve it.", 0, signs)
    await asyncio.wait_for(done.wait(), 10)
    return judge


RULE = DialogueLimits.from_config(
    MossStsConfig()
).words_sure  # the shipped rule (docs/conversation.md#the-words-judgement)


async def test_words_the_recognizer_was_unsure_of_read_doubtful():
    # A cut phrase whisper completed into a sentence: the brain reads it finished (-0.49), but whisper's confidence
    # in it was 0.59 and the turn model heard 0.78 (bench/results/turn-signs-2026-11-30/).
    unsure = await judged(-0.49, TurnSigns(sound=0.78, confidence=0.59), RULE)
    assert unsure.verdict == "doubtful"
    sure = await judged(-0.49, TurnSigns(sound=0.78, confidence=0.93), RULE)
    assert sure.verdict == "finished"


async def test_a_pause_the_turn_model_heard_unfinished_makes_words_doubtful():
    assert (await judged(-0.6, TurnSigns(sound=0.05, confidence=0.9), RULE)).verdict == "doubtful"
    assert (await judged(-0.6, TurnSigns(sound=0.97, confidence=0.9), RULE)).verdict == "finished"


async def test_signs_learned_after_the_reading_change_the_verdict():
    # A candidate started on a pause's words gets its final's confidence after the brain read them.
    judge = await judged(-0.4, TurnSigns(sound=0.5), RULE)
    assert judge.verdict == "finished"
    judge.learn(TurnSigns(sound=0.5, confidence=0.55))
    assert judge.verdict == "doubtful"


async def test_unknown_signs_leave_the_log_p_alone():
    assert (await judged(-0.4, TurnSigns(), RULE)).verdict == "finished"
    assert (await judged(-0.6, TurnSigns(), RULE)).verdict == "doubtful"


async def test_a_whole_line_the_turn_model_heard_far_from_finished_reads_sure():
    """The fleet's long, whole lines in a session that keeps its history: the brain reads the words finished (-0.37),
    the final is confident (0.92), and the turn model heard the end at p 0.028 (load_one_session.txt in
    bench/results/conversation-2026-11-30-signs/). Its log-odds count from the floor up, so the words read sure;
    without the floor they waited the doubtful band."""
    signs = TurnSigns(sound=0.028, confidence=0.92)
    assert (await judged(-0.37, signs, RULE)).verdict == "finished"
    unbounded = dataclasses.replace(RULE, sound_floor=-SOUND_LOGODDS_MAX)
    assert (await judged(-0.37, signs, unbounded)).verdict == "doubtful"
    # The floor bounds only the "unfinished" tail: a turn model sure the pause ends the turn still counts in full.
    assert (
        RULE.score(-1.0, TurnSigns(sound=0.99)) > RULE.score(-1.0, TurnSigns(sound=0.8)) > RULE.score(-1.0, TurnSigns())
    )
