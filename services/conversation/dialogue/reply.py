"""One reply and the user turn it answers; the held reply's bookkeeping.

A reply may start before its turn is over (preemptive: at a candidate end of turn, turn_commit.py): it is then
*held*: its text is kept back and its audio waits (playout.py) until the turn commits (``release``), and if the user
goes on first it is *discarded*: generation is cancelled and nothing of it reaches the caller or the context. The
reply also keeps what it produced and sent (text, audio pieces, the walls of its first text and audio) for the turn's
result and for what the user heard (heard.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from services.common.engines import TurnResult, TurnTimings
from services.conversation.dialogue.heard import SentPiece


@dataclass
class UserTurn:
    index: int
    text: str
    audio: bytes | None  # 16 kHz s16le of the turn (engines that answer audio), else None
    speech_end_wall: float | None
    transcript_wall: float
    commit_wall: float | None = None  # when the turn committed (None while its reply is held, preemptive)
    discarded: int = 0  # preemptive replies to earlier candidate ends of this turn, dropped (the user went on)
    preemptive: bool = False  # its reply started before the commit
    unprompted: bool = False  # the agent's own turn (ACTION_RESPOND): no user words, no user message in the context


@dataclass
class Reply:
    """What one reply has produced and sent."""

    turn: UserTurn
    text: str = ""
    pieces: list[SentPiece] = field(default_factory=list)
    queued_s: float = 0.0  # audio handed to the event queue (paces generation)
    sent_s: float = 0.0  # audio taken from the queue by the caller (what the user got)
    first_text_wall: float | None = None
    first_audio_wall: float | None = None  # first audio taken by the caller
    last_audio_wall: float | None = None
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # the caller took audio
    started_speaking: bool = False
    interrupted_reason: str = ""
    interrupted_wall: float | None = None
    caller_played_ms: int | None = None  # the caller's own playback position at its interrupt, when it sent one
    served_by: str = ""
    # Preemptive: started at a candidate end of turn; text and audio are held until the turn commits.
    held: bool = False
    released: asyncio.Event = field(default_factory=asyncio.Event)
    held_text: list[str] = field(default_factory=list)
    discarded: bool = False  # the user went on before the commit: nothing of it reaches the caller or the context
    gen_task: asyncio.Task | None = None
    calls: list = field(default_factory=list)  # function calls answered (function_calls.CompletedCall), in order

    def hold_text(self, delta: str) -> bool:
        """A held reply keeps its text deltas for the commit (True); others send them now (False)."""
        if self.held:
            self.held_text.append(delta)  # sent at the commit; never, if the reply is dropped
        return self.held

    def release(self) -> list[str]:
        """The turn committed: the reply is no longer held; returns the text deltas kept back, to send now. Audio
        waiting for the commit goes on (``released``)."""
        self.held = False
        deltas = list(self.held_text)
        self.held_text.clear()
        self.released.set()
        return deltas

    def discard(self) -> None:
        """The user went on before the commit: generation stops (brain stream and TTS with the task); whatever waited
        for the commit wakes and sees ``discarded``."""
        self.discarded = True
        self.released.set()
        if self.gen_task is not None:
            self.gen_task.cancel()

    def result(self, heard: str, interrupted: bool) -> TurnResult:
        """The turn's result as sent: ``heard`` is what the context keeps of the reply."""
        turn = self.turn
        end = turn.speech_end_wall
        timings = TurnTimings(
            speech_end_to_first_audio=(self.first_audio_wall - end) if end and self.first_audio_wall else None,
            speech_end_to_transcript=(turn.transcript_wall - end) if end else None,
            transcript_to_first_text=(self.first_text_wall - turn.transcript_wall) if self.first_text_wall else None,
            reply_audio=self.sent_s,
            speech_end_to_commit=(turn.commit_wall - end) if end and turn.commit_wall else None,
            discarded_replies=turn.discarded,
            preemptive=turn.preemptive,
        )
        return TurnResult(turn.text, heard, interrupted, timings, self.served_by)
