"""ReadAhead: which drafts the brain reads ahead of the turn: one at a time, none once the caller paused, the
turn's earlier finals before it (services/conversation/dialogue/read_ahead.py)."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from services.conversation.dialogue.read_ahead import READ_AHEAD_QUIET_MS, ReadAhead, as_final_begins

LABELS = ("test_read_ahead", "engine")


def count(outcome: str) -> float:
    labels = {"service": LABELS[0], "engine": LABELS[1], "outcome": outcome}
    return REGISTRY.get_sample_value("voicefleet_sts_brain_read_aheads_total", labels) or 0.0


def test_a_draft_is_read_as_the_final_will_begin():
    assert as_final_begins("  hello there ") == "Hello there"
    assert as_final_begins("") == ""


async def test_one_reading_at_a_time_with_the_turns_earlier_words_first():
    read: list[str] = []
    gate = asyncio.Event()

    async def brain(text: str) -> bool:
        read.append(text)
        await gate.wait()
        return True

    ahead = ReadAhead(brain, LABELS)
    done = count("done")
    ahead.offer(["I want a pizza."], "with extra", quiet_ms=0)
    ahead.offer(["I want a pizza."], "with extra cheese", quiet_ms=0)  # the first is under way: dropped
    await asyncio.sleep(0)
    assert read == ["I want a pizza. With extra"]
    gate.set()
    await ahead.task
    assert count("done") == done + 1
    ahead.offer([], "and chips", quiet_ms=0)
    await ahead.task
    assert read[-1] == "And chips"


async def test_no_reading_once_the_caller_paused_and_a_failed_one_is_counted():
    async def brain(text: str) -> bool:
        raise RuntimeError("brain down")

    ahead = ReadAhead(brain, LABELS)
    skipped, failed = count("skipped"), count("failed")
    ahead.offer([], "hello", quiet_ms=READ_AHEAD_QUIET_MS + 1)
    assert ahead.task is None and count("skipped") == skipped + 1
    ahead.offer([], "hello", quiet_ms=READ_AHEAD_QUIET_MS)
    await ahead.task
    assert count("failed") == failed + 1
