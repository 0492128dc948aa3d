"""The pause judgement: does this pause end the utterance, and is the speaker's turn over? (a part of the two-pass
stream, services/engines/asr/pipeline.py).

Silence mode: the Endpointer (services/engines/asr/vad.py) alone, on Silero's probability and the level: a hangover
of silence ends the utterance. Semantic mode (docs/asr.md#semantic-endpointing): at each pause the turn model
(Smart Turn, services/engines/asr/turn_model.py) hears the turn's last 8 s and says whether it is complete; the text
check (services/common/turn_text.py) reads the words before the pause -- the speculative final's
(services/engines/asr/speculation.py) -- and keeps a "complete" open after a word like "the", or ends an
"incomplete" that reads as a finished sentence after ``sentence_end_silence_ms``. Each judgement is a TURN_ESTIMATE
event, counted in ``voicefleet_asr_turn_judgements_total{outcome}``.

This part owns the stream's Endpointer (``endpointer``), the audio the turn model hears, and where the turn in
progress began (a turn may span utterances: one ended by max_silence or max_utterance goes on in the next).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
from typing import Protocol

import numpy as np

from services.common import metrics
from services.common.engines import SEMANTIC_MODE, TEXT_CHECK_ON, TURN_ESTIMATE, AsrEvent, Endpointing, TurnEstimate
from services.common.errors import FailedPrecondition
from services.common.turn_text import TextCheck, is_english
from services.engines.asr.finals import FinalText
from services.engines.asr.speculation import SpeculativeFinal
from services.engines.asr.stream_audio import StreamState, ms
from services.engines.asr.turn_model import WINDOW_SAMPLES as TURN_WINDOW
from services.engines.asr.turn_model import TurnSupport
from services.engines.asr.vad import RATE, WINDOW, Endpointer, Transition

log = logging.getLogger("voicefleet.asr.pipeline")

# The turn model hears the turn from this long before its first speech (as Smart Turn's own pipeline gives it).
TURN_PRE_SPEECH = int(0.5 * RATE)
# Utterances that end the turn: the next speech starts a new one. (After max_silence the model had said the speaker
# was not done, and after max_utterance they were still talking: what follows continues the same turn.)
TURN_ENDING_REASONS = ("turn_complete", "sentence_end", "end_of_stream", "endpoint")
# The text check waits at most this long for the words before a pause (a final decode queued behind other streams'
# on a saturated server); past it the turn model alone decides.
TEXT_CHECK_WAIT_S = 3.0


class TurnProbability(Protocol):
    def probability(self, audio: np.ndarray) -> float: ...


def resolve(turn: TurnSupport | None, endpointing: Endpointing) -> Endpointing:
    """The stream's endpointing with the service's defaults in place of what it left unspecified; refused
    (FAILED_PRECONDITION) when that is semantic mode and the server has no turn model."""
    resolved = turn.resolve(endpointing) if turn is not None else endpointing
    if resolved.mode == SEMANTIC_MODE and (turn is None or turn.model is None):
        raise FailedPrecondition(
            "config.endpointing.mode: semantic is not available on this server"
            + (f": {turn.missing}" if turn is not None and turn.missing else "")
        )
    return resolved


class PauseJudge:
    """One stream's pause judgement. ``endpointing``: resolved (``resolve``). ``turn``: the engine's TurnSupport
    (its model, ``judge_interval_ms``, ``heard_silence_ms``), needed in semantic mode only. The Endpointer calls
    ``_judge``, ``_text_veto`` and ``_sentence_check`` from inside ``push`` (the stream's step, a thread)."""

    def __init__(
        self,
        endpointing: Endpointing,
        turn: TurnSupport | None,
        state: StreamState,
        speculation: SpeculativeFinal,
        labels: tuple[str, str],
        request_id: str = "",
    ):
        self._state = state
        self._speculation = speculation
        self._request_id = request_id
        self.semantic = endpointing.mode == SEMANTIC_MODE
        if self.semantic:
            self._turn_model: TurnProbability = turn.model
            veto = self._text_check(endpointing)
            self.endpointer = Endpointer(
                endpointing,
                self._judge,
                turn.judge_interval_ms,
                turn.heard_silence_ms,
                veto,
                self._sentence_check if veto is not None else None,
            )
        else:
            self.endpointer = Endpointer(endpointing)
        # Semantic mode: the last 8 s of audio (the turn model's window), ending at ``_heard``, and where the turn in
        # progress started.
        self._turn_audio: collections.deque[np.ndarray] = collections.deque(maxlen=TURN_WINDOW // WINDOW + 1)
        self._heard = 0
        self.turn_start: int | None = None
        self._judgements = {
            outcome: metrics.ASR_TURN_JUDGEMENTS.labels(*labels, outcome)
            for outcome in ("complete", "incomplete", "vetoed")
        }

    # --- what the stream tells it ----------------------------------------------------------------------------
    def hear(self, window: np.ndarray) -> None:
        """Each window, in order (semantic mode keeps the turn model's 8 s)."""
        if self.semantic:
            self._turn_audio.append(window)
            self._heard += WINDOW

    def speech_started(self, offset: int) -> None:
        """An utterance was confirmed at ``offset``: the turn starts there unless one is in progress."""
        if self.turn_start is None:
            self.turn_start = offset

    def utterance_ended(self, reason: str) -> None:
        """An utterance ended for ``reason``: one that ends the turn makes the next speech a new turn."""
        if reason in TURN_ENDING_REASONS:
            self.turn_start = None

    def pause_key(self) -> int | None:
        """Where the pause in progress began (None: no pause): by level in semantic mode (the VAD's silence when the
        level never went quiet, as over steady noise), by the VAD otherwise. A speculative final belongs to it."""
        if self.semantic and self.endpointer.quiet_since is not None:
            return self.endpointer.quiet_since
        return self.endpointer.silence_start

    def turn_event(self, t: Transition, index: int) -> AsrEvent:
        """The TURN_ESTIMATE of a "turn" transition of utterance ``index``, counted by outcome."""
        self._judgements["vetoed" if t.vetoed_by_word else "complete" if t.complete else "incomplete"].inc()
        if t.vetoed_by_word:
            log.info(
                "turn kept open at %d ms: the turn model said complete (p=%.2f) but the text so far ends with %r"
                " (request %s)",
                ms(t.offset),
                t.probability,
                t.vetoed_by_word,
                self._request_id,
            )
        estimate = TurnEstimate(
            probability=round(t.probability, 4),
            complete=t.complete,
            silence_ms=ms(t.silence),
            offset_ms=ms(t.offset),
            utterance_index=index,
            vetoed_by_word=t.vetoed_by_word,
            sentence_end=bool(t.sentence),
            transcript=t.sentence,
        )
        return AsrEvent(TURN_ESTIMATE, offset_ms=ms(t.offset), turn=estimate)

    # --- what the Endpointer asks (inside push) --------------------------------------------------------------
    def _judge(self, heard_end: int, speech_end: int) -> float:
        """The turn model on the turn's last 8 s up to ``heard_end``. A pause with no speculative final yet starts
        one here, so it decodes while the model runs."""
        self._speculation.at_judgement(self.pause_key())
        start = self.turn_start if self.turn_start is not None else self._state.utt_start
        ring_start = self._heard - len(self._turn_audio) * WINDOW
        first = max(start - TURN_PRE_SPEECH, heard_end - TURN_WINDOW, ring_start)
        audio = np.concatenate(self._turn_audio)[first - ring_start : heard_end - ring_start]
        return self._turn_model.probability(audio.astype(np.float32) / 32768.0)

    # The text check (semantic mode; services/common/turn_text.py).
    def _text_check(self, endpointing: Endpointing):
        """The Endpointer's veto for this stream: None when the resolved setting is off."""
        if endpointing.text_check != TEXT_CHECK_ON:
            return None
        self._turn_text = TextCheck(endpointing.non_final_words)
        return self._text_veto

    def _pause_words(self) -> FinalText | None:
        """The speculative final of the utterance so far (started as the pause began, or here when speculative finals
        are off; it becomes the final if this pause ends the utterance, so waiting for it costs the caller nothing).
        None when it is missing or not English. The decode is the one keyed to this pause as the speculative final
        keys it (by level in semantic mode): keyed by the VAD's silence instead, it dropped the decode started
        ~100 ms earlier and waited for a new one."""
        pause = self.pause_key()
        if pause is None:
            return None
        future = self._speculation.for_pause(pause)
        try:
            text, _ = future.result(timeout=TEXT_CHECK_WAIT_S)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            return None
        except Exception:  # noqa: BLE001 - the final's own await reports a failed decode; the model decides here
            log.exception("the text check's decode failed")
            return None
        return text if is_english(text.language or self._state.language or "") else None

    def _text_veto(self) -> str:
        """The word before the pause that keeps the turn open when the model said complete ("" when none): the
        decode's, or that of another text of its beam with as many words (TextCheck.veto_beam). A weak last word sits
        on a knife's edge in whisper tiny.en: on an AVX2-only AMD EPYC "... how long it takes to" came out "... takes
        it?" with 128 ms of the pause and "... takes to" with 96, 160 or 200 ms, "to" among the beam's others then
        (bench/results/cpu-probes-2026-11-28-amd/)."""
        words = self._pause_words()
        return self._turn_text.veto_beam(words.text, words.alternatives) if words is not None else ""

    def _sentence_check(self) -> str:
        """When the model said incomplete: the words before the pause if they read as a finished sentence, else ""."""
        words = self._pause_words()
        return words.text if words is not None and self._turn_text.finished(words.text) else ""
