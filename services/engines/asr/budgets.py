"""What an asr engine lets its streams start, counted across all of them (a part of the two-pass stream,
services/engines/asr/pipeline.py).

Interims, spotting and drafts are optional work: each costs CPU per audio second, and finals are what callers wait
on. An engine holds one ``InterimBudget`` per kind of optional work (asr.max_concurrent_interims /
max_concurrent_spotting / max_concurrent_drafts) and one ``FinalsInFlight``; a stream asks them before it starts such
work, and is never refused for a spent budget: the utterance then goes without.
"""

from __future__ import annotations

import concurrent.futures
import threading

from services.common import metrics


class InterimBudget:
    """How many utterances, across every stream of an engine, run pass 1 at once (interims cost CPU per audio second;
    finals are what callers wait on). An utterance that starts when the budget is spent gets its final but no
    interims; streams are never refused for it. Thread-safe (pass 1 runs on the stream pool). Spotting and drafts
    use one each too, counting their own skipped metric."""

    def __init__(self, service: str, engine: str, slots: int, skipped=metrics.ASR_INTERIMS_SKIPPED):
        self.slots = slots
        self._used = 0
        self._lock = threading.Lock()
        self._skipped = skipped.labels(service, engine)

    def take(self) -> bool:
        with self._lock:
            if self._used >= self.slots:
                self._skipped.inc()
                return False
            self._used += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self._used -= 1


class FinalsInFlight:
    """Final decodes (speculative or not) submitted to an engine's final pool and not done yet, all streams counted:
    drafts are spare-capacity work and start only while none is (a draft beside a final slows the final a caller
    waits for)."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def track(self, future: concurrent.futures.Future) -> concurrent.futures.Future:
        with self._lock:
            self._count += 1
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: concurrent.futures.Future) -> None:
        with self._lock:
            self._count -= 1

    @property
    def idle(self) -> bool:
        return self._count == 0
