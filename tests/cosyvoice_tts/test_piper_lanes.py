"""Piper's priority lanes on the real engine (services/engines/piper_engine.py, docs/scheduling.md): a stream's
first segment runs on a thread at the process's own priority, its continuations on threads at
``scheduling.continuation_nice``, so the OS runs a newcomer's first segment ahead of continuations already running.
The priority each segment actually ran at is read from the kernel (getpriority of the thread that ran it)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from services.common.config.base import ChunkingConfig, SchedulingConfig
from services.common.engines import SynthesisOptions
from services.engines.piper_engine import PiperTtsEngine

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice is Linux's")

TEXT = "Hello, thanks for calling, your order shipped from our warehouse this morning. It arrives on Tuesday."


async def _segments_ran_at(scheduling: SchedulingConfig) -> list[tuple[str, int]]:
    engine = PiperTtsEngine("test", ChunkingConfig(), scheduling)
    ran: list[tuple[str, int]] = []
    synthesize = engine._synthesize_segment

    def recorded(segment, *args):
        ran.append((segment, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        return synthesize(segment, *args)

    await engine.start()
    engine._synthesize_segment = recorded
    try:
        pieces = [p async for p in engine.synthesize(TEXT, SynthesisOptions(voice="joe"))]
    finally:
        await engine.close()
    assert len(pieces) == 3 and all(p.pcm for p in pieces)
    return ran


async def test_first_segments_run_at_normal_priority_and_continuations_at_the_configured_nice():
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    ran = await _segments_ran_at(SchedulingConfig(workers=2, continuation_nice=7))
    assert [segment for segment, _ in ran] == [
        "Hello, thanks for calling,",
        "your order shipped from our warehouse this morning.",
        "It arrives on Tuesday.",
    ]
    assert [nice for _, nice in ran] == [own, min(19, own + 7), min(19, own + 7)]


async def test_without_lanes_every_segment_runs_at_normal_priority():
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    ran = await _segments_ran_at(SchedulingConfig(workers=2, continuation_nice=0))
    assert [nice for _, nice in ran] == [own, own, own]
