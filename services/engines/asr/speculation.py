"""The speculative final: pass 2 started as a pause begins, before anyone knows whether the pause ends the utterance
(a part of the two-pass stream, services/engines/asr/pipeline.py).

Why: the final is on the critical path of a reply (speech end -> final -> brain -> speech). Started once the pause
has lasted ``asr.speculative_final_ms``, the decode runs while the endpointer waits out its hangover or the turn
model judges; if the pause does end the utterance the final is (nearly) ready, and if speech comes back the decode
is dropped. The same decode is the text check's words (services/engines/asr/pause_judge.py), so waiting for them
costs nothing.

A decode belongs to one pause, keyed by where it began (``PauseJudge.pause_key``): sound again, or a pause placed
elsewhere, drops it. Counted in ``voicefleet_asr_speculative_finals_total{outcome=used|dropped}``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

from services.common import metrics
from services.engines.asr.vad import RATE

# Reasons an utterance ends at a pause (its speculative decode may be its final); max_utterance and end_of_stream
# end it elsewhere.
PAUSE_ENDINGS = ("endpoint", "turn_complete", "sentence_end", "max_silence")


class SpeculativeFinal:
    """At most one decode in flight per stream: (pause key, future). ``decode()`` starts pass 2 on the utterance so
    far (Finals.submit). Called from the stream's step only, except ``cancel`` (the loop, at close)."""

    def __init__(
        self,
        after_ms: int,
        decode: Callable[[], concurrent.futures.Future],
        labels: tuple[str, str],
    ):
        self.after = int(after_ms * RATE / 1000)  # samples of pause before the decode starts; 0: off
        self._decode = decode
        self._spec: tuple[int, concurrent.futures.Future] | None = None
        self._outcomes = {
            outcome: metrics.ASR_SPECULATIVE_FINALS.labels(*labels, outcome) for outcome in ("used", "dropped")
        }

    @property
    def enabled(self) -> bool:
        return bool(self.after)

    @property
    def pending(self) -> bool:
        """A decode of the pause in progress is out (drafts then keep off the final recognizer)."""
        return self._spec is not None

    def maybe_start(self, pause: int | None, pos: int) -> None:
        """After each window while in speech: start the decode once the pause that began at ``pause`` has lasted
        ``after`` (at ``pos``); drop one of an earlier pause (speech came back: a decode still waiting in line never
        runs)."""
        if self._spec is not None and self._spec[0] != pause:
            self._drop()
        if pause is None or self._spec is not None or pos - pause < self.after:
            return
        self._start(pause)

    def at_judgement(self, pause: int | None) -> None:
        """The turn model is about to judge the pause at ``pause``: a pause with no decode yet (quiet by the VAD before
        the level said so) starts one here, so it decodes while the model runs."""
        if self._spec is not None and self._spec[0] != pause:
            self._drop()  # a decode of an earlier pause (speech came back since)
        if self.after and self._spec is None and pause is not None:
            self._start(pause)

    def for_pause(self, pause: int) -> concurrent.futures.Future:
        """The decode of the pause at ``pause`` (the text check's words): the one in flight, or one started now, even
        with speculative finals off (it becomes the final if this pause ends the utterance)."""
        if self._spec is None or self._spec[0] != pause:
            if self._spec is not None:
                self._drop()
            self._start(pause)
        return self._spec[1]

    def take(self, pause: int | None, reason: str) -> concurrent.futures.Future | None:
        """The utterance ended (``reason``): its decode when it was started for the pause that ended it (used), else
        None (the decode is cancelled: dropped)."""
        spec, self._spec = self._spec, None
        if spec is not None and not (reason in PAUSE_ENDINGS and spec[0] == pause):
            spec[1].cancel()
            self._outcomes["dropped"].inc()
            return None
        if spec is not None:
            self._outcomes["used"].inc()
            return spec[1]
        return None

    def cancel(self) -> None:
        """The stream closed: a decode still waiting in line never runs (one running finishes)."""
        if self._spec is not None:
            self._spec[1].cancel()

    def _start(self, pause: int) -> None:
        self._spec = (pause, self._decode())

    def _drop(self) -> None:
        self._spec[1].cancel()
        self._spec = None
        self._outcomes["dropped"].inc()
