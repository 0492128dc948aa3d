"""WordsJudge (services/conversation/turn_words.py): the brain's log P(end of turn) read as unfinished (below
``moss_sts.brain_turn_logprob``), doubtful (below ``brain_turn_sure_logprob``) or finished, and counted by verdict.
The score is a stand-in for the brain's /v1/end_of_turn (the real one: tests/brain/test_brain_turn.py)."""

from __future__ import annotations

import asyncio

import pytest

from services.common import metrics
from services.conversation.turn_words import WordsJudge

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

    judge = WordsJudge(score, -3.0, LABELS, done.set, sure_from=-1.5)
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
