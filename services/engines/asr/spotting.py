"""Phrase spotting: a stop word ("stop", "wait") heard early in an utterance goes out as PHRASE_SPOTTED before the
utterance's final (a part of the two-pass stream, services/engines/asr/pipeline.py; docs/asr.md#spot-phrases).

Why: a caller talking over a reply wants it to stop at once; the final comes only after the utterance and its pause.
While an utterance is young, its audio so far is decoded again (a quick decode, services/engines/asr/quick_decodes.py)
every few windows, and a phrase the stream asked for (RecognitionConfig.spot_phrases) in it is reported, once per
utterance.

Two sides. The step's thread decides when to decode: ``first_ms`` after a candidate utterance's start, then every
``interval_ms`` (never two decodes of one stream at once) until ``window_ms``, while the engine's spotting budget
allows, and not while the caller paused spotting. The loop decides whether a heard phrase can go out: after its
utterance's SPEECH_START (a candidate may still be discarded) and before its final; heard before its SPEECH_START, it
waits for it.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

from services.common import metrics
from services.common.engines import PHRASE_SPOTTED, AsrEvent, SpottedPhrase
from services.common.text import has_phrase, spoken_words
from services.engines.asr.budgets import InterimBudget
from services.engines.asr.quick_decodes import QuickDecodes
from services.engines.asr.stream_audio import StreamState, ms
from services.engines.asr.vad import RATE


@dataclass(frozen=True)
class Spotting:
    """How an engine spots phrases (RecognitionConfig.spot_phrases; asr.spot_* in the config): the young utterance so
    far is decoded again by the final recognizer (``quick``) ``first_ms`` after its start, then every
    ``interval_ms`` (never two decodes of one stream at once) until ``window_ms``. ``budget``: utterances spotting at
    once across the engine's streams (an InterimBudget counting ASR_SPOTTING_SKIPPED)."""

    first_ms: int
    interval_ms: int
    window_ms: int
    budget: InterimBudget


class PhraseSpotter:
    """One stream's spotting; made only when the engine spots and the stream asked for phrases (``for_stream``).
    ``emit`` sends an event (the stream's, on the loop)."""

    def __init__(
        self,
        spotting: Spotting,
        phrases: list[tuple[str, tuple[str, ...]]],
        quick: QuickDecodes,
        state: StreamState,
        emit: Callable[[AsrEvent], None],
        labels: tuple[str, str],
    ):
        self._spotting = spotting
        self._phrases = [(p, w) for p, w in phrases if w]
        self._quick = quick
        self._state = state
        self._emit = emit
        # Thread side (the stream's step). Each candidate utterance that spots gets a serial.
        self._serial = 0
        self._on = False  # the utterance in progress is being spotted (holds a budget slot)
        self.paused = False  # the caller paused spotting (pause_spotting; set on the loop, read here)
        self._next = 0  # stream offset (samples) at which the next decode is due
        self._until = 0
        self._busy = False  # a decode of this stream is in flight (set here, cleared by its callback)
        # Loop side. The serials of utterances confirmed by the SPEECH_STARTs the step returned, in order.
        self._start_serials: collections.deque[int] = collections.deque()
        self._starts = 0  # SPEECH_STARTs sent: the next utterance's index
        self._live_serial = 0  # serial of the utterance of the last SPEECH_START sent
        self._found = 0  # serial of the last utterance a phrase was sent for (read by the step: stop spotting)
        self._pending: tuple[int, AsrEvent] | None = None  # heard before its utterance was confirmed
        self._cost = metrics.ASR_SPOT_DECODES.labels(*labels)
        self._sent = metrics.ASR_PHRASES_SPOTTED.labels(*labels)

    @classmethod
    def for_stream(
        cls,
        spotting: Spotting | None,
        spot_phrases: tuple[str, ...],
        quick: QuickDecodes,
        state: StreamState,
        emit: Callable[[AsrEvent], None],
        labels: tuple[str, str],
    ) -> PhraseSpotter | None:
        """None when the engine does not spot (``spotting`` None) or the stream asked for no phrases."""
        phrases = [(p, tuple(spoken_words(p))) for p in spot_phrases]
        if spotting is None or not phrases:
            return None
        return cls(spotting, phrases, quick, state, emit, labels)

    # --- thread side (the stream's step) ----------------------------------------------------------------------
    def begin(self, offset: int, continued: bool) -> None:
        """A candidate utterance starts at ``offset``. ``continued``: it goes on from one cut at max_utterance (not
        young: not spotted)."""
        self.end()
        self._serial += 1
        if continued or self.paused or not self._spotting.budget.take():
            return
        self._on = True
        self._next = offset + self._spotting.first_ms * RATE // 1000
        self._until = offset + self._spotting.window_ms * RATE // 1000

    def confirmed(self) -> None:
        """The step returns a SPEECH_START: it confirms the candidate in progress."""
        self._start_serials.append(self._serial)

    def end(self) -> None:
        """The utterance is no longer spotted (discarded, ended, no longer young, or the stream closed)."""
        if self._on:
            self._on = False
            self._spotting.budget.give_back()

    def after_window(self, pos: int, utt_start: int) -> None:
        """After each window of a spotted utterance (windowed up to ``pos``): decode it so far when one is due."""
        if not self._on:
            return
        if self._found == self._serial or pos > self._until or self._state.closed or self.paused:
            self.end()  # a phrase was heard (one event per utterance), the utterance is no longer young,
            return  # or the caller paused spotting
        if self._busy or pos < self._next:
            return
        self._next = pos + self._spotting.interval_ms * RATE // 1000
        self._busy = True
        deliver = functools.partial(self._heard, self._serial, utt_start, pos)
        self._quick.start("spotting", self._cost, finished=self._decoded, deliver=deliver)

    def _decoded(self) -> None:
        self._busy = False

    # --- loop side ---------------------------------------------------------------------------------------------
    def _heard(self, serial: int, utt_start: int, end: int, text: str) -> None:
        """A spotting decode of utterance ``serial`` heard ``text``. A phrase in it goes out now if its utterance is
        the one confirmed last and has no final yet, or right after its SPEECH_START if it is not confirmed yet;
        otherwise (discarded, or finalized) it is dropped."""
        if self._state.closed or serial <= self._found:
            return
        heard = spoken_words(text)
        phrase = next((p for p, w in self._phrases if has_phrase(heard, w)), None)
        if phrase is None:
            return
        spotted = SpottedPhrase(phrase, text.strip(), 0, ms(utt_start), ms(end))
        event = AsrEvent(PHRASE_SPOTTED, offset_ms=ms(end), spotted=spotted)
        if serial == self._live_serial:
            self._send(serial, event)
        elif serial > self._live_serial and self._pending is None:
            self._pending = (serial, event)

    def started(self) -> None:
        """A SPEECH_START went out."""
        self._starts += 1
        self._live_serial = self._start_serials.popleft() if self._start_serials else 0
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] == self._live_serial:
            self._send(*pending)
        elif pending is not None and pending[0] > self._live_serial:
            self._pending = pending  # a later candidate's

    def _send(self, serial: int, event: AsrEvent) -> None:
        index = self._starts - 1
        if self._state.index != index:
            return  # its final went out already
        self._found = serial
        spotted = dataclasses.replace(event.spotted, utterance_index=index)
        self._sent.inc()
        self._emit(dataclasses.replace(event, spotted=spotted))
