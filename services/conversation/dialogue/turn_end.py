"""How a reply's turn ends, once its generation is over: failed, interrupted or complete, and what of the reply the
context keeps.

A failed reply (the engine raised) ends in TURN_ERROR, and the context keeps the text the user heard of it. An
interrupted one (barge-in, or the caller's interrupt) ends in INTERRUPTED (why, the audio sent, the text heard, how
long audio went on after the cut) then TURN_COMPLETE, and the context keeps only what was heard (heard.py): the agent
never "remembers" saying what the user did not hear. A complete one ends in TURN_COMPLETE with its whole text."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import grpc

from services.common.engines import INTERRUPTED, TURN_COMPLETE, TURN_ERROR, StsEvent
from services.common.errors import VoiceError
from services.conversation.dialogue.heard import heard_text
from services.conversation.dialogue.reply import Reply

log = logging.getLogger("voicefleet.conversation.dialogue")


@dataclass
class TurnEnd:
    """``events`` to send ((event, what it accounts for)); ``heard``: the reply's text the context keeps; ``failed``:
    the context keeps ``heard`` as plain text (no engine hook: a failed reply has no audio of its own to keep)."""

    heard: str
    failed: bool
    events: list[tuple[StsEvent, tuple | None]] = field(default_factory=list)


def played_s(reply: Reply) -> float | None:
    """How much of the reply's audio the caller had played when it was cut, in seconds. The caller's own figure when
    it sent one with its interrupt (a Realtime client's ``audio_end_ms``: it knows its buffer); otherwise estimated:
    audio goes out up to ``playout_lead_ms`` ahead of playback (playout.py), so what was sent is more than what was
    heard, and playback is taken to run on the wall clock from the first audio the caller took. None when neither
    can be said."""
    if reply.caller_played_ms is not None:
        return min(reply.sent_s, reply.caller_played_ms / 1000)
    if reply.interrupted_wall is None or reply.first_audio_wall is None or reply.sent_s <= 0:
        return None
    return min(reply.sent_s, max(0.0, reply.interrupted_wall - reply.first_audio_wall))


def turn_end(reply: Reply, error: BaseException | None) -> TurnEnd:
    """The end of ``reply``'s turn, given the error its generation raised (None: it returned or was cancelled)."""
    index = reply.turn.index
    if error is not None and not reply.interrupted_reason:
        code = error.code if isinstance(error, VoiceError) else grpc.StatusCode.INTERNAL
        message = error.message if isinstance(error, VoiceError) else f"reply failed: {type(error).__name__}"
        if not isinstance(error, VoiceError):
            log.error("reply failed", exc_info=error)
        event = StsEvent(TURN_ERROR, index, code=code.value[0], message=message)
        return TurnEnd(heard_text(reply.text, reply.pieces), True, [(event, None)])
    interrupted = bool(reply.interrupted_reason)
    heard = heard_text(reply.text, reply.pieces, played_s(reply)) if interrupted else reply.text.strip()
    end = TurnEnd(heard, False)
    if interrupted:
        silence = None
        if reply.interrupted_wall is not None:
            last = reply.last_audio_wall or reply.interrupted_wall
            silence = max(0.0, last - reply.interrupted_wall)
        cut = StsEvent(
            INTERRUPTED,
            index,
            reason=reply.interrupted_reason,
            audio_sent_ms=round(reply.sent_s * 1000),
            heard_text=heard,
            silence_after_s=silence,
        )
        end.events.append((cut, None))
    # TURN_COMPLETE's result is made as it is sent (events()): audio still queued at turn end goes out first.
    end.events.append((StsEvent(TURN_COMPLETE, index), (reply, heard, interrupted)))
    return end
