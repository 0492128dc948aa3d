"""Drafts: while an utterance is spoken, its audio so far decoded again by the final recognizer and sent as a DRAFT
before its final (a part of the two-pass stream, services/engines/asr/pipeline.py; docs/asr.md#drafts).

Why: a conversation reads the user's words ahead (a brain can start on them) before the turn has ended; pass 1's
interims are too rough for that and the final comes too late. Drafts are spare-capacity work: one is due every
``draft_interval_ms`` of the utterance (RecognitionConfig.draft_interval_ms), and starts only while the speaker is
sounding (once a pause begins the speculative final takes the final recognizer), while no final of any stream is
being decoded, within the engine's draft budget, and only for audio arriving at the pace of speech (a burst ends
before a draft could help). A draft goes out unless its utterance's final went out first or it says nothing new.
"""

from __future__ import annotations

import collections
import functools

from services.common import metrics
from services.common.engines import DRAFT, AsrEvent, Draft
from services.engines.asr.budgets import FinalsInFlight, InterimBudget
from services.engines.asr.quick_decodes import QuickDecodes
from services.engines.asr.stream_audio import StreamState, ms
from services.engines.asr.vad import RATE, WINDOW


class Drafts:
    """One stream's drafts; made only when the engine serves drafts and the stream asked for them (``for_stream``).
    ``emit`` sends an event (the stream's, on the loop)."""

    def __init__(
        self,
        interval_ms: int,
        budget: InterimBudget,
        finals_in_flight: FinalsInFlight,
        quick: QuickDecodes,
        state: StreamState,
        emit,
        labels: tuple[str, str],
    ):
        self._interval = interval_ms * RATE // 1000
        self._budget = budget
        self._finals_in_flight = finals_in_flight
        self._quick = quick
        self._state = state
        self._emit = emit
        self._next = 0  # stream offset (samples) at which the next draft is due
        self._busy = False  # a draft decode of this stream is in flight (set here, cleared by its callback)
        self._last: tuple[int, str] = (-1, "")  # loop side: the last Draft sent (utterance, text)
        # (stream sample where a fed piece ended, when it arrived): drafts only for audio arriving at the pace of
        # speech; one that came in a burst ends before a draft could help (appended on the loop, read by the step).
        self._arrived: collections.deque[tuple[int, float]] = collections.deque(maxlen=256)
        self._cost = metrics.ASR_DRAFT_DECODES.labels(*labels)

    @classmethod
    def for_stream(
        cls,
        budget: InterimBudget | None,
        interval_ms: int,
        finals_in_flight: FinalsInFlight,
        quick: QuickDecodes,
        state: StreamState,
        emit,
        labels: tuple[str, str],
    ) -> Drafts | None:
        """None when the engine serves no drafts (``budget`` None) or the stream asked for none (interval 0)."""
        if budget is None or not interval_ms:
            return None
        return cls(interval_ms, budget, finals_in_flight, quick, state, emit, labels)

    def arrived(self, end: int, wall: float) -> None:
        """Loop: fed audio up to stream offset ``end`` arrived at ``wall`` (time.monotonic)."""
        self._arrived.append((end, wall))

    def speech_started(self, offset: int) -> None:
        """The utterance was confirmed at ``offset``: its first draft is due an interval later."""
        self._next = offset + self._interval

    def maybe_draft(self, pos: int, sounding: bool, speculating: bool) -> None:
        """Thread, after a window at the live edge (windowed up to ``pos``): decode the utterance so far when a draft
        is due. ``sounding``: in speech and not quiet by level (once a pause begins the speculative final takes the
        final recognizer, and a draft then would only slow it down; the final follows shortly anyway);
        ``speculating``: a speculative final is out."""
        if (
            not sounding
            or speculating
            or self._busy
            or pos < self._next
            or self._state.closed
            or not self._finals_in_flight.idle
            or not self._live(pos)
        ):
            return
        if not self._budget.take():
            self._next = pos + WINDOW  # the engine's drafts are all in flight: try at the next window
            return
        self._next = pos + self._interval
        self._busy = True
        deliver = functools.partial(self._drafted, self._state.index, self._state.utt_start, pos)
        self._quick.start("draft", self._cost, finished=self._decoded, deliver=deliver)

    def _decoded(self) -> None:
        self._busy = False
        self._budget.give_back()

    def _live(self, pos: int) -> bool:
        """The last draft interval of audio arrived over at least half that long: a live speaker, not a burst (a
        file sent as fast as it reads, a client catching up)."""
        arrived = list(self._arrived)
        if not arrived:
            return False
        since = pos - self._interval
        earlier = next((wall for end, wall in reversed(arrived) if end <= since), None)
        if earlier is None:
            return False  # it all came at once (or too long ago to tell)
        return arrived[-1][1] - earlier >= self._interval / RATE / 2

    def _drafted(self, index: int, utt_start: int, end: int, text: str) -> None:
        """Loop: a draft of utterance ``index`` is done; it goes out unless that utterance's final went out first, or
        it says nothing new."""
        text = text.strip()
        if self._state.closed or self._state.index != index or not text or (index, text) == self._last:
            return
        self._last = (index, text)
        self._emit(AsrEvent(DRAFT, offset_ms=ms(end), draft=Draft(text, index, ms(utt_start), ms(end))))
