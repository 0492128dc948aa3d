"""Pass 1, the interims: a cheap incremental decoder fed window by window while an utterance lasts, whose changing
hypothesis goes out as interim results (is_final false) (a part of the two-pass stream,
services/engines/asr/pipeline.py).

Why a second recognizer: the final (pass 2) comes only once the utterance has ended; a caller showing words as they
are spoken needs something sooner, and a full decode of the utterance so far every few hundred ms costs too much on a
CPU. The CPU engine's pass 1 is pocketsphinx (English only, in a process of its own), the GPU engine's a greedy
re-decode by the same whisper. This part decides when an utterance gets interims (the engine's InterimBudget), when
the decoder is asked for its hypothesis (every ``asr.interim_interval_ms`` of audio, while in speech), what an
interim says (its stability), and the metrics of pass 1 (first interim latency, its real-time factor).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import numpy as np

from services.common import metrics
from services.common.engines import RESULT, AsrEvent, Hypothesis
from services.engines.asr.budgets import InterimBudget
from services.engines.asr.stream_audio import PAD_BEFORE, StreamAudio, ms
from services.engines.asr.vad import RATE, WINDOW

log = logging.getLogger("voicefleet.asr.pipeline")


class PartialDecoder(Protocol):
    """Pass 1: incremental. Called from one thread at a time."""

    #: Language of its hypotheses ("en" for pocketsphinx; "" when it follows the stream's language).
    language: str
    #: True when it only knows English: dropped for a stream whose detected language is another one.
    english_only: bool

    def start(self) -> None: ...
    def accept(self, pcm: np.ndarray) -> None: ...
    def hypothesis(self) -> str: ...
    def end(self) -> None: ...
    def release(self) -> None: ...


class Interims:
    """One stream's pass 1. ``partial`` None: the stream asked for no interims (or pass 1 was dropped). Called from
    the stream's step (a thread), except ``sent`` and ``drop`` (the loop, between steps) and ``release`` (at close,
    once no step is in flight)."""

    def __init__(
        self,
        partial: PartialDecoder | None,
        budget: InterimBudget | None,
        interval_ms: int,
        language: str | None,
        labels: tuple[str, str],
    ):
        self._partial = partial
        self._budget = budget
        self._budget_held = False  # this utterance holds a slot of the engine's interim budget
        self._language = language  # the stream's (an interim says its decoder's, else this)
        self._interval = int(interval_ms * RATE / 1000)
        self.on = False  # the utterance in progress runs pass 1
        self._since_look = 0
        self._last_hyp = ""
        self._compute = 0.0  # pass 1's compute on the utterance in progress (s)
        self._start_wall: float | None = None  # when the utterance was confirmed
        self._sent = False  # its first interim went out
        self._first_interim = metrics.ASR_FIRST_INTERIM.labels(*labels)
        self._rtf = metrics.ASR_RTF.labels(*labels, "interim")

    @property
    def english_only(self) -> bool:
        return self._partial is not None and self._partial.english_only

    def begin(self, audio: StreamAudio, offset: int) -> None:
        """A candidate utterance starts at ``offset``: pass 1 starts on it, fed from PAD_BEFORE before it up to the
        windowed position, unless the engine's budget is spent (the utterance then gets its final only)."""
        self._start_wall = None
        self._sent = False
        self._last_hyp = ""
        self._compute = 0.0
        if self._partial is not None and not self.on and self._budget is not None:
            self._budget_held = self._budget.take()
            if not self._budget_held:
                return  # over budget: this utterance gets its final only
        if self._partial is not None:
            t0 = time.perf_counter()
            self._partial.start()
            self._partial.accept(audio.slice(offset - PAD_BEFORE, audio.pos))
            self._compute += time.perf_counter() - t0
            self.on = True
            self._since_look = 0

    def speech_started(self) -> None:
        """The utterance was confirmed (SPEECH_START): the first interim's latency counts from now."""
        self._start_wall = time.monotonic()

    def accept(self, window: np.ndarray) -> None:
        """A window of the utterance (one its ``begin`` did not already feed)."""
        if self.on:
            t0 = time.perf_counter()
            self._partial.accept(window)
            self._compute += time.perf_counter() - t0
            self._since_look += WINDOW

    def maybe_look(self, index: int, utt_start: int, pos: int) -> AsrEvent | None:
        """While in speech, after each window: every interval of audio, the decoder's hypothesis, when it changed."""
        if not self.on or self._since_look < self._interval:
            return None
        t0 = time.perf_counter()
        text = self._partial.hypothesis().strip()
        self._compute += time.perf_counter() - t0
        self._since_look = 0
        if not text or text == self._last_hyp:
            return None
        old, new = self._last_hyp.split(), text.split()
        same = 0
        while same < min(len(old), len(new)) and old[same] == new[same]:
            same += 1
        self._last_hyp = text
        result = Hypothesis(
            transcript=text,
            is_final=False,
            utterance_index=index,
            utterance_start_ms=ms(utt_start),
            utterance_end_ms=ms(pos),
            audio_processed_ms=ms(pos),
            # Share of words unchanged since the previous interim: a rough "will it stay" (pass 1 is not pass 2).
            stability=round(0.9 * same / len(new), 3),
            language=self._partial.language or (self._language or ""),
        )
        return AsrEvent(RESULT, result=result)

    def sent(self) -> None:
        """Loop: an interim went out (the first of its utterance is timed from SPEECH_START)."""
        if not self._sent:
            self._sent = True
            if self._start_wall is not None:
                self._first_interim.observe(time.monotonic() - self._start_wall)

    def end(self) -> None:
        """The utterance was discarded or ended: pass 1 stops, its budget slot goes back."""
        if self.on:
            self._partial.end()
            self.on = False
        self._give_back()

    def finish(self, utt_start: int, end: int) -> None:
        """The utterance from ``utt_start`` ended at ``end`` (its final follows): ``end``, and pass 1's real-time
        factor on it."""
        if self.on:
            t0 = time.perf_counter()
            self.end()
            self._compute += time.perf_counter() - t0
            if end > utt_start:
                self._rtf.observe(self._compute / ((end - utt_start) / RATE))

    def drop(self) -> None:
        """Loop, between steps: a final detected a language pass 1 does not know; no more interims on this stream."""
        partial, self._partial = self._partial, None
        self.on = False
        self._give_back()
        partial.release()

    def release(self) -> None:
        """The stream closed (no step in flight): the decoder goes back to its pool, the budget slot too."""
        if self._partial is not None:
            try:
                self._partial.release()
            except Exception:  # noqa: BLE001 - a broken decoder must not keep the gauge up
                log.exception("releasing the interim decoder failed")
        self._give_back()

    def _give_back(self) -> None:
        if self._budget_held:
            self._budget_held = False
            self._budget.give_back()
