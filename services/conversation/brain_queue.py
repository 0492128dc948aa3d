"""Which brain request goes next: a committed turn's reply before speculative work (issue 49).

The brain serves ``brain.parallel_requests`` requests at once (the in-box llama-cpp-python server: one). Every
session of a moss_sts process (and every cascade of the router's fallback) sends it requests of four kinds
(services/common/brain_requests.py): ``turn`` (a committed turn's reply, or a held reply once its turn commits),
``judgement`` (``ChatBrain.end_of_turn_logprob``), ``held`` (a reply started before the commit) and ``read_ahead``,
which is never queued: skipped when the brain is busy, since by the time a place frees the words are stale.

The same first-words-first rule as the synthesis scheduler (services/common/scheduler.py): when every place is
taken, a freed place goes to the oldest waiting ``turn``, then to the oldest ``judgement`` or ``held``. A held
reply's rank is read when a place frees, so one that commits while it waits moves up then. A request's wait
(``voicefleet_sts_brain_wait_seconds``) and how long it held its place (``voicefleet_sts_brain_held_seconds``) are
measured by kind; moss_sts's admission reads what a committed turn waits now (``turn_wait_s``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from services.common import metrics
from services.common.brain_requests import HELD, JUDGEMENT, KINDS, READ_AHEAD, TURN, RankedPlaces
from services.common.scheduler import Ewma

__all__ = ["HELD", "JUDGEMENT", "READ_AHEAD", "TURN", "BrainQueue"]

# How much each new committed turn weighs in the averages behind ``turn_wait_s`` (exponential averages), and how
# fast the recent turns' wait is forgotten when no turn comes (a load that has gone must not refuse callers).
WEIGHT = 0.3
FORGET_HALF_LIFE_S = 10.0


class BrainQueue:
    def __init__(self, service: str, places: int = 1, clock: Callable[[], float] = time.monotonic):
        self.places = RankedPlaces(places)
        self.clock = clock
        self._turn_wait = Ewma(0.0, WEIGHT)  # a committed turn's wait for a place (seconds)
        self._turn_wait_at = clock()  # when a committed turn last got its place
        self._turn_hold = Ewma(1.0, WEIGHT)  # how long a committed turn's reply holds its place (seconds)
        self._wait = {k: metrics.STS_BRAIN_WAIT.labels(service, k) for k in KINDS}
        self._held = {k: metrics.STS_BRAIN_HELD.labels(service, k) for k in KINDS}

    def idle(self) -> bool:
        return self.places.idle()

    def turn_wait_s(self) -> float:
        """What a committed turn would wait for a place now: the recent turns' average wait (forgotten with a
        half-life of FORGET_HALF_LIFE_S while no turn comes), or more when turns already queue (each holds its place
        about as long as recent replies did)."""
        queued = self.places.waiting(TURN)
        age = self.clock() - self._turn_wait_at
        recent = self._turn_wait.value * 0.5 ** (age / FORGET_HALF_LIFE_S)
        return max(recent, queued * self._turn_hold.value / self.places.places)

    @contextlib.asynccontextmanager
    async def place(self, kind: str | Callable[[], str]):
        """Hold one of the brain's places for the block, in due order (module doc). ``kind`` may be a callable: a
        held reply that becomes a turn's. Cancelling the waiting task leaves the queue."""
        kind_now = kind if callable(kind) else (lambda: kind)
        start = self.clock()
        async with self.places.place(kind_now):
            granted = self.clock()
            self._wait[kind_now()].observe(granted - start)
            if kind_now() == TURN:
                self._turn_wait.add(granted - start)
                self._turn_wait_at = granted
            try:
                yield
            finally:
                held = self.clock() - granted
                self._held[kind_now()].observe(held)
                if kind_now() == TURN:
                    self._turn_hold.add(held)

    @contextlib.asynccontextmanager
    async def place_if_idle(self):
        """A place at once for a read-ahead (True), or None (skipped) when the brain is busy or others wait."""
        if not self.idle():
            yield None
            return
        async with self.place(READ_AHEAD):
            yield True
