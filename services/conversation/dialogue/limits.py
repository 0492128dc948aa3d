"""A dialogue session's settings (``moss_sts.*``): limits per session and turn, reply pacing, the commit's timing,
barge-in, echo cancellation, reading ahead and the words judgement. One frozen value per session kind, built from the
config section once (``DialogueLimits.from_config``), so every part reads the same numbers."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.text import FirstSegment
from services.conversation import echo
from services.conversation.turn_words import SureRule

RATE = 16_000  # rate of the audio a session takes (ASR engines' native rate)


@dataclass(frozen=True)
class DialogueLimits:
    max_session_s: float = 3600.0
    max_turns: int = 200
    max_user_turn_s: float = 60.0
    max_user_turn_chars: int = 2000
    max_context_turns: int = 16
    max_context_chars: int = 3000
    playout_lead_s: float = 0.3
    chunk_ms: int = 100
    first_chunk_ms: int = 40
    default_max_tokens: int = 80
    default_system_prompt: str = "You are a friendly voice assistant. Answer in one or two short sentences."
    # A turn commits once the user has been silent this long after their speech (stream time); a reply started
    # earlier (at the final) is held until then and dropped if the user speaks again first. 0: commit at the final.
    turn_commit_ms: int = 250
    # Speech over the reply with no words heard yet, or only backchannels, interrupts only after this long.
    barge_in_unheard_ms: int = 1500
    # Cancel the echo of the reply in the caller's audio (WebRTC AEC3 with the audio the caller took as reference).
    echo_cancellation: bool = True
    # Where the reply's first segment is cut (moss_sts.reply_first_segment_*); None: the TTS engine's own rule. A
    # remote TTS engine (the router's fallback) applies its service's rule whatever this says.
    reply_first: FirstSegment | None = None
    # Drafts of the user's words while they speak, read by the brain ahead of the turn (sessions that have a text
    # brain: ``DialogueSession.read_ahead``); 0: off.
    brain_read_ahead_ms: int = 0
    # The words judgement (sessions that have a text brain: ``DialogueSession.judge_words``, turn_words.py): a
    # candidate end of turn whose words the brain gives a log P(end of turn) below this waits for more speech up to
    # the endpointing's max_silence_ms; None: off.
    words_unfinished_below: float | None = None
    # Words at or above words_unfinished_below that this rule does not call surely finished read doubtful: the commit
    # waits for more speech up to words_doubt_ms after the speech ended (at most max_silence_ms).
    words_sure: SureRule | None = None
    words_doubt_ms: int = 0
    # What the agent says while a function call waits for its output past the session's tool_filler_s.
    tool_filler_text: str = "One moment."

    @classmethod
    def from_config(cls, section) -> DialogueLimits:
        return cls(
            max_session_s=section.max_session_seconds,
            max_turns=section.max_turns_per_session,
            max_user_turn_s=section.max_user_turn_seconds,
            max_user_turn_chars=section.max_user_turn_chars,
            max_context_turns=section.max_context_turns,
            max_context_chars=section.max_context_chars,
            playout_lead_s=section.playout_lead_ms / 1000,
            chunk_ms=section.reply_chunk_ms,
            first_chunk_ms=section.reply_first_chunk_ms,
            default_max_tokens=section.default_max_tokens,
            default_system_prompt=section.default_system_prompt,
            turn_commit_ms=section.turn_commit_ms,
            barge_in_unheard_ms=section.barge_in_unheard_ms,
            echo_cancellation=section.echo_cancellation,
            reply_first=section.reply_first_segment(),
            brain_read_ahead_ms=section.brain_read_ahead_ms,
            words_unfinished_below=section.brain_turn_logprob if section.brain_turn_check else None,
            words_sure=SureRule(
                section.brain_turn_sure_logprob,
                section.brain_turn_sound_weight,
                section.brain_turn_confidence_weight,
                section.brain_turn_sound_floor,
            )
            if section.brain_turn_check
            else None,
            words_doubt_ms=section.brain_turn_doubt_ms,
            tool_filler_text=section.tool_filler_text,
        )


def check_echo_cancellation(service: str, section) -> None:
    """At start: echo cancellation configured on (``moss_sts.echo_cancellation``) needs its wheel."""
    if section.echo_cancellation:
        try:
            echo.ensure_available()
        except echo.EchoCancellerUnavailable as e:
            raise SystemExit(f"{service}: cannot start: moss_sts.echo_cancellation is on, but {e}") from None
