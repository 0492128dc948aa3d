"""QuickDecodes (services/engines/asr/quick_decodes.py): a greedy decode of the utterance so far off the step, its text
handed back on the event loop, and nothing once the stream is closed."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from types import SimpleNamespace

import numpy as np

from services.common import metrics
from services.engines.asr.quick_decodes import QuickDecodes
from services.engines.asr.stream_audio import StreamState
from tests.asr.stream.kit import Inline, labels

SO_FAR = np.full(8000, 0.1, dtype=np.float32)


class Quick:
    def __init__(self, fail: bool = False):
        self.asked: list[tuple[int, str | None]] = []
        self.fail = fail

    def quick(self, audio, language):
        self.asked.append((len(audio), language))
        if self.fail:
            raise RuntimeError("decoder fell over")
        return "stop right there"


def quick_decodes(state: StreamState, pool=None, final=None):
    engine = SimpleNamespace(final=final or Quick(), final_pool=pool or Inline())
    return QuickDecodes(engine, state, lambda: SO_FAR), engine


def cost():
    return metrics.ASR_DRAFT_DECODES.labels(*labels("quick"))


async def test_the_text_comes_back_on_the_loop_after_the_decode_is_finished():
    loop_thread = threading.get_ident()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    part, engine = quick_decodes(StreamState("en"), pool=pool)
    order, delivered = [], asyncio.Event()

    def deliver(text):
        order.append(("deliver", text, threading.get_ident() == loop_thread))
        delivered.set()

    spent = cost()
    part.start("draft", spent, finished=lambda: order.append(("finished",)), deliver=deliver)
    await asyncio.wait_for(delivered.wait(), 10)
    pool.shutdown()
    assert order == [("finished",), ("deliver", "stop right there", True)]
    assert engine.final.asked == [(8000, "en")] and sum(b.get() for b in spent._buckets) == 1


async def test_a_stream_that_detects_decodes_in_the_language_of_its_last_final():
    state = StreamState(None)
    part, engine = quick_decodes(state)
    part.start("spotting", cost(), finished=lambda: None, deliver=lambda text: None)
    state.heard_language = "de"
    part.start("spotting", cost(), finished=lambda: None, deliver=lambda text: None)
    assert [language for _, language in engine.final.asked] == [None, "de"]


async def test_a_failed_decode_is_logged_and_delivers_nothing(caplog):
    part, _ = quick_decodes(StreamState("en"), final=Quick(fail=True))
    finished, delivered = [], []
    with caplog.at_level(logging.WARNING, logger="voicefleet.asr.pipeline"):
        part.start("spotting", cost(), finished=lambda: finished.append(1), deliver=delivered.append)
        await asyncio.sleep(0)
    assert finished == [1] and delivered == []
    assert "a spotting decode failed: decoder fell over" in caplog.text


async def test_nothing_is_delivered_once_the_stream_is_closed():
    state = StreamState("en", closed=True)
    part, _ = quick_decodes(state)
    finished, delivered = [], []
    part.start("draft", cost(), finished=lambda: finished.append(1), deliver=delivered.append)
    await asyncio.sleep(0)
    assert finished == [1] and delivered == []


async def test_an_engine_closing_its_pool_finishes_the_decode_at_once():
    pool = Inline()
    pool.shut = True
    part, engine = quick_decodes(StreamState("en"), pool=pool)
    finished, delivered = [], []
    part.start("draft", cost(), finished=lambda: finished.append(1), deliver=delivered.append)
    await asyncio.sleep(0)
    assert finished == [1] and delivered == [] and engine.final.asked == []
