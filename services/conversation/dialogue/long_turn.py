"""A user turn longer than ``max_user_turn_s``: dropped, and nothing is recognized until the user pauses.

A monologue must grow neither memory nor CPU, so past the limit the recognizer is fed silence (it ends the utterance
and recognizes nothing new) while this gate listens to the level of the caller's audio for a pause as long as the
endpointing's hangover; results stay dropped until the next speech starts after that pause."""

from __future__ import annotations

from services.conversation.dialogue.caller_sound import GATE_QUIET_DBFS, window_levels_db
from services.conversation.dialogue.limits import RATE


class LongTurnGate:
    def __init__(self) -> None:
        self.skipping = False  # the recognizer hears silence until the user pauses
        self.drop_results = False  # results are dropped until speech starts after that pause
        self._quiet_ms = 0.0

    def start(self) -> None:
        """The turn passed its limit: skip it."""
        self.skipping = self.drop_results = True
        self._quiet_ms = 0.0

    def listen(self, pcm: bytes, hangover_ms: int) -> None:
        """While a too-long turn is skipped: a pause as long as the hangover ends the skipping."""
        levels, window = window_levels_db(pcm)
        for level in levels:
            self._quiet_ms = self._quiet_ms + window * 1000 / RATE if level < GATE_QUIET_DBFS else 0.0
            if self._quiet_ms >= hangover_ms:
                self.skipping = False  # results stay dropped until the next speech starts
                return

    def speech_started(self) -> None:
        """A speech start: the first one after the pause takes results again."""
        if self.drop_results and not self.skipping:
            self.drop_results = False
