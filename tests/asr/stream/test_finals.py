"""Finals (services/engines/asr/finals.py): pass 2 on an ended utterance, its speculative decode taken over, the
final's offsets in stream time."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace

import numpy as np

from services.common import metrics
from services.common.engines import RESULT, WordTiming
from services.engines.asr.budgets import FinalsInFlight
from services.engines.asr.finals import FinalJob, Finals, FinalText
from tests.asr.stream.kit import Inline, labels, value


class Recognizer:
    def __init__(self) -> None:
        self.asked: list[tuple[int, str | None, tuple[str, ...]]] = []

    def recognize(self, audio, language, hints):
        self.asked.append((len(audio), language, hints))
        words = (WordTiming("hello", 200, 480, 0.9), WordTiming("there", 520, 900, 0.8))
        return FinalText("Hello there.", 0.87, language or "en", words)


def finals(language="en", hints=("Voicefleet",)):
    engine = SimpleNamespace(final=Recognizer(), final_pool=Inline(), finals_in_flight=FinalsInFlight())
    names = labels("finals")
    return Finals(engine, language, hints, names), engine, names


def job(**kw) -> FinalJob:
    fields = dict(
        index=2, start=32_000, end=48_000, audio=np.zeros(19_600, dtype=np.float32), audio_start=28_800,
        reason="endpoint", detected_at=0.0,
    )  # fmt: skip
    return FinalJob(**{**fields, **kw})


async def test_an_ended_utterance_is_decoded_with_the_streams_language_and_hints():
    part, engine, names = finals(language="de", hints=("Tschüss",))
    text = await part.decode(job())
    assert engine.final.asked == [(19_600, "de", ("Tschüss",))] and text.text == "Hello there."
    assert engine.finals_in_flight.idle and engine.final_pool.submitted == 1
    rtf = metrics.ASR_RTF.labels(*names, "final")
    assert sum(b.get() for b in rtf._buckets) == 1


async def test_the_speculative_decode_is_the_final_when_the_job_has_one():
    part, engine, _ = finals()
    ready = concurrent.futures.Future()
    ready.set_result((FinalText("from the pause", 0.5, "en"), 0.01))
    text = await part.decode(job(future=ready))
    assert text.text == "from the pause" and engine.final.asked == [] and engine.final_pool.submitted == 0


def test_submitted_decodes_count_as_finals_in_flight_until_done():
    engine = SimpleNamespace(final=Recognizer(), final_pool=concurrent.futures.ThreadPoolExecutor(1))
    engine.finals_in_flight = FinalsInFlight()
    gate = concurrent.futures.Future()
    engine.final_pool.submit(gate.result)  # the pool's one thread is busy: the decode waits in line
    future = Finals(engine, "en", (), labels("finals")).submit(np.zeros(1600, dtype=np.float32))
    assert not engine.finals_in_flight.idle
    gate.set_result(None)
    text, compute = future.result(timeout=10)
    engine.final_pool.shutdown()
    assert text.text == "Hello there." and compute >= 0 and engine.finals_in_flight.idle


def test_the_final_says_where_the_utterance_was_in_the_stream_and_where_its_words_were():
    text = FinalText("Hello.", 0.87, "en", (WordTiming("hello", 200, 480, 0.9),))
    event = Finals.result(job(), text, 52_000)
    result = event.result
    assert event.kind == RESULT and result.is_final and result.stability == 1.0
    assert (result.utterance_index, result.utterance_start_ms, result.utterance_end_ms) == (2, 2000, 3000)
    assert result.audio_processed_ms == 3250 and result.confidence == 0.87 and result.language == "en"
    # word offsets were relative to the decoded audio, which began at stream sample 28 800 (1800 ms)
    assert result.words == (WordTiming("hello", 2000, 2280, 0.9),)


def test_a_final_that_went_out_is_counted_by_why_its_utterance_ended():
    part, _, names = finals()
    part.observe(job(reason="turn_complete", detected_at=0.0))
    part.observe(job(reason="turn_complete", detected_at=0.0))
    assert value(metrics.ASR_UTTERANCES.labels(*names, "turn_complete")) == 2
    latency = metrics.ASR_ENDPOINT_LATENCY.labels(*names)
    assert sum(b.get() for b in latency._buckets) == 2
