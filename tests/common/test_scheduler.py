"""The segment scheduler's order and admission control, with an injected clock (services/common/scheduler.py).

Over real servers: tests/fleet/test_admission.py."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.common.errors import ResourceExhausted, retry_metadata
from services.common.scheduler import Admission, SegmentScheduler


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _settle():
    for _ in range(5):
        await asyncio.sleep(0)


async def test_first_segments_go_before_streams_that_are_ahead_and_late_ones_before_all():
    clock = Clock()
    sched = SegmentScheduler("test", "engine", workers=1, margin_s=0.3, clock=clock)

    ahead = sched.playback()  # 5 s of audio out since t=100: due at 104.7
    ahead.produced(5.0)
    late = sched.playback()  # started at 100 with 0.2 s of audio: its listener ran out at 99.9
    late.produced(0.2)
    clock.now = 101.0
    newcomer_1 = sched.playback()  # nothing sent yet: due when asked (101)
    clock.now = 101.5
    newcomer_2 = sched.playback()

    blocker = await sched.playback().acquire()  # the one worker is busy
    order: list[str] = []

    async def segment(name, playback):
        async with playback.turn():
            order.append(name)

    # Queued in the worst order: the stream that is ahead first, the late one last.
    tasks = []
    for name, playback in [("ahead", ahead), ("newcomer_2", newcomer_2), ("newcomer_1", newcomer_1), ("late", late)]:
        tasks.append(asyncio.create_task(segment(name, playback)))
        await _settle()
    assert sched.waiting == 4 and order == []
    blocker.release()
    await asyncio.gather(*tasks)
    assert order == ["late", "newcomer_1", "newcomer_2", "ahead"]
    assert sched.busy == 0


async def test_a_cancelled_wait_does_not_leak_the_worker():
    clock = Clock()
    sched = SegmentScheduler("test", "engine", workers=1, clock=clock)
    held = await sched.playback().acquire()
    waiting = asyncio.create_task(sched.playback().acquire())
    await _settle()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    held.release()
    again = await asyncio.wait_for(sched.playback().acquire(), 1)  # the worker is free, not lost to the cancel
    assert sched.busy == 1
    again.release()
    again.release()  # idempotent
    assert sched.busy == 0


async def test_workers_run_segments_concurrently_up_to_their_number():
    sched = SegmentScheduler("test", "engine", workers=2, clock=Clock())
    a = await sched.playback().acquire()
    b = await sched.playback().acquire()
    third = asyncio.create_task(sched.playback().acquire())
    await _settle()
    assert sched.busy == 2 and not third.done()
    a.release()
    (await third).release()
    b.release()
    assert sched.busy == 0


async def test_a_reserved_worker_is_kept_for_first_segments_until_a_continuation_is_due():
    """workers=2, reserved=1: with one worker busy, a stream that is still ahead of playback does not take the last
    worker; a newcomer's first segment does, at once. The held continuation starts at its due time even if no
    worker is released then (a timer wakes it), so holding it back never makes its listener run dry."""
    clock = Clock()
    sched = SegmentScheduler("test", "engine", workers=2, margin_s=0.3, clock=clock, reserved=1)
    ahead = sched.playback()
    ahead.produced(0.35)  # playback started at 100 with 0.35 s of audio: due at 100.05
    running = await sched.playback().acquire()  # one worker busy
    held = asyncio.create_task(ahead.acquire())
    await _settle()
    assert not held.done() and sched.waiting == 1, "not due yet: the last free worker stays free"
    newcomer = await asyncio.wait_for(sched.playback().acquire(), 1)
    assert sched.busy == 2
    newcomer.release()
    await _settle()
    assert not held.done() and sched.busy == 1, "a released worker is not handed to a continuation before its time"
    clock.now = 100.1  # now it is due
    turn = await asyncio.wait_for(held, 2)
    assert sched.busy == 2
    for t in (turn, running):
        t.release()
    assert sched.busy == 0 and sched.waiting == 0
    with pytest.raises(ValueError, match="reserved"):
        SegmentScheduler("test", "engine", workers=2, reserved=2)


async def test_predicted_first_audio_counts_the_work_due_before_a_newcomer():
    clock = Clock()
    sched = SegmentScheduler("test", "engine", workers=2, clock=clock)
    sched.first_step_s.add(0.2)
    sched.next_step_s.add(0.6)
    assert sched.predicted_first_audio() == pytest.approx(0.2)  # a worker is free: its own first segment
    held = [await sched.playback().acquire() for _ in range(2)]
    # Both busy: half of what runs now, shared by 2 workers, then its own first segment.
    assert sched.predicted_first_audio() == pytest.approx(2 * 0.6 / 2 / 2 + 0.2)
    queued = [asyncio.create_task(sched.playback().acquire()) for _ in range(4)]
    await _settle()
    assert sched.predicted_first_audio() == pytest.approx((4 * 0.2 + 0.6) / 2 + 0.2)
    ahead = sched.playback()
    ahead.produced(10.0)
    queued.append(asyncio.create_task(ahead.acquire()))  # not due for seconds: does not delay a newcomer
    late = sched.playback()
    late.produced(0.1)
    clock.now += 1.0
    queued.append(asyncio.create_task(late.acquire()))  # its listener ran out of audio: due before a newcomer
    await _settle()
    assert sched.predicted_first_audio() == pytest.approx((4 * 0.2 + 0.6 + 0.6) / 2 + 0.2)
    for turn in held:
        turn.release()
    for task in queued:
        (await task).release()


def test_admission_refuses_past_capacity_at_once_with_a_retry_hint():
    clock = Clock()
    admission = Admission("svc", max_streams=2, max_first_wait_s=0, field="svc.max_concurrent_syntheses", clock=clock)
    with admission.stream(), admission.stream():
        with pytest.raises(ResourceExhausted) as refused:
            with admission.stream():
                pass
        assert "capacity of 2 streams" in refused.value.message
        assert "svc.max_concurrent_syntheses" in refused.value.message
        assert 0.1 <= refused.value.retry_after_s <= 5.0
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert retry_metadata(refused.value) == (
            ("grpc-retry-pushback-ms", str(round(refused.value.retry_after_s * 1000))),
        )
    with admission.stream():  # the two ended: room again
        assert admission.active == 1
    assert admission.active == 0


async def test_admission_refuses_when_the_first_audio_would_wait_too_long():
    clock = Clock()
    sched = SegmentScheduler("test", "engine", workers=1, clock=clock)
    sched.first_step_s.add(0.5)
    sched.next_step_s.add(0.5)
    admission = Admission("svc", max_streams=100, max_first_wait_s=1.6, field="f", clock=clock)
    held = await sched.playback().acquire()
    queued = [asyncio.create_task(sched.playback().acquire())]
    await _settle()
    admission.check(sched)  # 0.25 (half the running one) + 0.5 (one first ahead) + 0.5 (its own): within 1.6
    queued.append(asyncio.create_task(sched.playback().acquire()))
    await _settle()
    with pytest.raises(ResourceExhausted) as refused:
        admission.check(sched)  # 1.75 predicted
    assert "budget" in refused.value.message and refused.value.retry_after_s >= 0.1
    held.release()
    for task in queued:
        (await task).release()


async def test_an_idle_service_admits_a_stream_whatever_its_first_segment_is_estimated_to_cost():
    # A warm-up on a loaded machine left the estimate of one first segment over the budget; only admitted streams
    # teach the estimate, so refusing on it with no stream in would refuse every stream from then on.
    clock = Clock()
    sched = SegmentScheduler("test", "engine", workers=1, clock=clock)
    for _ in range(10):
        sched.first_step_s.add(2.5)
    admission = Admission("svc", max_streams=100, max_first_wait_s=2.0, field="f", clock=clock)
    assert admission.active == 0 and sched.predicted_first_audio() > 2.0
    with admission.stream(sched):  # no stream admitted: admitted
        with pytest.raises(ResourceExhausted) as refused:
            admission.check(sched)  # one stream in: a newcomer predicted over the budget is refused
        assert "budget" in refused.value.message
    assert admission.active == 0
    admission.check(sched)  # at rest again: admitted


async def test_a_first_lane_starts_newcomers_while_every_other_worker_runs_a_continuation():
    """Priority lanes: first segments take only first-lane workers (the engine runs them on normal-priority threads),
    continuations only the others, and neither waits for the other's lane."""
    clock = Clock()
    sched = SegmentScheduler("test", "engine", workers=2, margin_s=0.3, clock=clock, first_lane=2)
    streams = []
    for _ in range(2):
        playback = sched.playback()
        playback.produced(5.0)  # ahead of playback: a continuation
        streams.append(playback)
    continuations = [await p.acquire() for p in streams]
    assert [t.first_lane for t in continuations] == [False, False] and sched.busy == 2
    newcomers = [await asyncio.wait_for(sched.playback().acquire(), 1) for _ in range(2)]
    assert [t.first_lane for t in newcomers] == [True, True] and sched.busy == 4
    third = asyncio.create_task(sched.playback().acquire())  # the first lane is full: waits for a first-lane worker
    more = sched.playback()
    more.produced(1.0)
    cont = asyncio.create_task(more.acquire())
    await _settle()
    assert not third.done() and not cont.done() and sched.waiting == 2
    continuations[0].release()  # a continuation worker frees: the continuation takes it, not the newcomer
    await _settle()
    assert cont.done() and not cont.result().first_lane and not third.done()
    newcomers[0].release()
    turn = await asyncio.wait_for(third, 1)
    assert turn.first_lane
    for t in (turn, newcomers[1], continuations[1], cont.result()):
        t.release()
    assert sched.busy == 0 and sched.waiting == 0
    with pytest.raises(ValueError, match="first_lane"):
        SegmentScheduler("test", "engine", workers=2, reserved=1, first_lane=2)


async def test_with_a_first_lane_only_first_segments_count_toward_a_newcomers_predicted_wait():
    clock = Clock()
    sched = SegmentScheduler("test", "engine", workers=1, clock=clock, first_lane=1)
    sched.first_step_s.add(0.2)
    sched.next_step_s.add(0.6)
    late = sched.playback()
    late.produced(0.1)
    clock.now += 2.0
    held = [await late.acquire()]  # the continuation worker busy
    queued = [asyncio.create_task(late.acquire())]  # ...and a late continuation waiting: not in a newcomer's way
    await _settle()
    assert sched.predicted_first_audio() == pytest.approx(0.2)
    held.append(await sched.playback().acquire())
    queued.append(asyncio.create_task(sched.playback().acquire()))
    await _settle()
    assert sched.predicted_first_audio() == pytest.approx((0.2 + 0.2 / 2) / 1 + 0.2)
    for turn in held:
        turn.release()
    for task in queued:
        (await task).release()


async def test_admission_refuses_newcomers_while_an_admitted_stream_waits_past_its_audio():
    clock = Clock()
    sched = SegmentScheduler("test", "engine", workers=1, margin_s=0.3, clock=clock, first_lane=1)
    admission = Admission("svc", max_streams=100, max_first_wait_s=0, field="f", clock=clock, max_late_s=0.3)
    stream = sched.playback()
    stream.produced(1.0)  # started at 100 with 1 s of audio: its listener hears silence from 101
    busy = await sched.playback().acquire()  # a first segment on the first lane
    other = sched.playback()
    other.produced(0.5)
    blocker = await other.acquire()  # the continuation worker is busy
    waiting = asyncio.create_task(stream.acquire())
    await _settle()
    clock.now = 101.2
    assert sched.late_s() == pytest.approx(0.2)
    admission.check(sched)  # a 0.2 s gap so far: within 0.3
    clock.now = 101.5
    with pytest.raises(ResourceExhausted) as refused:
        admission.check(sched)
    assert "behind its admitted streams" in refused.value.message and "max_late_ms" in refused.value.message
    assert refused.value.retry_after_s == pytest.approx(0.5)
    blocker.release()
    (await waiting).release()
    assert sched.late_s() == 0.0
    admission.check(sched)  # caught up: room again
    busy.release()
