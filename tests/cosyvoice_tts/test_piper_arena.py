"""piper's graph-run memory is bounded by ``scheduling.arena_kept_mb`` (services/engines/piper_engine.py,
ARENA_SHRINKAGE): a long sentence takes a few hundred MB while it runs and gives back all but the kept part when its
run ends, where onnxruntime's default arena kept them for the process's life (moss_sts 387 -> 686 MB PSS over 100
conversation turns)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from services.common.config.base import ChunkingConfig, SchedulingConfig
from services.common.engines import SynthesisOptions
from services.engines.piper_engine import PiperTtsEngine

# CPU work with no clock in it: `make test` runs it in its background lane (scripts/test-lanes.sh).
pytestmark = [
    pytest.mark.background,
    pytest.mark.skipif(sys.platform != "linux", reason="reads the process's memory from /proc/self"),
]

# One sentence, no clause mark: after its first five words, one graph run of ~11 s of audio (~200 MB while it runs).
LONG = (
    "The library on the corner of the main square opens at nine in the morning on every weekday and stays open"
    " until late in the evening so that students and workers who come after their day is over can still borrow"
    " the books they need"
)
KEPT_MB = 16


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc/self/status")


class PeakRss:
    """The process's resident memory sampled every 5 ms while it runs (no reset of the kernel's VmHWM needed, which
    /proc/self/clear_refs allows only where that file is writable)."""

    def __init__(self):
        self.peak = status_mb("VmRSS")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, status_mb("VmRSS"))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, status_mb("VmRSS"))


async def test_a_long_sentence_gives_back_what_its_run_took():
    engine = PiperTtsEngine("test", ChunkingConfig(), SchedulingConfig(arena_kept_mb=KEPT_MB))
    await engine.start()
    try:
        before = status_mb("VmRSS")
        with PeakRss() as rss:
            pieces = [p async for p in engine.synthesize(LONG + ".", SynthesisOptions(voice="joe", seed=1))]
        took, kept = rss.peak - before, status_mb("VmRSS") - before
    finally:
        await engine.close()
    assert sum(len(p.pcm) for p in pieces) / 2 / engine.native_sample_rate > 9  # the long run happened
    assert took > 120, f"the sentence's run took only {took:.0f} MB: too short to tell"
    # Kept: the arena's first KEPT_MB and what glibc holds of the process's other allocations (~35 MB here without the
    # fleet's MALLOC_MMAP_THRESHOLD_, ~6 MB with it); onnxruntime's default arena kept the whole run's (149 of 149 MB).
    assert kept < took / 3, f"{kept:.0f} MB of the run's {took:.0f} MB still held after it"
