"""Pieces the tests of the two-pass stream's parts share (services/engines/asr/pipeline.py and the modules it
composes): audio made of loud and quiet windows, an executor that runs work at once, and a counter's value."""

from __future__ import annotations

import concurrent.futures
import itertools

import numpy as np

from services.engines.asr.vad import WINDOW

_names = itertools.count()


def labels(part: str) -> tuple[str, str]:
    """(service, engine) labels of their own, so that a test reads only the metrics it moved."""
    return ("test-stream-parts", f"{part}-{next(_names)}")


def value(child) -> float:
    return child._value.get()


def windows(n: int, level: int = 8000, start: int = 0) -> list[np.ndarray]:
    """``n`` int16 windows from window ``start`` on: sample k of the stream holds k modulo ``level`` (so a slice
    shows where it came from), or silence when ``level`` is 0."""
    out = []
    for i in range(n):
        if level:
            samples = (np.arange(WINDOW) + (start + i) * WINDOW) % level
        else:
            samples = np.zeros(WINDOW)
        out.append(samples.astype(np.int16))
    return out


class Inline(concurrent.futures.Executor):
    """Runs what is submitted at once, in the caller's thread: a decode's future is done when submit returns."""

    def __init__(self) -> None:
        self.submitted = 0
        self.shut = False

    def submit(self, fn, /, *args, **kwargs):
        if self.shut:
            raise RuntimeError("cannot schedule new futures after shutdown")
        self.submitted += 1
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - the future carries it, as a pool's would
            future.set_exception(e)
        return future


class Decodes:
    """Stands in for QuickDecodes: keeps each decode started, to finish and deliver by hand."""

    def __init__(self) -> None:
        self.started: list[tuple] = []

    def start(self, what, cost, *, finished, deliver):
        self.started.append((what, finished, deliver))

    def answer(self, text: str, i: int = -1) -> None:
        _, finished, deliver = self.started[i]
        finished()
        deliver(text)
