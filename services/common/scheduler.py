"""Many callers at once: first-chunk-first scheduling of synthesis segments, and admission control.

``SegmentScheduler`` hands an engine's workers (CPU threads, or a GPU engine's batch slots) to synthesis segments in
order of when their listener would otherwise hear silence:

* a stream's first segment is due when the request arrived (its caller already hears nothing);
* a continuation segment is due when the audio already produced for its stream runs out, less a safety margin:
  ``playback start + audio produced - margin``.

Earliest due first. So a new stream's first segment goes before the next sentence of a stream that is seconds ahead
of playback, and only a continuation that is already late (its stream is about to stutter) goes before a newer
first segment. One rule, no starvation among continuations: a stream that waits becomes due.

A running segment is not preempted, so ordering alone still leaves a new stream waiting behind whole continuations
when every worker holds one. ``reserved`` workers are kept for first segments: a continuation that is not due yet
(its listener still has more than ``margin`` of audio) takes a worker only while more than ``reserved`` are free,
and waits for its due time otherwise; once due it takes any worker. A caller arriving at a busy service then starts
at once on the reserved worker, and the streams that are ahead of playback spend their lead instead.

**Priority lanes** (CPU engines, ``first_lane`` > 0). A worker that runs a segment cannot be paused, but the OS can
run another thread ahead of it. With lanes, first segments run on ``first_lane`` workers of their own and
continuations on the other ``workers``; the engine runs each lane on its own threads, the continuation threads at a
lower priority (nice). A caller arriving while every core runs a continuation starts at once on a first-lane thread,
and the OS gives it the core ahead of the continuation threads, which yield only the time it takes (they are ahead
of playback, so they can spare it). The reserve then is not needed.

``Admission`` refuses a new stream at once (RESOURCE_EXHAUSTED with a retry hint) when the service already serves
its capacity of streams, or when the predicted wait for the new stream's first segment is over its budget: a fast
"retry in 0.4 s" beats a slow stream that stutters, and the router tries another backend first.

Engines use it like this (services/engines/piper_engine.py)::

    playback = self.scheduler.playback()
    for segment in segments:
        async with playback.turn():          # waits for a worker, in due order
            pcm = await run_in_executor(...)
        playback.produced(len(pcm) / 2 / rate)

GPU engines that batch (vLLM) get ``workers`` = the batch slots they serve well at once, so the scheduler hands them
concurrent segments instead of serializing them (docs/scheduling.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import os
import time
from collections.abc import Callable
from typing import Protocol

from services.common import metrics
from services.common.errors import ResourceExhausted

# Retry hints are kept in this range: under 0.1 s a client would hammer the service; over 5 s it is a guess.
MIN_RETRY_S, MAX_RETRY_S = 0.1, 5.0


def cpu_cores() -> int:
    """Cores this process may run on (the container's or taskset's share, not the host's): its CPU affinity, bounded
    by its cgroup's CPU quota (a Kubernetes ``limits.cpu: "2"`` on a 64-core node is 2: workers and capacities sized
    from the node's cores would oversubscribe the quota and fill the memory limit)."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = max(1, os.cpu_count() or 1)
    quota = cgroup_cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of this process's cgroup in cores (cgroup v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us``), None when unlimited or unknown."""
    try:
        with open(os.path.join(root, "cpu.max")) as f:
            quota, _, period = f.read().strip().partition(" ")
        if quota != "max":
            return int(quota) / int(period or 100_000)
        return None
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as f:
            quota_us = int(f.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as f:
            period_us = int(f.read())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def split_cores(workers: int) -> tuple[int, int]:
    """(workers, intra-op threads per worker) so workers x threads fills the cores without oversubscribing them.

    ``workers`` 0 means one per core, each single-threaded: concurrent streams then share the cores without ONNX
    runs fighting over them (the fair-sharing slowdown of issue 10's table)."""
    cores = cpu_cores()
    workers = workers or cores
    return workers, max(1, cores // workers)


class Ewma:
    """An exponential average whose first sample replaces the initial guess."""

    def __init__(self, initial: float, alpha: float = 0.2):
        self.value = initial
        self.alpha = alpha
        self.seen = False

    def add(self, x: float) -> None:
        self.value = x if not self.seen else self.value + self.alpha * (x - self.value)
        self.seen = True


class SegmentScheduler:
    """A priority queue of synthesis segments in front of ``workers`` workers (module doc)."""

    def __init__(
        self,
        service: str,
        engine: str,
        workers: int,
        margin_s: float = 0.3,
        clock: Callable[[], float] = time.monotonic,
        reserved: int = 0,
        first_lane: int = 0,
    ):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not 0 <= reserved < workers:
            raise ValueError(f"reserved must be 0..workers-1 ({workers - 1}), got {reserved}")
        if first_lane < 0 or (first_lane and reserved):
            raise ValueError("first_lane must be >= 0, and a scheduler with a first lane reserves no workers")
        self.service = service
        self.engine = engine
        self.workers = workers  # continuations' workers, and first segments' too when there is no first lane
        self.reserved = reserved  # workers a continuation that is not due yet may not take (module doc)
        self.first_lane = first_lane  # workers only first segments take (module doc: priority lanes)
        self.margin_s = margin_s
        self.clock = clock
        self._busy = 0
        self._busy_first = 0  # first-lane workers in use
        self._timer: asyncio.TimerHandle | None = None  # wakes a held-back continuation at its due time
        self._waiting: list[tuple[float, int, asyncio.Future, Playback]] = []
        self._order = itertools.count()
        # Seconds a worker holds a first segment, and a continuation (for admission's predicted wait).
        self.first_step_s = Ewma(0.2)
        self.next_step_s = Ewma(0.4)
        self._queue_wait = metrics.QUEUE_WAIT.labels(service, engine)  # a request's wait: its first segment's
        self._wait_first = metrics.SCHEDULER_WAIT.labels(service, engine, "first")
        self._wait_next = metrics.SCHEDULER_WAIT.labels(service, engine, "next")
        self._late = metrics.SCHEDULER_LATE.labels(service, engine)
        metrics.SCHEDULER_WORKERS.labels(service, engine).set(workers + first_lane)

    def playback(self) -> Playback:
        """A new stream's place in line (one per synthesize call)."""
        return Playback(self)

    @property
    def busy(self) -> int:
        return self._busy + self._busy_first

    @property
    def waiting(self) -> int:
        return sum(1 for *_, fut, _ in self._waiting if not fut.done())

    def at_rest(self) -> bool:
        """No segment running or waiting (admission's rest rule, ``FirstAudioWait``)."""
        return not self.busy and not self.waiting

    def predicted_first_audio(self) -> float:
        """How long a stream arriving now would wait for its first audio: the work due before its first segment
        (first segments in line, late continuations, half of what the workers run now when all are busy) shared by
        the workers, then its own first segment."""
        first, cont = self.first_step_s.value, self.next_step_s.value
        if self.first_lane:  # only first segments stand between a newcomer and a first-lane worker
            ahead = sum(first for *_, fut, p in self._waiting if p.started_at is None and not fut.done())
            running = self._busy_first * first / 2 if self._busy_first >= self.first_lane else 0.0
            return (ahead + running) / self.first_lane + first
        if self._busy < self.workers and not self.waiting:
            return first
        now = self.clock()
        ahead = 0.0
        for due, _, fut, playback in self._waiting:
            if due <= now and not fut.done():
                ahead += first if playback.started_at is None else cont
        running = self._busy * cont / 2 if self._busy >= self.workers else 0.0
        return (ahead + running) / self.workers + first

    def _in_first_lane(self, playback: Playback) -> bool:
        return bool(self.first_lane) and playback.started_at is None

    def _lane_full(self, playback: Playback) -> bool:
        if self._in_first_lane(playback):
            return self._busy_first >= self.first_lane
        return self._busy >= self.workers

    def _take(self, playback: Playback) -> bool:
        """Count a worker of ``playback``'s lane as taken; True when it is a first-lane worker."""
        if self._in_first_lane(playback):
            self._busy_first += 1
            return True
        self._busy += 1
        return False

    def late_s(self) -> float:
        """How long the listener of the most overdue waiting continuation has heard silence (0 when none has): a
        service behind its admitted streams, whatever a newcomer's own first segment would wait."""
        now = self.clock()
        return max(
            (
                now - due - self.margin_s
                for due, _, fut, p in self._waiting
                if p.started_at is not None and not fut.done()
            ),
            default=0.0,
        )

    async def _acquire(self, playback: Playback) -> bool:
        """Wait for a worker of ``playback``'s lane, in due order; True when it is a first-lane worker."""
        lane = self._in_first_lane(playback)
        queued = any(self._in_first_lane(p) == lane and not fut.done() for *_, fut, p in self._waiting)
        if not queued and not self._lane_full(playback) and self._may_start(playback, self.clock()):
            return self._take(playback)
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (playback.due(), next(self._order), fut, playback))
        self._dispatch()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a worker just as the caller went away: pass it on
                self._release(fut.result())
            raise

    def _may_start(self, playback: Playback, now: float) -> bool:
        """A first segment, or a continuation that is due, takes any free worker of its lane; one that is not due
        yet only a worker beyond the reserved ones."""
        if playback.started_at is None or playback.due() <= now:
            return True
        return self.workers - self._busy > self.reserved

    def _dispatch(self) -> None:
        """Hand free workers to waiting segments, earliest due first (each lane's own), holding back continuations
        that may not start yet (they are woken at their due time)."""
        now = self.clock()
        self._waiting = [w for w in self._waiting if not w[2].done()]
        heapq.heapify(self._waiting)
        held, blocked = [], []
        while self._waiting:
            entry = heapq.heappop(self._waiting)
            if self._lane_full(entry[3]):
                blocked.append(entry)
            elif self._may_start(entry[3], now):
                entry[2].set_result(self._take(entry[3]))
            else:
                held.append(entry)
        for entry in held + blocked:
            heapq.heappush(self._waiting, entry)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if held:
            wake = min(entry[3].due() for entry in held)
            self._timer = asyncio.get_running_loop().call_later(max(0.0, wake - now), self._dispatch)

    def _release(self, first_lane: bool = False) -> None:
        if first_lane:
            self._busy_first -= 1
        else:
            self._busy -= 1
        self._dispatch()

    async def _turn(self, playback: Playback) -> Turn:
        first = playback.started_at is None
        due = playback.due()
        asked = self.clock()
        first_lane = await self._acquire(playback)
        got = self.clock()
        (self._wait_first if first else self._wait_next).observe(got - asked)
        if first:
            self._queue_wait.observe(got - asked)
        if not first and got > due + self.margin_s:  # its listener ran out of audio before this segment started
            self._late.inc()
        return Turn(self, got, first, first_lane)


class Turn:
    """A worker held for one segment; ``release`` (idempotent) hands it to the next segment due."""

    def __init__(self, scheduler: SegmentScheduler, got: float, first: bool, first_lane: bool = False):
        self.scheduler = scheduler
        self.got = got
        self.first = first
        self.first_lane = first_lane  # run it on the engine's first-lane threads (module doc: priority lanes)
        self.released = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        held = self.scheduler.clock() - self.got
        (self.scheduler.first_step_s if self.first else self.scheduler.next_step_s).add(held)
        self.scheduler._release(self.first_lane)


class Playback:
    """One stream as the scheduler sees it: when it was asked for, when its audio started, how much was produced."""

    def __init__(self, scheduler: SegmentScheduler):
        self.scheduler = scheduler
        self.asked_at = scheduler.clock()
        self.started_at: float | None = None
        self.audio_s = 0.0

    def due(self) -> float:
        """When this stream's listener hears silence unless its next segment is synthesized."""
        if self.started_at is None:
            return self.asked_at
        return self.started_at + self.audio_s - self.scheduler.margin_s

    def produced(self, seconds: float) -> None:
        """Audio of ``seconds`` was handed to the caller (the first call starts playback)."""
        if self.started_at is None:
            self.started_at = self.scheduler.clock()
        self.audio_s += seconds

    async def acquire(self) -> Turn:
        """A worker for this stream's next segment, granted in due order; ``release`` it when the segment is done."""
        return await self.scheduler._turn(self)

    @contextlib.asynccontextmanager
    async def turn(self):
        """``async with playback.turn():`` holds a worker for one segment, granted in due order."""
        turn = await self.acquire()
        try:
            yield turn
        finally:
            turn.release()


class FirstAudioWait(Protocol):
    """What admission asks of the work a newcomer would wait behind (a service's SegmentScheduler, a conversation's
    wait for a committed turn's first words: sts_servicer._FirstWordsWait)."""

    def predicted_first_audio(self) -> float:
        """Seconds a stream arriving now would wait for its first audio (or words)."""

    def at_rest(self) -> bool:
        """Nothing is running or waiting: a newcomer is never refused for its own first segment's cost."""


class Admission:
    """Refuses new streams past capacity, at once, with a retry hint (module doc)."""

    def __init__(
        self,
        service: str,
        max_streams: int,
        max_first_wait_s: float,
        field: str,
        clock: Callable[[], float] = time.monotonic,
        max_late_s: float = 0.0,
        unit: str = "streams",
        wait_field: str = "scheduling.max_first_wait_ms",
        waits_for: str = "start this stream's audio",
    ):
        self.service = service
        self.max_streams = max_streams
        self.max_first_wait_s = max_first_wait_s
        self.max_late_s = max_late_s  # 0: admitted streams' gaps do not refuse newcomers
        self.field = field  # the config field a refusal names, e.g. "cosyvoice_tts.max_concurrent_syntheses"
        self.clock = clock
        self.active = 0
        self._room: asyncio.Event | None = None  # set when a place frees (``room()`` waits on it)
        # A stream's life in seconds (for the retry hint when full); 2 s until measured.
        self._stream_s = Ewma(2.0)
        self.unit = unit  # what is admitted: "streams", or "sessions" for conversations (a refusal's reason label)
        self.wait_field = wait_field  # the config field of the first-wait budget, and what waits (a refusal's words)
        self.waits_for = waits_for
        self._full = metrics.ADMISSION_REJECTIONS.labels(service, unit)
        self._slow = metrics.ADMISSION_REJECTIONS.labels(service, "first_wait")
        self._behind = metrics.ADMISSION_REJECTIONS.labels(service, "behind")
        metrics.ADMISSION_CAPACITY.labels(service, field).set(max_streams)

    def check(self, scheduler: FirstAudioWait | None) -> None:
        """Raise ResourceExhausted (with ``retry_after_s``) when a new stream cannot be served in time."""
        if self.active >= self.max_streams:
            self._full.inc()
            # With N streams of average life D, one ends about every D / N.
            retry = _clamp(self._stream_s.value / self.max_streams)
            raise ResourceExhausted(
                f"{self.service} is serving its capacity of {self.max_streams} {self.unit} ({self.field});"
                f" retry in {retry:.1f} s or use another backend",
                retry_after_s=retry,
            )
        if scheduler is not None and self.max_late_s:
            # First segments go first (priority lanes most of all), so a newcomer can start quickly while admitted
            # streams already stutter; another stream would only make their gaps longer.
            late = scheduler.late_s()
            if late > self.max_late_s:
                self._behind.inc()
                retry = _clamp(late)
                raise ResourceExhausted(
                    f"{self.service} is behind its admitted streams (one has waited {late:.1f} s past its audio,"
                    f" over scheduling.max_late_ms {self.max_late_s * 1000:.0f}); retry in {retry:.1f} s or use"
                    " another backend",
                    retry_after_s=retry,
                )
        if scheduler is not None and self.max_first_wait_s:
            wait = scheduler.predicted_first_audio()
            # A service at rest (no stream admitted, nothing running or waiting) is never refused for its own first
            # segment's cost: refusing would not make it faster, and only admitted streams update the estimate, so a
            # slow warm-up on a loaded machine (2.5 s) refused every synthesis after it (cosyvoice_tts, 13 in a row in
            # make test's background lane, 2026-11-29). Each wait says when it is at rest.
            at_rest = not self.active and scheduler.at_rest()
            if wait > self.max_first_wait_s and not at_rest:
                self._slow.inc()
                retry = _clamp(wait - self.max_first_wait_s)
                raise ResourceExhausted(
                    f"{self.service} would {self.waits_for} in about {wait:.1f} s, over its"
                    f" {self.max_first_wait_s:.1f} s budget ({self.wait_field}); retry in {retry:.1f} s",
                    retry_after_s=retry,
                )

    @contextlib.contextmanager
    def stream(self, scheduler: FirstAudioWait | None = None):
        """Admit one stream for the ``with`` block, or raise ResourceExhausted before any work starts.

        The block gets a ``release()`` that frees the place before the block ends (idempotent): a call that has
        ended frees it at once, before its cleanup (closing a session, stopping engines) has finished.
        """
        self.check(scheduler)
        self.active += 1
        started = self.clock()
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.active -= 1
                self._stream_s.add(self.clock() - started)
                if self._room is not None:
                    self._room.set()

        try:
            yield release
        finally:
            release()

    async def room(self, grace_s: float) -> None:
        """At capacity, wait up to ``grace_s`` for a place to free before ``stream()`` decides.

        A caller that hangs up and calls again at once can overtake its own hang-up: the cancel and the new call
        travel separately (between processes, the router's cancel of its backend call and the new call race), so
        the new call may be checked while the old one still holds its place. A short wait lets that place go."""
        deadline = self.clock() + grace_s
        while self.active >= self.max_streams and (left := deadline - self.clock()) > 0:
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):  # not wait_for: on 3.11 it can swallow a cancel
                    await self._room.wait()


def _clamp(seconds: float) -> float:
    return round(min(MAX_RETRY_S, max(MIN_RETRY_S, seconds)), 1)
