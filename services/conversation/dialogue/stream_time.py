"""Stream time: ms of the caller's audio fed, across the recognizer's stream rotations, and when each piece arrived;
and the recognizer's pace against it.

Speech is placed in stream time (the recognizer's offsets), latencies in wall time: a speech end at stream offset X
happened when the audio at X arrived (kept in a bounded map). A recognizer in another process (the asr service)
reports on audio a little after it was fed, so the commit asks ``RecognizerPace.behind`` whether sound the caller
made a moment ago has been heard yet."""

from __future__ import annotations

import collections
import time

from services.common.engines import RESULT, TURN_ESTIMATE, AsrEvent
from services.conversation.dialogue.limits import RATE

# A recognizer in another process (the asr service) reports on audio a little after it was fed: a commit waits for
# its word on sound fed less than this long ago that it has not reported on yet (its position: its events' offsets),
# or, when it runs further behind (a loaded asr; a caller that sent its words at once), RECOGNIZER_LAG_MARGIN times
# the lag its last report showed, at most RECOGNIZER_LAG_MAX_S. With 0.5 s alone, on a 2-core machine with two busy
# loops beside the fleet "Hello, my name is Alice." sent at once committed as "Hello?" at that final, the recognizer
# ~1 s behind and "my name is Alice" fed long before (bench/results/cpu-probes-2026-11-28-amd/under_load-three_turn.log).
RECOGNIZER_LAG_S = 0.5
RECOGNIZER_LAG_MARGIN = 2.0
RECOGNIZER_LAG_MAX_S = 5.0


class StreamTime:
    def __init__(self) -> None:
        self.fed_samples = 0
        self.base_ms = 0  # stream offset of the current ASR stream's start
        self._arrivals: collections.deque[tuple[int, float]] = collections.deque(maxlen=4096)

    def fed(self, samples: int, now: float) -> None:
        """``samples`` more of the caller's audio, arrived at wall time ``now``."""
        self.fed_samples += samples
        self._arrivals.append((self.fed_samples * 1000 // RATE, now))

    @property
    def fed_ms(self) -> int:
        return self.fed_samples * 1000 // RATE

    def new_stream(self) -> None:
        """A recognizer stream opens here: its offsets count from now."""
        self.base_ms = self.fed_ms

    def abs_ms(self, offset_ms: int) -> int:
        """A recognizer stream's offset in stream time."""
        return self.base_ms + offset_ms

    def arrival_wall(self, offset_ms: int) -> float | None:
        """When the audio at stream ``offset_ms`` arrived (the latest kept, for an offset older than the map)."""
        for ms, wall in self._arrivals:
            if ms >= offset_ms:
                return wall
        return self._arrivals[-1][1] if self._arrivals else None


class RecognizerPace:
    """How far the recognizer has reported (its events' offsets) and how late its last report came."""

    def __init__(self, clock: StreamTime):
        self._clock = clock
        self.heard_ms = 0  # stream ms up to which the recognizer has reported (its events' offsets)
        self.lag_s = 0.0  # how long after it was fed the audio of the recognizer's last report came

    def report(self, event: AsrEvent) -> None:
        reported = event.turn.offset_ms if event.turn is not None else event.offset_ms
        if event.result is not None:
            reported = max(reported, event.result.audio_processed_ms)
        self.heard_ms = max(self.heard_ms, self._clock.abs_ms(reported))
        if event.kind == TURN_ESTIMATE or (
            event.kind == RESULT and event.result is not None and not event.result.is_final
        ):
            # Reports made where the stream's step was (a judgement, an interim): its pace, not a decode's (finals,
            # drafts, spotting) nor the VAD's (a speech start or end is placed before the audio that confirmed it).
            fed_at = self._clock.arrival_wall(self._clock.abs_ms(reported))
            if fed_at is not None:
                self.lag_s = max(0.0, time.monotonic() - fed_at)

    def behind(self, last_loud_ms: int) -> bool:
        """Sound was fed, a moment ago, that the recognizer has not reported on yet (one in another process lags)."""
        if last_loud_ms <= self.heard_ms:
            return False
        fed_at = self._clock.arrival_wall(last_loud_ms)
        wait = min(RECOGNIZER_LAG_MAX_S, max(RECOGNIZER_LAG_S, RECOGNIZER_LAG_MARGIN * self.lag_s))
        return fed_at is not None and time.monotonic() - fed_at < wait
