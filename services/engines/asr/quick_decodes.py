"""Quick decodes: the final recognizer's cheap greedy decode (``quick``) of the utterance so far, off the stream's
step, its text handed back on the event loop (a part of the two-pass stream, services/engines/asr/pipeline.py).

Spotting (services/engines/asr/spotting.py) and drafts (services/engines/asr/drafts.py) both look at a young
utterance again before its final; this is the one way they do it, so that a decode never blocks the step, a failed
one is logged and forgotten, and nothing is delivered once the stream is closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from services.engines.asr.finals import FinalRecognizer
from services.engines.asr.stream_audio import StreamState

log = logging.getLogger("voicefleet.asr.pipeline")


class QuickEngineParts(Protocol):
    final: FinalRecognizer
    final_pool: concurrent.futures.Executor


class QuickDecodes:
    """One stream's quick decodes. ``so_far()``: the utterance so far (float32), read on the step's thread when a
    decode starts. Made on the event loop (it keeps that loop to deliver on)."""

    def __init__(self, engine: QuickEngineParts, state: StreamState, so_far: Callable[[], np.ndarray]):
        self._engine = engine
        self._state = state
        self._so_far = so_far
        self._loop = asyncio.get_running_loop()

    def start(self, what: str, cost, *, finished: Callable[[], None], deliver: Callable[[str], None]) -> None:
        """Thread: a greedy decode of the utterance so far on the final pool, in the stream's language (or that of
        its last final), its compute observed in ``cost``. When it ends, ``finished()`` runs on the pool's thread;
        then, unless it was cancelled, failed (logged as a ``what`` decode) or the stream closed, ``deliver(text)``
        on the loop. Not started (the pool is shut down: the engine is closing): ``finished()`` at once, nothing
        delivered."""
        audio = self._so_far()
        language = self._state.language or self._state.heard_language

        def decode() -> str:
            t0 = time.perf_counter()
            try:
                return self._engine.final.quick(audio, language)
            finally:
                cost.observe(time.perf_counter() - t0)

        try:
            future = self._engine.final_pool.submit(decode)
        except RuntimeError:
            finished()
            return

        def done(f: concurrent.futures.Future) -> None:  # on the final pool's thread
            finished()
            if f.cancelled():
                return
            if f.exception() is not None:
                log.warning("a %s decode failed: %s", what, f.exception())
                return
            if self._state.closed:
                return
            with contextlib.suppress(RuntimeError):  # the event loop closed meanwhile
                self._loop.call_soon_threadsafe(deliver, f.result())

        future.add_done_callback(done)
