"""Where the caller last made sound, read from the level of their audio (after echo cancellation).

The recognizer says "speech" only once ``min_speech_ms`` of it has passed and keeps an utterance open through pauses
its turn model judges unfinished, so two decisions read the audio's level directly: the commit's "are they going on?"
(sound after their speech ended, before the recognizer confirms it) and how long speech over the reply really lasted
(a run of sound with no silence of ``SOUND_GAP_MS`` in it, not an utterance held open in silence)."""

from __future__ import annotations

import numpy as np

from services.conversation.dialogue.limits import RATE

GATE_WINDOW = 512  # level window (32 ms)
GATE_QUIET_DBFS = -45.0  # a window below this is a pause for the level gate (long_turn.py)
# While a reply is held for its commit: a window this loud after the user's speech ended may be them going on (the
# recognizer confirms speech only after min_speech_ms), so the commit waits for its word (RESUME_WAIT_MS at most).
RESUME_DBFS = -40.0
RESUME_QUIET_MS = 160
# A silence this long inside speech over the reply ends a run of sound: long speech (barge_in_unheard_ms) is counted
# from the run's start. Words in a sentence are closer than this; a backchannel and a later stop word are not.
SOUND_GAP_MS = 500


def window_levels_db(pcm: bytes) -> tuple[np.ndarray, int]:
    """Level (dBFS) of each window of s16le ``pcm`` and the window size in samples: the frame cut into equal windows
    of about GATE_WINDOW (32 ms). A frame shorter than that (callers send 20 ms) is one window, so no frame size goes
    unheard; at most a few samples of a frame's end are left out."""
    x = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
    if len(x) == 0:
        return np.zeros(0), GATE_WINDOW
    window = len(x) // max(1, round(len(x) / GATE_WINDOW))
    w = x[: len(x) // window * window].reshape(-1, window)
    return 10 * np.log10(np.mean(w * w, axis=1) + 1e-12), window


class CallerSound:
    """The caller's last loud window and the start of their current run of sound, in stream ms."""

    def __init__(self) -> None:
        self.last_loud_ms = -1  # stream ms where the last loud window of the caller's audio ended
        self.sound_since_ms = 0  # stream ms where the caller's sound began after their last silence (SOUND_GAP_MS)

    def track(self, pcm: bytes, fed_ms: int) -> None:
        """``pcm`` is the audio that ends at ``fed_ms`` of the stream: note its loud windows (>= RESUME_DBFS)."""
        levels, window = window_levels_db(pcm)
        loud = np.flatnonzero(levels >= RESUME_DBFS)
        if len(loud):
            first_loud_ms = fed_ms - (len(levels) - loud[0]) * window * 1000 // RATE
            if first_loud_ms - self.last_loud_ms > SOUND_GAP_MS:
                self.sound_since_ms = first_loud_ms  # sound again after a silence: a new run of it
            after_last = (len(levels) - 1 - loud[-1]) * window  # samples of the frame after the last loud window
            self.last_loud_ms = fed_ms - after_last * 1000 // RATE

    def loud_after(self, speech_end_ms: int) -> bool:
        """The caller made sound after ``speech_end_ms`` (beyond two level windows: a word's tail is not a new one)."""
        return self.last_loud_ms > speech_end_ms + GATE_WINDOW * 2000 // RATE

    def sounding(self, now_ms: int) -> bool:
        """Sound a moment ago (within RESUME_QUIET_MS): the caller is making sound now."""
        return now_ms - self.last_loud_ms < RESUME_QUIET_MS

    def run_length_ms(self, since_ms: int) -> int:
        """How long the caller's sound has lasted from ``since_ms`` (or the start of its run, when later) to its
        last loud window."""
        return self.last_loud_ms - max(since_ms, self.sound_since_ms)
