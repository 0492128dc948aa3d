"""InterimBudget and FinalsInFlight (services/engines/asr/budgets.py): optional work counted across an engine's
streams."""

from __future__ import annotations

import concurrent.futures
import threading

from services.common import metrics
from services.engines.asr.budgets import FinalsInFlight, InterimBudget
from tests.asr.stream.kit import labels, value


def test_a_spent_budget_refuses_and_counts_the_refusal_until_a_slot_comes_back():
    service, engine = labels("budget")
    budget = InterimBudget(service, engine, 2, skipped=metrics.ASR_DRAFTS_SKIPPED)
    skipped = metrics.ASR_DRAFTS_SKIPPED.labels(service, engine)
    assert budget.take() and budget.take()
    assert not budget.take() and value(skipped) == 1
    budget.give_back()
    assert budget.take() and value(skipped) == 1


def test_the_budget_holds_under_threads():
    budget = InterimBudget(*labels("budget"), 3)
    taken = []
    barrier = threading.Barrier(8)

    def grab():
        barrier.wait()
        taken.append(budget.take())

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == [False] * 5 + [True] * 3


def test_finals_in_flight_are_idle_only_once_every_tracked_decode_is_done():
    finals = FinalsInFlight()
    assert finals.idle
    first, second = concurrent.futures.Future(), concurrent.futures.Future()
    assert finals.track(first) is first
    finals.track(second)
    assert not finals.idle
    first.set_result(None)
    assert not finals.idle
    second.cancel()  # a dropped speculative decode counts as done
    assert finals.idle
