"""Turn-taking shared by every STS engine: endpointing, barge-in, paced reply audio, bounded context, limits.

A ``DialogueSession`` listens through an ASR stream (any ``AsrEngine``: the asr CPU engine in the box, or a remote
one) and answers each user turn with ``generate_reply`` (the engine's part: the cascade asks the brain and speaks
with a TTS engine; MOSS-Speech answers the user's audio with audio). Everything else lives here once:

* a user turn ends at the final result of an utterance after which the user is silent (the endpointer's hangover),
  or at ACTION_END_OF_TURN (the ASR stream is finished, which finalizes the utterance, and a new one opened);
* states LISTENING -> THINKING (turn ended) -> SPEAKING (first reply audio) -> LISTENING (turn complete);
* reply audio is handed out at the pace it plays (``playout_lead_s`` ahead at most), cut into small chunks, so an
  interruption stops what the user would hear and the context keeps only the text whose audio was sent
  (``heard_text``: the text spans of the audio pieces, the last piece pro rata, cut back to a word boundary);
* barge-in: user speech over the reply that holds a stop word, or enough words, or lasts ``barge_in_unheard_ms``
  while the agent thinks or speaks cancels the reply (generation stops at its next step; audio still queued is
  dropped), then INTERRUPTED and TURN_COMPLETE (interrupted) are sent and that speech is the next user turn; a
  backchannel ("mm-hm") or the reply's own echo is ignored;
* limits: user audio per session and turns per session end the session (RESOURCE_EXHAUSTED); a user turn longer
  than ``max_user_turn_s`` fails (TurnError RESOURCE_EXHAUSTED), and until the user pauses the audio is not
  recognized at all (a level gate listens for the pause), so a monologue grows neither memory nor CPU;
  the context keeps the last ``max_context_turns`` turns within ``max_context_chars``.

``DialogueSession`` (session.py) is a thin composition; each part decides one thing and has its own tests
(tests/conversation/dialogue/test_<module>.py)::

  caller audio ─► feed ─► StreamTime ─────────────► the recognizer (AsrStream) ─► events ─┐
                  │       (stream ms, arrivals)                                            │
                  ├─► CallerSound (level: last sound, run of sound)                        │
                  └─► LongTurnGate (a monologue: silence to the recognizer until a pause)  │
                                                                                           ▼
     RecognizerPace (how far the recognizer has reported) ◄──────────── session._on_asr ───┤
                                                                                           │
     ┌──── LISTENING: the user's turn ──────────────────┐  ┌── THINKING/SPEAKING ──────────┴─┐
     │ TurnCommit: candidate end of turn → held reply   │  │ Overlap: speech over the reply:  │
     │   commit (silent turn_commit_ms, the recognizer  │  │   stop word / words / long       │
     │   caught up, WordsJudge's reading) or discard    │  │   speech → barge-in; backchannel │
     │ ReadAhead: drafts → the brain reads ahead        │  │   and own words (echo) → not     │
     └──────────────────────────────────────────────────┘  └──────────────────────────────────┘
                       │ commit                                     │ barge-in: cancel the reply
                       ▼                                            ▼
     Reply (held → released / discarded) ─► Playout (chunks paced to playback) ─► the caller
                       │                                            │
                       └─► heard_text (what was heard of it) ─► Context (bounded, trimmed in halves)

  limits.py         DialogueLimits             the settings every part reads (moss_sts.*)
  stream_time.py    StreamTime, RecognizerPace stream ms and arrival walls; is the recognizer behind the caller?
  caller_sound.py   CallerSound                where the caller last made sound; how long a run of sound lasts
  long_turn.py      LongTurnGate               a turn past max_user_turn_s: skipped until the user pauses
  turn_commit.py    TurnCommit                 when a candidate end of turn commits, waits or is discarded
  reply.py          UserTurn, Reply            one reply: held / released / discarded; its timings
  playout.py        Playout                    reply audio handed out at the pace it plays
  heard.py          heard_text, SentPiece      the text whose audio the caller got
  function_calls.py FunctionCalls              the agent's call of a caller's function: sent at the commit, its
                                               output awaited (timeout, barge-in cancel it)
  turn_end.py       turn_end                   how a reply's turn ends (failed / interrupted / complete), what the
                                               context keeps of it
  overlap.py        Overlap                    does speech over the reply interrupt it (barge-in)?
  read_ahead.py     ReadAhead                  which drafts the brain reads ahead of the turn
  context.py        Context, Message           the dialogue so far, bounded
  session.py        DialogueSession            the composition: stream, state, turn tasks, events

Times are stream times (ms of user audio fed) for speech, wall times for latencies: a speech end at stream offset X
happened when the audio at X arrived (kept in a bounded map).
"""

from services.conversation.dialogue.caller_sound import window_levels_db
from services.conversation.dialogue.context import Context, Message
from services.conversation.dialogue.heard import SentPiece, heard_text, voiced_span
from services.conversation.dialogue.limits import RATE, DialogueLimits, check_echo_cancellation
from services.conversation.dialogue.read_ahead import as_final_begins
from services.conversation.dialogue.reply import Reply, UserTurn
from services.conversation.dialogue.session import DialogueSession, ReplySink

__all__ = [
    "RATE",
    "Context",
    "DialogueLimits",
    "DialogueSession",
    "Message",
    "Reply",
    "ReplySink",
    "SentPiece",
    "UserTurn",
    "as_final_begins",
    "check_echo_cancellation",
    "heard_text",
    "voiced_span",
    "window_levels_db",
]
