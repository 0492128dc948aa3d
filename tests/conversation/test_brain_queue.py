"""The brain's queue (services/conversation/brain_queue.py, services/common/brain_requests.py): a committed turn's
reply is served before other sessions' speculative work, a read-ahead never waits, and a session's admission reads
what a committed turn would wait (issue 49). The order is checked as events, never as times."""

from __future__ import annotations

import asyncio

import pytest

from services.common.brain_requests import HELD, JUDGEMENT, READ_AHEAD, TURN, RankedPlaces
from services.common.errors import ResourceExhausted
from services.common.scheduler import Admission
from services.common.sts_servicer import _FirstWordsWait
from services.conversation.brain_queue import FORGET_HALF_LIFE_S, WEIGHT, BrainQueue


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def served_in_order(places: RankedPlaces, kinds: list) -> list[str]:
    """One place held while every request in ``kinds`` (label, kind or callable) arrives; the order they got it."""
    order: list[str] = []
    hold = asyncio.Event()

    async def first():
        async with places.place(lambda: TURN):
            await hold.wait()

    async def request(label, kind):
        async with places.place(kind if callable(kind) else (lambda: kind)):
            order.append(label)
            await asyncio.sleep(0)

    holder = asyncio.create_task(first())
    await asyncio.sleep(0)
    waiters = []
    for label, kind in kinds:
        waiters.append(asyncio.create_task(request(label, kind)))
        await asyncio.sleep(0)  # each queued before the next arrives
    assert places.waiting() == len(kinds)
    hold.set()
    await asyncio.gather(holder, *waiters)
    return order


async def test_a_committed_turn_is_served_before_earlier_held_replies_and_readings():
    order = await served_in_order(
        RankedPlaces(1),
        [("held-a", HELD), ("judgement-b", JUDGEMENT), ("turn-c", TURN), ("held-d", HELD), ("turn-e", TURN)],
    )
    assert order == ["turn-c", "turn-e", "held-a", "judgement-b", "held-d"]


async def test_a_held_reply_whose_turn_commits_while_it_waits_moves_up():
    committed = {"yes": False}

    def held_then_turn():
        return TURN if committed["yes"] else HELD

    places = RankedPlaces(1)

    async def commit_soon():
        await asyncio.sleep(0)
        committed["yes"] = True

    committing = asyncio.create_task(commit_soon())
    order = await served_in_order(places, [("judgement-a", JUDGEMENT), ("held-b", held_then_turn)])
    await committing
    assert order == ["held-b", "judgement-a"]


async def test_two_places_serve_two_at_once_and_queue_the_third():
    places = RankedPlaces(2)
    inside = []
    release = asyncio.Event()

    async def request(label):
        async with places.place(lambda: TURN):
            inside.append(label)
            await release.wait()

    tasks = [asyncio.create_task(request(n)) for n in "abc"]
    await asyncio.sleep(0.01)
    assert sorted(inside) == ["a", "b"] and places.waiting() == 1
    release.set()
    await asyncio.gather(*tasks)
    assert inside[-1] == "c" and places.busy == 0


async def test_a_caller_that_hangs_up_while_waiting_leaves_the_queue_and_the_place_goes_on():
    places = RankedPlaces(1)
    hold = asyncio.Event()
    served = []

    async def holder():
        async with places.place(lambda: TURN):
            await hold.wait()

    async def request(label):
        async with places.place(lambda: TURN):
            served.append(label)

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    gone = asyncio.create_task(request("hung-up"))
    stays = asyncio.create_task(request("stays"))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert places.waiting() == 1
    hold.set()
    await asyncio.gather(first, stays)
    assert served == ["stays"] and places.busy == 0


async def test_a_read_ahead_never_waits_it_is_skipped_while_the_brain_is_busy():
    queue = BrainQueue("test-queue", 1)
    async with queue.place_if_idle() as place:
        assert place is True  # idle: served
    async with queue.place(TURN):
        async with queue.place_if_idle() as place:
            assert place is None  # busy: skipped, not queued
        assert queue.places.waiting(READ_AHEAD) == 0


async def test_a_committed_turns_predicted_wait_counts_the_turns_queued_and_forgets_a_load_that_went():
    clock = Clock()
    queue = BrainQueue("test-queue-wait", 1, clock=clock)
    assert queue.turn_wait_s() == 0.0
    hold = asyncio.Event()

    async def turn(wait_for_hold: bool):
        async with queue.place(TURN):  # every turn holds the brain 2 s
            if wait_for_hold:
                await hold.wait()
            clock.now += 2.0

    # The first turn got the brain at once; the second waited the first's 2 s.
    first = asyncio.create_task(turn(True))
    await asyncio.sleep(0)
    second = asyncio.create_task(turn(False))
    await asyncio.sleep(0)
    hold.set()
    await asyncio.gather(first, second)
    recent = WEIGHT * 2.0  # the average of the waits 0 s, then 2 s, as the second turn got the brain
    since = 2.0  # it has held the brain since
    assert queue.turn_wait_s() == pytest.approx(recent * 0.5 ** (since / FORGET_HALF_LIFE_S))
    clock.now += FORGET_HALF_LIFE_S
    # half as much again after a half-life without turns
    assert queue.turn_wait_s() == pytest.approx(recent * 0.5 ** (since / FORGET_HALF_LIFE_S + 1))
    # Three turns queued behind a busy brain, each to hold it 2 s as recent turns did: about 6 s for the next.
    hold = asyncio.Event()
    busy = asyncio.create_task(turn(True))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(turn(False)) for _ in range(3)]
    await asyncio.sleep(0)
    assert queue.turn_wait_s() == pytest.approx(6.0)
    hold.set()
    await asyncio.gather(busy, *queued)


class WaitingEngine:
    def __init__(self, wait: float | None):
        self.wait = wait

    def first_words_wait_s(self):
        return self.wait


def test_a_new_session_is_refused_while_a_committed_turn_would_wait_past_the_budget_with_a_retry_hint():
    admission = Admission(
        "test",
        4,
        1.0,
        field="moss_sts.max_concurrent_sessions",
        unit="sessions",
        wait_field="moss_sts.max_first_words_wait_ms",
        waits_for="start a turn's reply",
    )
    with pytest.raises(ResourceExhausted, match=r"max_first_words_wait_ms.*retry in") as refused:
        with admission.stream(_FirstWordsWait(WaitingEngine(3.0))):
            pass
    assert refused.value.retry_after_s >= 1.0
    assert admission.active == 0
    for within in (0.5, None):  # within the budget, or an engine that cannot say: admitted
        with admission.stream(_FirstWordsWait(WaitingEngine(within))):
            assert admission.active == 1
    # No session open: the load the recent turns waited behind has gone, whatever they waited.
    with admission.stream(_FirstWordsWait(WaitingEngine(3.0), sessions=lambda: 0)):
        assert admission.active == 1


@pytest.mark.parametrize(("engine", "configured", "expected"), [("cpu", 0, None), ("gpu", 0, 4), ("cpu", 7, 7)])
def test_the_default_session_capacity_is_the_measured_one_per_core_for_the_cpu_cascade(engine, configured, expected):
    from services.common.config import load_config
    from services.common.scheduler import cpu_cores
    from services.common.sts_servicer import CPU_SESSIONS_PER_CORE, StsLimits

    section = load_config().moss_sts.model_copy(update={"engine": engine, "max_concurrent_sessions": configured})
    capacity = StsLimits.from_config(section).max_concurrent_sessions
    assert capacity == (expected if expected is not None else CPU_SESSIONS_PER_CORE * cpu_cores())
    assert load_config().moss_sts.max_concurrent_sessions == 0  # shipped: the measured default
