"""The kinds of request a brain serves, in the order it serves them when busy (one definition for the clients'
queue, services/conversation/brain_queue.py, and the in-box server's, services/brain/llama_server.py).

* ``turn``: the reply to a committed turn: a caller waits for its first words now (a request that names no kind,
  e.g. another OpenAI client's, counts as one);
* ``judgement``: the reading of the user's words at a pause, which a held reply waits for;
* ``held``: a reply started before its turn commits (dropped when the user goes on);
* ``read_ahead``: the user's words so far, evaluated ahead of the turn: never queued by clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable

TURN, JUDGEMENT, HELD, READ_AHEAD = "turn", "judgement", "held", "read_ahead"
KINDS = (TURN, JUDGEMENT, HELD, READ_AHEAD)
# Lower goes first; equal ranks in arrival order.
RANK = {TURN: 0, JUDGEMENT: 1, HELD: 1, READ_AHEAD: 2}
# The HTTP header a voicefleet client names its request's kind in.
KIND_HEADER = "X-Voicefleet-Request-Kind"


def rank(kind: str) -> int:
    """A kind's rank; an unknown or missing kind is a turn's (someone waits for it)."""
    return RANK.get(kind, RANK[TURN])


# The in-box brain's own route (llama_server.py with one worker, front.py with several): what its queue holds now.
QUEUE_PATH = "/v1/queue"


def queue_report(places: int, busy: int, waiting_kinds: list[str]) -> dict:
    """``GET /v1/queue``'s body: the places, how many are taken, and how many requests wait, by kind (every kind
    named, 0 when none waits; an unknown kind counts as a turn, as it ranks)."""
    waiting = dict.fromkeys(KINDS, 0)
    for kind in waiting_kinds:
        waiting[kind if kind in waiting else TURN] += 1
    return {"places": places, "busy": busy, "waiting": waiting}


class RankedPlaces:
    """``places`` requests served at once; when all are taken, a freed place goes to the waiter of lowest rank
    (``rank(kind())``, read at that moment: a held reply that commits while it waits moves up), oldest first."""

    def __init__(self, places: int = 1):
        if places < 1:
            raise ValueError("places must be >= 1")
        self.places = places
        self.busy = 0
        self._waiting: list[tuple[Callable[[], str], int, asyncio.Future]] = []
        self._order = itertools.count()

    def idle(self) -> bool:
        """A place is free and nobody waits for one."""
        return self.busy < self.places and not self._waiting

    def waiting(self, kind: str | None = None) -> int:
        return sum(1 for k, _, _ in self._waiting if kind is None or k() == kind)

    def report(self) -> dict:
        """What ``GET /v1/queue`` answers (queue_report)."""
        return queue_report(self.places, self.busy, [k() for k, _, f in self._waiting if not f.done()])

    async def acquire(self, kind: Callable[[], str]) -> None:
        """One place, in due order. Cancelled while waiting: it leaves the queue (or hands on a place granted as
        it was cancelled)."""
        if self.idle():
            self.busy += 1
            return
        waiter = (kind, next(self._order), asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        try:
            await waiter[2]
        except BaseException:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter[2].done() and not waiter[2].cancelled():
                self.release()
            raise

    def release(self) -> None:
        self.busy -= 1
        while self.busy < self.places and self._waiting:
            waiter = min(self._waiting, key=lambda w: (rank(w[0]()), w[1]))
            self._waiting.remove(waiter)
            if waiter[2].done():  # cancelled while waiting
                continue
            self.busy += 1
            waiter[2].set_result(None)

    @contextlib.asynccontextmanager
    async def place(self, kind: Callable[[], str]):
        await self.acquire(kind)
        try:
            yield
        finally:
            self.release()


def brain_workers(b) -> int:
    """How many model processes the in-box brain runs (BrainConfig ``b``): ``workers``, or (0) one per two cores, at
    least one. On 2 cores a second worker served 1-2 conversations no faster (bench/results/conversation-load-
    2026-11-29-workers/: the cores, shared with the recognizer and the voice, are the limit) and cost 240 MB."""
    from services.common.scheduler import cpu_cores

    return b.workers or max(1, cpu_cores() // 2)


def brain_places(b) -> int:
    """How many requests a client may have in flight at the brain (BrainConfig ``b``): ``parallel_requests``, or
    (0) the in-box brain's workers (also when ``base_url`` names the in-box brain's container; for vLLM, say its
    max_num_seqs: more than it serves would wait in its queue, out of the turns-first order)."""
    return b.parallel_requests or brain_workers(b)
