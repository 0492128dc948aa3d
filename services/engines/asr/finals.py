"""Pass 2, the final: an accurate decoder on the whole utterance once it has ended (a part of the two-pass stream,
services/engines/asr/pipeline.py).

Every utterance gets exactly one final, in order. The decode runs on the engine's final pool (whisper holds the
GIL-free cores there), counted in the engine's FinalsInFlight so that drafts keep out of its way; a decode started
early by the speculative final (services/engines/asr/speculation.py) is taken over when its pause did end the
utterance. This part decides what the final says: its text, its offsets in stream time, its words' offsets, and the
metrics of a final (real-time factor, endpoint -> final, utterances by the reason they ended).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.common import metrics
from services.common.engines import RESULT, AsrEvent, Hypothesis, WordTiming
from services.engines.asr.budgets import FinalsInFlight
from services.engines.asr.stream_audio import ms
from services.engines.asr.vad import RATE


@dataclass(frozen=True)
class FinalText:
    text: str
    confidence: float
    language: str
    words: tuple[WordTiming, ...] = ()  # offsets relative to the audio given
    # The beam's other texts, best first, where the decode keeps them (the CPU engine's fitted window): only the text
    # check reads them (services/engines/asr/pause_judge.py).
    alternatives: tuple[str, ...] = ()


class FinalRecognizer(Protocol):
    """Pass 2: a whole utterance (float32 16 kHz) -> text. Safe to call from several threads."""

    def recognize(self, audio: np.ndarray, language: str | None, hints: tuple[str, ...]) -> FinalText: ...

    def quick(self, audio: np.ndarray, language: str | None) -> str:
        """A cheap greedy decode of a short stretch (spotting: a young utterance so far); no hints."""


class FinalEngineParts(Protocol):
    final: FinalRecognizer
    final_pool: concurrent.futures.Executor
    finals_in_flight: FinalsInFlight


@dataclass
class FinalJob:
    """An utterance that ended, waiting for its final."""

    index: int
    start: int  # samples
    end: int
    audio: np.ndarray  # float32, from audio_start
    audio_start: int
    reason: str
    detected_at: float
    # A speculative decode of this utterance started during its pause (services/engines/asr/speculation.py).
    future: concurrent.futures.Future | None = None


class Finals:
    """One stream's finals: ``submit`` a decode (also what the speculative final starts), ``decode`` a job (its
    speculative decode or a new one), then ``result`` and ``observe`` it."""

    def __init__(self, engine: FinalEngineParts, language: str | None, hints: tuple[str, ...], labels: tuple[str, str]):
        self._engine = engine
        self._language = language  # whisper code, None = detect
        self._hints = hints
        self._labels = labels
        self._endpoint_latency = metrics.ASR_ENDPOINT_LATENCY.labels(*labels)
        self._rtf = metrics.ASR_RTF.labels(*labels, "final")

    def submit(self, audio: np.ndarray) -> concurrent.futures.Future:
        """Pass 2 on ``audio`` on the final pool, counted in flight; the future's result is (text, compute s)."""
        return self._engine.finals_in_flight.track(self._engine.final_pool.submit(self._recognize, audio))

    def _recognize(self, audio: np.ndarray) -> tuple[FinalText, float]:
        """Thread (final pool): pass 2 on one utterance; returns the text and the compute time."""
        t0 = time.perf_counter()
        text = self._engine.final.recognize(audio, self._language, self._hints)
        return text, time.perf_counter() - t0

    async def decode(self, job: FinalJob) -> FinalText:
        """The job's text: its speculative decode when it has one, else a decode submitted now. A cancel leaves this
        one decode to finish; nothing follows it."""
        future = job.future or self.submit(job.audio)
        text, compute = await asyncio.wrap_future(future)
        if len(job.audio):
            self._rtf.observe(compute / (len(job.audio) / RATE))
        return text

    @staticmethod
    def result(job: FinalJob, text: FinalText, audio_processed: int) -> AsrEvent:
        """The final's event: offsets in stream ms, its words moved from the decoded audio's time to the stream's."""
        words = tuple(
            WordTiming(w.word, w.start_ms + ms(job.audio_start), w.end_ms + ms(job.audio_start), w.confidence)
            for w in text.words
        )
        result = Hypothesis(
            transcript=text.text,
            is_final=True,
            utterance_index=job.index,
            utterance_start_ms=ms(job.start),
            utterance_end_ms=ms(job.end),
            audio_processed_ms=ms(audio_processed),
            stability=1.0,
            confidence=text.confidence,
            language=text.language,
            words=words,
        )
        return AsrEvent(RESULT, result=result)

    def observe(self, job: FinalJob) -> None:
        """The final went out: endpoint -> final, and the utterance counted by why it ended."""
        self._endpoint_latency.observe(time.monotonic() - job.detected_at)
        metrics.ASR_UTTERANCES.labels(*self._labels, job.reason).inc()
