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
* barge-in: user speech that lasts ``barge_in.min_speech_ms`` while the agent thinks or speaks cancels the reply
  (generation stops at its next step; audio still queued is dropped), then INTERRUPTED and TURN_COMPLETE
  (interrupted) are sent and that speech is the next user turn; shorter speech (a cough, "mm-hm") is ignored;
* limits: user audio per session and turns per session end the session (RESOURCE_EXHAUSTED); a user turn longer
  than ``max_user_turn_s`` fails (TurnError RESOURCE_EXHAUSTED), and until the user pauses the audio is not
  recognized at all (a level gate listens for the pause), so a monologue grows neither memory nor CPU;
  the context keeps the last ``max_context_turns`` turns within ``max_context_chars``.

Times are stream times (ms of user audio fed) for speech, wall times for latencies: a speech end at stream offset X
happened when the audio at X arrived (kept in a bounded map).
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import numpy as np

from services.common import audio, metrics
from services.common.engines import (
    DRAFT,
    END_OF_TURN,
    END_OF_TURN_JUDGED,
    INTERRUPT,
    INTERRUPTED,
    LISTENING,
    MUTE,
    PHRASE_SPOTTED,
    REPLY_AUDIO,
    REPLY_TEXT,
    RESULT,
    SPEAKING,
    SPEECH_END,
    SPEECH_START,
    STATE,
    THINKING,
    TURN_COMPLETE,
    TURN_ERROR,
    TURN_ESTIMATE,
    UNMUTE,
    USER_TRANSCRIPT,
    AsrEngine,
    AsrStream,
    AudioPiece,
    Draft,
    Hypothesis,
    RecognitionOptions,
    SessionOptions,
    SpottedPhrase,
    StsEvent,
    StsSession,
    TurnResult,
    TurnTimings,
)
from services.common.errors import FailedPrecondition, InvalidArgument, ResourceExhausted, VoiceError
from services.common.text import FirstSegment
from services.conversation import echo
from services.conversation.barge_in import DEFAULT_STOP_WORDS, WordRule, words
from services.conversation.echo import EchoCanceller, is_own_words
from services.conversation.relay import AudioRing, EventRelay, shifted
from services.conversation.turn_words import JUDGEMENT_WAIT_MS, WordsJudge

log = logging.getLogger("voicefleet.conversation.dialogue")

RATE = 16_000  # rate of the audio a session takes (ASR engines' native rate)
GATE_WINDOW = 512  # level gate window while a too-long turn is skipped (32 ms)
GATE_QUIET_DBFS = -45.0  # a window below this is a pause for the level gate
# While a reply is held for its commit: a window this loud after the user's speech ended may be them going on (the
# recognizer confirms speech only after min_speech_ms), so the commit waits for its word (RESUME_WAIT_MS at most).
RESUME_DBFS = -40.0
RESUME_QUIET_MS = 160
# A silence this long inside speech over the reply ends a run of sound: long speech (barge_in_unheard_ms) is counted
# from the run's start. Words in a sentence are closer than this; a backchannel and a later stop word are not.
SOUND_GAP_MS = 500
# A recognizer in another process (the asr service) reports on audio a little after it was fed: a commit waits for
# its word on sound fed less than this long ago that it has not reported on yet (its position: its events' offsets),
# or, when it runs further behind (a loaded asr; a caller that sent its words at once), RECOGNIZER_LAG_MARGIN times
# the lag its last report showed, at most RECOGNIZER_LAG_MAX_S. With 0.5 s alone, on a 2-core machine with two busy
# loops beside the fleet "Hello, my name is Alice." sent at once committed as "Hello?" at that final, the recognizer
# ~1 s behind and "my name is Alice" fed long before (bench/results/cpu-probes-2026-11-28-amd/under_load-three_turn.log).
RECOGNIZER_LAG_S = 0.5
RECOGNIZER_LAG_MARGIN = 2.0
RECOGNIZER_LAG_MAX_S = 5.0
# A draft that arrives when the caller has been quiet this long is not read ahead (see _on_draft).
READ_AHEAD_QUIET_MS = 64
USER_AUDIO_PAD_MS = 200  # audio kept before a user turn's start for engines that answer audio


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
        )


def as_final_begins(draft: str) -> str:
    """A draft as the final will most likely begin: whisper's finals start with a capital letter, its greedy drafts
    of a short window often do not, and the brain's prompt cache reuses a prefix only token for token."""
    draft = draft.strip()
    return draft[:1].upper() + draft[1:]


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


def check_echo_cancellation(service: str, section) -> None:
    """At start: echo cancellation configured on (``moss_sts.echo_cancellation``) needs its wheel."""
    if section.echo_cancellation:
        try:
            echo.ensure_available()
        except echo.EchoCancellerUnavailable as e:
            raise SystemExit(f"{service}: cannot start: moss_sts.echo_cancellation is on, but {e}") from None


@dataclass
class Message:
    """One entry of the dialogue context. ``audio`` (16 kHz s16le) is kept only for engines that answer audio."""

    role: str  # "user" or "assistant"
    text: str
    audio: bytes | None = None

    def size(self) -> int:
        return len(self.text)


class Context:
    """The dialogue so far, bounded: the last ``max_turns`` user+assistant pairs within ``max_chars`` characters.

    Past a bound it drops its oldest turns down to ``TRIM_TO`` of both bounds at once, not one turn each time: the
    brain resumes from the longest prompt prefix it has seen (llama.cpp's prompt cache), and a context that lost its
    first turn every turn shared only the system prompt with the one before, so from there on every turn evaluated
    the whole context again (docs/conversation.md#the-brain)."""

    TRIM_TO = 0.5

    def __init__(self, max_turns: int, max_chars: int):
        self.max_turns = max_turns
        self.max_chars = max_chars
        self.messages: collections.deque[Message] = collections.deque()

    def add(self, message: Message) -> None:
        if not message.text and message.audio is None:
            return
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == message.role == "user" and last.audio is None and message.audio is None:
            last.text = f"{last.text} {message.text}".strip()  # a user turn that got no reply: merge, keep alternation
        else:
            self.messages.append(message)
        self._trim()

    def _over(self, turns: int, chars: int) -> bool:
        users = sum(m.role == "user" for m in self.messages)
        return len(self.messages) > 1 and (users > turns or sum(m.size() for m in self.messages) > chars)

    def _trim(self) -> None:
        if self._over(self.max_turns, self.max_chars):
            turns, chars = max(1, int(self.max_turns * self.TRIM_TO)), int(self.max_chars * self.TRIM_TO)
            while self._over(turns, chars):
                self.messages.popleft()
        while self.messages and self.messages[0].role != "user":  # start with the user, like a chat
            self.messages.popleft()

    def chat(self, system_prompt: str) -> list[dict]:
        """OpenAI chat messages: the system prompt, then the turns."""
        out = [{"role": "system", "content": system_prompt}] if system_prompt else []
        out += [{"role": m.role, "content": m.text} for m in self.messages]
        return out


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


@dataclass
class _SentPiece:
    text_start: int
    text_end: int
    total_samples: int
    sent_samples: int = 0
    # Where the piece's words are: its audio from the first to the last sound (``voiced_span``); a voice's pause
    # before a sentence holds none of them.
    voiced_start: int = 0
    voiced_end: int | None = None


def voiced_span(pcm: bytes) -> tuple[int, int]:
    """[first, last) sample of s16le ``pcm`` that is sound: windows within 40 dB of its loudest and above -55 dBFS."""
    levels, window = window_levels_db(pcm)
    if not len(levels):
        return 0, 0
    voiced = np.flatnonzero((levels >= levels.max() - 40.0) & (levels >= -55.0))
    if not len(voiced):
        return 0, len(pcm) // 2
    return int(voiced[0]) * window, min(len(pcm) // 2, (int(voiced[-1]) + 1) * window)


@dataclass
class _Reply:
    """What one reply has produced and sent."""

    turn: UserTurn
    text: str = ""
    pieces: list[_SentPiece] = field(default_factory=list)
    queued_s: float = 0.0  # audio handed to the event queue (paces generation)
    sent_s: float = 0.0  # audio taken from the queue by the caller (what the user got)
    first_text_wall: float | None = None
    first_audio_wall: float | None = None  # first audio taken by the caller
    last_audio_wall: float | None = None
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # the caller took audio
    started_speaking: bool = False
    interrupted_reason: str = ""
    interrupted_wall: float | None = None
    served_by: str = ""
    # Preemptive: started at a candidate end of turn; text and audio are held until the turn commits.
    held: bool = False
    released: asyncio.Event = field(default_factory=asyncio.Event)
    held_text: list[str] = field(default_factory=list)
    discarded: bool = False  # the user went on before the commit: nothing of it reaches the caller or the context
    gen_task: asyncio.Task | None = None


def heard_text(text: str, pieces: list[_SentPiece]) -> str:
    """The prefix of ``text`` whose audio was sent: whole spans of fully sent pieces; a partly sent piece counts
    pro rata by its voiced audio (the silence before its first sound holds no words), cut back to the last word
    boundary."""
    end = 0
    for p in pieces:
        if p.sent_samples <= 0 or p.text_end <= p.text_start:
            continue
        if p.sent_samples >= p.total_samples:
            end = max(end, p.text_end)
            continue
        voiced_end = p.total_samples if p.voiced_end is None else p.voiced_end
        spoken = min(1.0, max(0.0, (p.sent_samples - p.voiced_start) / max(1, voiced_end - p.voiced_start)))
        cut = p.text_start + int((p.text_end - p.text_start) * spoken)
        while cut > p.text_start and cut < len(text) and not text[cut].isspace():
            cut -= 1
        end = max(end, cut)
    return text[:end].strip()


class ReplySink:
    """What ``generate_reply`` writes to: text deltas as they come, audio pieces (paced to playback here)."""

    def __init__(self, session: DialogueSession, reply: _Reply):
        self._session = session
        self._reply = reply

    @property
    def reply_text(self) -> str:
        return self._reply.text

    async def text(self, delta: str) -> None:
        await self._session._reply_text(self._reply, delta)

    async def audio(self, piece: AudioPiece) -> None:
        await self._session._reply_audio(self._reply, piece)


class DialogueSession(StsSession):
    """Turn-taking around an ASR stream; subclasses give ``generate_reply``."""

    #: Engines that answer the user's audio itself (MOSS-Speech) keep each turn's audio (bounded).
    keeps_user_audio = False
    #: Engines with a text brain read the user's words ahead of the turn (``read_ahead``); the others ask for no
    #: drafts.
    reads_ahead = False
    #: Engines with a text brain judge a candidate end of turn by its words too (``judge_words``, turn_words.py).
    judges_words = False

    def __init__(self, service: str, served_by: str, asr: AsrEngine, options: SessionOptions, limits: DialogueLimits):
        self.service = service
        self.served_by = served_by
        self.asr = asr
        self.options = options
        self.limits = limits
        self.system_prompt = options.system_prompt or limits.default_system_prompt
        self.max_tokens = options.sampling.max_tokens or limits.default_max_tokens
        self.context = Context(limits.max_context_turns, limits.max_context_chars)
        self._relay = EventRelay()  # events to the caller: (event, what a REPLY_AUDIO/TURN_COMPLETE accounts for)
        self._stream: AsrStream | None = None
        self._spotting = self._spotting_paused = False  # the stream spots the stop words; paused (set at open)
        self._stream_lock = asyncio.Lock()  # feed vs. end-of-turn stream rotation
        self._asr_task: asyncio.Task | None = None
        self._read_ahead_task: asyncio.Task | None = None
        self._turn_task: asyncio.Task | None = None
        self._gen_task: asyncio.Task | None = None
        self._reply: _Reply | None = None
        self._closing = False
        self._finishing = False
        self.state = LISTENING
        self.turn = 0  # index of the turn being heard or answered
        self.turns_done = 0
        self._muted = False
        # Stream time (ms of user audio fed, across ASR stream rotations) and wall times of its arrival.
        self._fed_samples = 0
        self._stream_base_ms = 0  # stream offset of the current ASR stream's start
        self._arrivals: collections.deque[tuple[int, float]] = collections.deque(maxlen=4096)
        self._session_s = 0.0
        # The user turn being heard.
        self._pending: list[str] = []
        self._pending_chars = 0
        self._turn_start_ms: int | None = None
        self._speech_active = False
        self._last_speech_end_ms: int | None = None
        self._utterances = 0  # SPEECH_STARTs seen on the current ASR stream (= next utterance index)
        self._ignored: set[int] = set()  # utterances spoken over the agent that did not interrupt it
        self._overlap_start_ms: int | None = None  # speech that started while the agent thought or spoke
        self._overlap_utt: int | None = None
        self._barged_utt: int | None = None  # the utterance that interrupted the reply (the next turn's)
        self._overlap_words: list[str] = []  # the last interim's words of speech over the reply
        self._overlap_final: dict[int, int | None] = {}  # ended over the reply, judged by its final: utt -> start
        b = options.barge_in
        self._word_rule = WordRule(b.stop_words, b.backchannels, b.min_words)
        # Preemptive reply: started at a candidate end of turn, held until the user has been silent turn_commit_ms.
        self._candidate: _Reply | None = None
        self._commit_at_ms: int | None = None
        # Where the speech of a candidate started on a pause's words ended (``_start_candidate``): sound after it
        # drops that candidate.
        self._candidate_speech_end_ms = 0
        self._last_loud_ms = -1  # stream ms where the last loud window of the caller's audio ended
        self._sound_since_ms = 0  # stream ms where the caller's sound began after their last silence (SOUND_GAP_MS)
        self._heard_ms = 0  # stream ms up to which the recognizer has reported (its events' offsets)
        self._recognizer_lag_s = 0.0  # how long after it was fed the audio of the recognizer's last report came
        self._discarded = 0  # candidates of the turn being heard that were dropped (the user went on)
        self._labels = (service, served_by.rsplit("/", 1)[-1])
        # The brain's reading of a candidate's words (turn_words.py): unfinished words wait for more speech.
        self._words: WordsJudge | None = None
        if self.judges_words and limits.words_unfinished_below is not None:
            self._words = WordsJudge(self.judge_words, limits.words_unfinished_below, self._labels, self._check_commit)
        # The reply leaking back into the caller's microphone is cancelled before anything listens to it, unless the
        # caller's own canceller did that already.
        cancel = limits.echo_cancellation and not options.client_cancels_echo
        self._echo = EchoCanceller(RATE) if cancel else None
        self._echo_resampler: audio.StreamResampler | None = None
        # Over-long turn: recognition off until the user pauses.
        self._skipping = False
        self._drop_results = False
        self._quiet_ms = 0.0
        # Recent user audio for engines that answer audio (bounded: the longest turn + padding).
        self._audio_ring = AudioRing(int((limits.max_user_turn_s + 2) * RATE))

    # --- StsSession -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._open_stream()
        self._emit(StsEvent(STATE, self.turn, state=LISTENING))

    async def feed(self, pcm: bytes) -> None:
        if self._relay.ended or self._closing:
            raise FailedPrecondition("the conversation has ended; open a new session to talk again")
        seconds = len(pcm) / 2 / RATE
        self._session_s += seconds
        if self._session_s > self.limits.max_session_s:
            raise ResourceExhausted(
                f"audio: the session passed {self.limits.max_session_s:g} s of audio (moss_sts.max_session_seconds);"
                " open a new session to go on"
            )
        now = time.monotonic()
        if self._echo is not None:
            pcm = self._echo.process(pcm)  # whole 10 ms frames: a remainder comes with the next call
        if self.keeps_user_audio:
            self._audio_ring.append(pcm)
        to_asr = pcm
        if self._muted:
            to_asr = bytes(len(pcm))
        elif self._skipping:
            self._gate(pcm)
            to_asr = bytes(len(pcm))  # silence: the recognizer ends the utterance, nothing new is recognized
        async with self._stream_lock:
            self._fed_samples += len(pcm) // 2
            self._arrivals.append((self._fed_samples * 1000 // RATE, now))
            if self._stream is not None and self._spotting and self._spotting_paused != (self.state == LISTENING):
                self._spotting_paused = self.state == LISTENING
                await self._stream.pause_spotting(self._spotting_paused)
            if self._stream is not None and to_asr:
                await self._stream.feed(to_asr)
        if to_asr and not self._muted:
            self._track_loudness(to_asr)
        self._check_limits()
        if self._candidate is not None:
            await asyncio.sleep(0)  # let the recognizer's events for this audio (a SPEECH_START) be read first
        self._check_commit()

    async def control(self, action: str) -> None:
        if action == INTERRUPT:
            if self.state != LISTENING:
                self._interrupt("client")
            return  # listening: nothing to stop (not an error)
        if action == MUTE:
            self._muted = True
        elif action == UNMUTE:
            self._muted = False
        elif action == END_OF_TURN:
            if self._candidate is not None and not self._speech_active:
                self._commit()  # the reply is ready or on its way: release it now
            elif self.state == LISTENING and (self._pending or self._speech_active or self._turn_start_ms is not None):
                await self._rotate_stream()
        else:
            raise InvalidArgument("control.action", f"unknown action {action!r}")

    async def finish(self) -> None:
        if self._finishing or self._closing:
            return
        self._finishing = True
        async with self._stream_lock:
            if self._stream is not None:
                await self._stream.finish()

    async def events(self) -> AsyncIterator[StsEvent]:
        async for event, extra in self._relay.items():
            if event.kind == REPLY_AUDIO:
                reply, piece, samples = extra
                if reply.interrupted_reason:
                    continue  # audio of a reply interrupted while this chunk waited: never sent
                now = time.monotonic()
                if reply.first_audio_wall is None:
                    reply.first_audio_wall = now
                    log.debug(
                        "turn %d's reply starts playing at %d ms of the caller's audio",
                        reply.turn.index,
                        self._fed_ms(),
                    )
                piece.sent_samples += samples
                reply.sent_s += samples / event.audio.sample_rate_hz
                reply.last_audio_wall = now
                reply.progress.set()
                if self._echo is not None:
                    self._render_echo(event.audio)
            elif event.kind == TURN_COMPLETE and extra is not None:
                reply, heard, interrupted = extra  # timings as sent: audio still queued at turn end went out first
                event = dataclasses.replace(event, result=self._result(reply, heard, interrupted))
            yield event

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        tasks = (self._gen_task, self._turn_task, self._asr_task, self._read_ahead_task)
        if self._words is not None:
            self._words.cancel()
        for task in tasks:
            if task is not None:
                task.cancel()
        if self._stream is not None:
            await self._stream.close()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._relay.end()
        if self._echo is not None:
            self._echo.close()
        await self.release()

    # --- for subclasses -------------------------------------------------------------------------------------
    @abc.abstractmethod
    async def generate_reply(self, turn: UserTurn, sink: ReplySink) -> None:
        """Answer ``turn`` given ``self.context`` (which does not hold the turn yet): text deltas and audio pieces
        into ``sink``. Cancelled on interruption (stop at the next step). Raise VoiceError for a failed turn."""

    async def read_ahead(self, text: str) -> bool:
        """The user's words so far (``reads_ahead`` engines; the turn is not over): let the brain evaluate them now,
        so that the turn's own request resumes from them. False: skipped (the brain is busy); raise for a failed one
        (logged; the turn is unaffected)."""
        return False

    async def judge_words(self, text: str) -> float | None:
        """``judges_words`` engines: the reply model's log P(the user's turn ends after ``text``), None when it cannot
        say (turn_words.py); raise for a failed reading (logged; the commit goes on without it)."""
        return None

    def assistant_message(self, reply: _Reply, heard: str) -> Message | None:
        """What the context keeps of a reply (the text heard; engines that answer audio may keep audio too)."""
        return Message("assistant", heard) if heard else None

    async def release(self) -> None:
        """Free per-session resources (temp files, decoder state)."""

    # --- events ---------------------------------------------------------------------------------------------
    def _emit(self, event: StsEvent, chunk: tuple | None = None) -> None:
        self._relay.put((event, chunk))

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self._emit(StsEvent(STATE, self.turn, state=state))

    # --- recognition ----------------------------------------------------------------------------------------
    async def _open_stream(self) -> None:
        e = self.options.endpointing
        b = self.options.barge_in
        # The stop words, spotted early by the recognizer (its final recognizer on the young utterance): pass 1 often
        # misses a lone "stop", and its final comes only after the utterance ends (docs/conversation.md#barge-in).
        spot = tuple(w for w in (b.stop_words or DEFAULT_STOP_WORDS) if words(w)) if b.enabled else ()
        options = RecognitionOptions(
            language=self.options.language,
            interim_results=True,
            spot_phrases=spot,
            draft_interval_ms=self.limits.brain_read_ahead_ms if self.reads_ahead else 0,
            endpointing=e,
            sample_rate_hz=RATE,
            request_id=self.options.request_id,
            time_remaining=self.options.time_remaining,
        )
        self._stream = await self.asr.open_stream(options)
        # Stop words matter only while the agent speaks (or is about to): spotting is paused while the user has the
        # floor (feed sends the change with the next audio), which spares the asr a decode every spot_interval_ms of
        # each young utterance of theirs (docs/conversation.md#barge-in).
        self._spotting, self._spotting_paused = bool(spot), False
        self._stream_base_ms = self._fed_samples * 1000 // RATE
        self._utterances = 0
        self._ignored.clear()
        self._overlap_final.clear()
        self._overlap_start_ms = self._overlap_utt = self._barged_utt = None
        self._asr_task = asyncio.create_task(self._asr_loop(self._stream), name="dialogue-asr")

    async def _rotate_stream(self) -> None:
        """ACTION_END_OF_TURN: finish the ASR stream (the utterance in progress gets its final now), open another."""
        async with self._stream_lock:
            old, old_task = self._stream, self._asr_task
            self._stream = None
            if old is not None:
                await old.finish()
            if old_task is not None:
                await asyncio.wait({old_task})
            await self._open_stream()

    async def _asr_loop(self, stream: AsrStream) -> None:
        try:
            async for event in stream.events():
                self._on_asr(event)
                self._check_limits()
        except asyncio.CancelledError:
            raise
        except VoiceError as e:
            self._fail_session(e)
            return
        except Exception as e:  # noqa: BLE001 - the session ends with it (INTERNAL)
            log.exception("recognition failed")
            self._fail_session(e)
            return
        if self._finishing and stream is self._stream and not self._closing:
            # The user's audio is over: answer the turn in progress (and any it leads to), then end the events.
            while not self._relay.ended:
                self._maybe_end_turn(force=True)
                task = self._turn_task
                if task is None or task.done():
                    break
                await asyncio.wait({task})
            self._ended_ok()

    def _ended_ok(self) -> None:
        self._relay.end()

    def _fail_session(self, error: BaseException) -> None:
        if self._relay.ended or self._closing:
            return
        if self._gen_task is not None:
            self._gen_task.cancel()
        self._relay.end(error)

    def _abs_ms(self, offset_ms: int) -> int:
        return self._stream_base_ms + offset_ms

    def _on_asr(self, event) -> None:
        reported = event.turn.offset_ms if event.turn is not None else event.offset_ms
        if event.result is not None:
            reported = max(reported, event.result.audio_processed_ms)
        self._heard_ms = max(self._heard_ms, self._abs_ms(reported))
        if event.kind == TURN_ESTIMATE or (
            event.kind == RESULT and event.result is not None and not event.result.is_final
        ):
            # Reports made where the stream's step was (a judgement, an interim): its pace, not a decode's (finals,
            # drafts, spotting) nor the VAD's (a speech start or end is placed before the audio that confirmed it).
            fed_at = self._arrival_wall(self._abs_ms(reported))
            if fed_at is not None:
                self._recognizer_lag_s = max(0.0, time.monotonic() - fed_at)
        if event.kind == PHRASE_SPOTTED and event.spotted is not None:
            self._on_spotted(event.spotted)
            return
        if event.kind == DRAFT and event.draft is not None:
            self._on_draft(event.draft)
            return
        if event.kind == TURN_ESTIMATE and event.turn is not None:
            if self.state == LISTENING and not self._drop_results:
                t = event.turn
                judged = dataclasses.replace(t, offset_ms=self._abs_ms(t.offset_ms))
                self._emit(StsEvent(END_OF_TURN_JUDGED, self.turn, turn=judged))
                if t.sentence_end and t.transcript and t.utterance_index not in self._ignored:
                    self._start_candidate(t.transcript.strip(), self._abs_ms(t.offset_ms - t.silence_ms))
            return
        if event.kind == SPEECH_START:
            utt = self._utterances
            self._utterances += 1
            log.debug("speech start at %d ms: utterance %d (%s)", self._abs_ms(event.offset_ms), utt, self.state)
            self._speech_active = True
            start = self._abs_ms(event.offset_ms)
            if self._drop_results and not self._skipping:
                self._drop_results = False  # the first speech after the over-long turn's pause
            if self.state == LISTENING:
                if self._candidate is not None:
                    self._discard_candidate()  # the user goes on: the turn was not over
                if self._turn_start_ms is None:
                    self._turn_start_ms = start
            else:
                self._overlap_start_ms, self._overlap_utt = start, utt
                self._overlap_words = []
                if not self.options.barge_in.enabled:
                    self._ignored.add(utt)
            return
        if event.kind == SPEECH_END:
            log.debug("speech end at %d ms (%s)", self._abs_ms(event.offset_ms), self.state)
            self._speech_active = False
            self._last_speech_end_ms = self._abs_ms(event.offset_ms)
            if self._overlap_utt is not None and self.state != LISTENING:
                # Spoken over the agent without interrupting it (yet): its final decides (a stop word, or enough
                # words, still interrupts; a backchannel is dropped).
                self._overlap_final[self._overlap_utt] = self._overlap_start_ms
                self._overlap_start_ms = self._overlap_utt = None
            return
        if event.kind != RESULT or event.result is None:
            return
        r: Hypothesis = event.result
        if r.utterance_index in self._overlap_final:
            if not r.is_final:
                return
            start = self._overlap_final.pop(r.utterance_index)
            verdict = self._word_rule.judge(r.transcript)
            log.info(
                "speech over the reply (utterance %d, turn %d, %s): final %r -> %s",
                r.utterance_index,
                self.turn,
                self.state,
                r.transcript,
                verdict.why,
            )
            if verdict.interrupt and self.state != LISTENING and self._own_words(r.transcript):
                return  # the agent's own voice heard back
            # Speech that ended without interrupting: only a stop word in its final still does. Whisper writes words
            # into a hum ("And then we chant." for "mm-hm"), so word counts are read on interims only.
            if not (verdict.why == "stop_word" and self.options.barge_in.enabled):
                if verdict.why != "empty":
                    refused = "backchannel" if verdict.why == "backchannel" else "short_speech"
                    metrics.STS_BARGE_IN_REFUSED.labels(*self._labels, refused).inc()
                return  # a backchannel (or a short remark) over the reply: not the user's turn
            if self.state != LISTENING and self._reply is not None and not self._reply.interrupted_reason:
                self._overlap_start_ms, self._overlap_utt = start, r.utterance_index
                self._barge_in(f"{verdict.why}_final")
            elif self.state == LISTENING and self._turn_start_ms is None:
                self._turn_start_ms = start
        if self._drop_results or r.utterance_index in self._ignored:
            if r.is_final:
                self._ignored.discard(r.utterance_index)
            return
        if r.utterance_index == self._overlap_utt and self.state != LISTENING:
            if not self._judge_overlap(r):
                return  # speech over the agent that has not interrupted it (yet)
        # Speech that interrupted the reply belongs to the next turn, even while the reply is still winding down.
        turn = self.turn + 1 if r.utterance_index == self._barged_utt and self.state != LISTENING else self.turn
        in_stream_time = shifted(r, self._stream_base_ms)
        if not r.is_final:
            self._emit(StsEvent(USER_TRANSCRIPT, turn, transcript=in_stream_time))
            return
        text = r.transcript.strip()
        log.debug("final of utterance %d (turn %d, %s): %r", r.utterance_index, turn, self.state, text)
        if text:
            room = self.limits.max_user_turn_chars - self._pending_chars
            if room > 0:
                self._pending.append(text[:room])
                self._pending_chars += min(len(text), room) + 1
            self._emit(StsEvent(USER_TRANSCRIPT, turn, transcript=in_stream_time))
        self._maybe_end_turn()

    def _maybe_end_turn(self, force: bool = False) -> None:
        """The user is silent after a final: a candidate end of their turn. The reply starts now; it commits (its
        text and audio go out) once the user has been silent ``turn_commit_ms`` after their speech, and is dropped
        if they speak again first (``_discard_candidate``)."""
        if self.state != LISTENING or self._closing or (self._speech_active and not force):
            return
        if self._awaiting_final:
            # Started on the words of a pause that read as a sentence: this final is that pause's (the same words)
            # or the user went on (more words): then that reply answered half a turn.
            if " ".join(self._pending).strip() != self._candidate.turn.text:
                self._discard_candidate()
            else:
                self._commit_at_ms = (self._last_speech_end_ms or self._fed_ms()) + self.limits.turn_commit_ms
                if force:
                    self._commit()
                return
        if self._candidate is not None:
            if force:
                self._commit()
            return  # a held reply waits for its commit
        if not self._pending:
            self._turn_start_ms = None if not self._speech_active else self._turn_start_ms
            return
        text = " ".join(self._pending).strip()
        audio = self._turn_audio() if self.keeps_user_audio else None
        end_wall = self._arrival_wall(self._last_speech_end_ms) if self._last_speech_end_ms is not None else None
        turn = UserTurn(self.turn, text, audio, end_wall, time.monotonic(), discarded=self._discarded)
        commit_at = (self._last_speech_end_ms or self._fed_ms()) + self.limits.turn_commit_ms
        late = self._fed_ms() >= commit_at and not self._recognizer_behind()
        if force or self.limits.turn_commit_ms <= 0 or (late and self._words is None):
            turn.commit_wall = time.monotonic()
            self._clear_heard_turn()
            self._set_state(THINKING)
            self._turn_task = asyncio.create_task(self._run_turn(turn), name=f"dialogue-turn-{turn.index}")
            return
        self._hold_reply(turn, commit_at)

    def _hold_reply(self, turn: UserTurn, commit_at_ms: int | None) -> None:
        """Start the reply to a candidate end of turn, held until the commit (at ``commit_at_ms`` of the stream;
        None: once the recognizer's final says the turn is over, ``_awaiting_final``)."""
        turn.preemptive = True
        self._commit_at_ms = commit_at_ms
        reply = _Reply(turn, served_by=self.served_by, held=True)
        self._candidate = self._reply = reply  # at once: a SPEECH_START read next must find it to drop it
        if self._words is not None:
            self._words.start(turn.text, self._fed_ms())  # first: the brain reads the words, then replies
        self._turn_task = asyncio.create_task(self._run_turn(turn, reply), name=f"dialogue-turn-{turn.index}")

    def _start_candidate(self, words: str, speech_end_ms: int) -> None:
        """The turn model heard the pause unfinished but its words read as a finished sentence: the recognizer ends
        the utterance at sentence_end_silence_ms unless the user goes on. Start the reply to those words now, held
        until that final arrives with the same words (then the usual commit), dropped if the user speaks again first
        or the final differs. So the reply is ready when the turn ends rather than starting then."""
        if self.state != LISTENING or self._closing or self._candidate is not None or not words:
            return
        text = " ".join([*self._pending, words]).strip()
        audio = self._turn_audio() if self.keeps_user_audio else None
        turn = UserTurn(
            self.turn, text, audio, self._arrival_wall(speech_end_ms), time.monotonic(), discarded=self._discarded
        )
        self._candidate_speech_end_ms = speech_end_ms
        self._hold_reply(turn, None)

    @property
    def _awaiting_final(self) -> bool:
        """A held reply started on a pause's words (``_start_candidate``): it has no commit time until the recognizer's
        final for that pause comes."""
        return self._candidate is not None and self._commit_at_ms is None

    def _clear_heard_turn(self) -> None:
        self._pending, self._pending_chars = [], 0
        self._turn_start_ms = None
        self._discarded = 0

    def _track_loudness(self, pcm: bytes) -> None:
        """Where the caller last made sound (a window >= RESUME_DBFS, after echo cancellation): the commit's "are
        they going on?" and how long speech over the reply really lasted (an utterance stays open through silence
        the turn model judges unfinished)."""
        levels, window = window_levels_db(pcm)
        loud = np.flatnonzero(levels >= RESUME_DBFS)
        if len(loud):
            first_loud_ms = self._fed_ms() - (len(levels) - loud[0]) * window * 1000 // RATE
            if first_loud_ms - self._last_loud_ms > SOUND_GAP_MS:
                self._sound_since_ms = first_loud_ms  # sound again after a silence: a new run of it
            after_last = (len(levels) - 1 - loud[-1]) * window  # samples of the frame after the last loud window
            self._last_loud_ms = self._fed_ms() - after_last * 1000 // RATE

    def _check_commit(self) -> None:
        if self._awaiting_final:
            if self._loud_after(self._candidate_speech_end_ms):
                self._discard_candidate()  # sound again in the pause: the user may be going on
            return
        if (
            self._candidate is None
            or self._speech_active
            or self._commit_at_ms is None
            or self._fed_ms() < self._commit_at_ms
        ):
            return
        if self._recognizer_behind():
            return  # it may be the user going on
        now = self._fed_ms()
        if self._words_hold(now):
            return
        speech_end = self._last_speech_end_ms or 0
        resuming = self._loud_after(speech_end) and now - self._last_loud_ms < RESUME_QUIET_MS
        if resuming and now < self._commit_at_ms + self.options.endpointing.min_speech_ms + RESUME_QUIET_MS:
            return  # sound after the speech ended: wait for the recognizer to say whether it is speech
        self._commit()

    def _words_hold(self, now_ms: int) -> bool:
        """The commit waits for the brain's reading of the candidate's words (at most JUDGEMENT_WAIT_MS past the
        commit time or the reading's start, whichever is later), and words that read unfinished wait for more speech
        up to max_silence_ms after the speech ended (the commit time less turn_commit_ms)."""
        if self._words is None or self._words.text != self._candidate.turn.text:
            return False
        if self._words.pending:
            return now_ms < max(self._commit_at_ms, self._words.started_ms) + JUDGEMENT_WAIT_MS
        speech_end = self._commit_at_ms - self.limits.turn_commit_ms
        return self._words.unfinished and now_ms < speech_end + self.options.endpointing.max_silence_ms

    def _loud_after(self, speech_end_ms: int) -> bool:
        """The caller made sound after ``speech_end_ms`` (beyond two level windows: a word's tail is not a new one)."""
        return self._last_loud_ms > speech_end_ms + GATE_WINDOW * 2000 // RATE

    def _recognizer_behind(self) -> bool:
        """Sound was fed, a moment ago, that the recognizer has not reported on yet (one in another process lags)."""
        if self._last_loud_ms <= self._heard_ms:
            return False
        fed_at = self._arrival_wall(self._last_loud_ms)
        wait = min(RECOGNIZER_LAG_MAX_S, max(RECOGNIZER_LAG_S, RECOGNIZER_LAG_MARGIN * self._recognizer_lag_s))
        return fed_at is not None and time.monotonic() - fed_at < wait

    def _commit(self) -> None:
        """The held reply's turn is over: its text and audio go out (from where generation got to)."""
        reply, self._candidate, self._commit_at_ms = self._candidate, None, None
        if self._words is not None:
            self._words.too_late()  # a verdict still under way no longer matters
        if reply is None or reply.discarded:
            return
        reply.turn.commit_wall = time.monotonic()
        self._clear_heard_turn()
        metrics.STS_PREEMPTIVE_REPLIES.labels(*self._labels, "used").inc()
        self._set_state(THINKING)
        reply.held = False
        for delta in reply.held_text:
            self._emit(StsEvent(REPLY_TEXT, reply.turn.index, text=delta))
        reply.held_text.clear()
        reply.released.set()

    def _discard_candidate(self) -> None:
        """Speech came back before the commit: drop the held reply (brain stream and TTS stop with the task);
        none of it was sent, and the context never saw it. The user's words so far stay pending."""
        reply, self._candidate, self._commit_at_ms = self._candidate, None, None
        if self._words is not None:
            self._words.cancel()
        if reply is None:
            return
        reply.discarded = True
        reply.released.set()  # wakes whatever waited for the commit; it sees ``discarded``
        if reply.gen_task is not None:
            reply.gen_task.cancel()
        if self._reply is reply:
            self._reply = None
            self._gen_task = None
        self._discarded += 1
        metrics.STS_PREEMPTIVE_REPLIES.labels(*self._labels, "discarded").inc()

    def _arrival_wall(self, offset_ms: int) -> float | None:
        for ms, wall in self._arrivals:
            if ms >= offset_ms:
                return wall
        return self._arrivals[-1][1] if self._arrivals else None

    # --- limits and barge-in --------------------------------------------------------------------------------
    def _fed_ms(self) -> int:
        return self._fed_samples * 1000 // RATE

    def _check_limits(self) -> None:
        now_ms = self._fed_ms()
        if (
            self.state != LISTENING
            and self._overlap_start_ms is not None
            and self.options.barge_in.enabled
            and self._speech_active
        ):
            # Words decide (``_judge_overlap``); speech that goes on this long interrupts whatever was heard (no
            # backchannel is that long; pass-1 interims can miss a word).
            # Sound without a silence in it, not an utterance held open in silence: a backchannel, a pause, then a
            # stop word is not one long speech (a recognizer running behind keeps the backchannel's utterance open).
            lasted = self._last_loud_ms - max(self._overlap_start_ms, self._sound_since_ms)
            sounding = now_ms - self._last_loud_ms < RESUME_QUIET_MS
            if sounding and lasted >= max(self.limits.barge_in_unheard_ms, self.options.barge_in.min_speech_ms):
                self._barge_in("long_speech")
        if (
            self.state == LISTENING
            and self._turn_start_ms is not None
            and not self._skipping
            and now_ms - self._turn_start_ms > self.limits.max_user_turn_s * 1000
        ):
            self._fail_long_turn()

    def _judge_overlap(self, r: Hypothesis) -> bool:
        """Words of speech over the reply: a stop word, or enough words that are not backchannels, interrupt at
        once. Returns whether it interrupted."""
        if not self.options.barge_in.enabled or not self._speech_active or self._overlap_start_ms is None:
            return False
        verdict = self._word_rule.judge(r.transcript)
        if verdict.interrupt and self._own_words(r.transcript):
            return False
        if verdict.why == "words":
            # Pass 1 (pocketsphinx) guesses wildly at a hum ("and i'm home" for "mm-hm"): count only the words two
            # interims in a row agree on.
            heard = words(r.transcript)
            prev, self._overlap_words = self._overlap_words, heard
            stable = []
            for a, b in zip(prev, heard, strict=False):
                if a != b:
                    break
                stable.append(a)
            verdict = self._word_rule.judge(" ".join(stable))
        if not verdict.interrupt:
            return False
        if verdict.why != "stop_word" and self._fed_ms() - self._overlap_start_ms < self.options.barge_in.min_speech_ms:
            return False  # words, but shorter than barge_in.min_speech_ms: wait (a stop word never waits)
        self._barge_in(verdict.why)
        return True

    def _on_draft(self, draft: Draft) -> None:
        """The recognizer's draft of the user's words so far, while they speak: the brain reads the turn so far ahead
        of its end (one request at a time; the next draft comes soon). Not over the agent's reply (speech there may
        be a backchannel, and the brain is busy with the reply), nor for words that are dropped."""
        if (
            self.state != LISTENING
            or self._candidate is not None
            or self._drop_results
            or self._closing
            or draft.utterance_index in self._ignored
        ):
            return
        if self._read_ahead_task is not None and not self._read_ahead_task.done():
            return
        if self._fed_ms() - self._last_loud_ms > READ_AHEAD_QUIET_MS:
            # The user has paused: if that is the end of their turn, its final is a moment away, and the brain would
            # still be reading this draft (on the cores the final's decode needs) when the turn's request comes.
            metrics.STS_BRAIN_READ_AHEADS.labels(*self._labels, "skipped").inc()
            return
        text = " ".join([*self._pending, as_final_begins(draft.transcript)]).strip()
        self._read_ahead_task = asyncio.create_task(self._read_ahead(text), name="dialogue-read-ahead")

    async def _read_ahead(self, text: str) -> None:
        try:
            sent = await self.read_ahead(text)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - only a head start: the turn's own request evaluates the words
            log.info("reading ahead failed (the turn evaluates the words itself): %s", e)
            metrics.STS_BRAIN_READ_AHEADS.labels(*self._labels, "failed").inc()
            return
        metrics.STS_BRAIN_READ_AHEADS.labels(*self._labels, "done" if sent else "skipped").inc()

    def _on_spotted(self, s: SpottedPhrase) -> None:
        """The recognizer heard a stop word early in speech over the reply (before the utterance's final): interrupt
        at once, unless the words are the reply's own (echo). Speech that started while the agent listened is a
        turn of its own: its final decides as usual."""
        utt = s.utterance_index
        if self.state == LISTENING or not self.options.barge_in.enabled:
            return
        if self._reply is None or self._reply.interrupted_reason:
            return
        if utt == self._overlap_utt and self._overlap_start_ms is not None:
            start = self._overlap_start_ms
        elif utt in self._overlap_final:
            start = self._overlap_final[utt]  # it ended already; its final is on its way
        else:
            return
        # Whisper on a young utterance padded with silence often repeats a short word ("Stop. Stop. Stop." for one
        # "Stop."): the echo rule compares what was said once.
        heard = words(s.transcript or s.phrase)
        said_once = " ".join(w for i, w in enumerate(heard) if not i or w != heard[i - 1])
        if self._own_words(said_once or s.phrase):
            return  # the agent's own voice heard back
        self._overlap_final.pop(utt, None)
        self._overlap_start_ms, self._overlap_utt = start, utt
        self._barge_in("stop_word_spotted")

    def _barge_in(self, why: str) -> None:
        start, utt = self._overlap_start_ms, self._overlap_utt
        log.info("barge-in (%s): utterance %s interrupts turn %d's reply", why, utt, self.turn)
        self._overlap_start_ms = self._overlap_utt = None
        self._barged_utt = utt
        metrics.STS_BARGE_IN_DECISIONS.labels(*self._labels, why).inc()
        self._interrupt("barge_in")
        self._turn_start_ms = start  # that speech is the next user turn
        self._ignored.discard(utt)

    def _fail_long_turn(self) -> None:
        seconds = self.limits.max_user_turn_s
        self._emit(
            StsEvent(
                TURN_ERROR,
                self.turn,
                code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                message=f"audio: the user turn passed {seconds:g} s (moss_sts.max_user_turn_seconds); it is dropped"
                " and not recognized until you pause, then the agent listens again: keep turns shorter",
            )
        )
        self._pending, self._pending_chars = [], 0
        self._turn_start_ms = None
        self._skipping = self._drop_results = True
        self._quiet_ms = 0.0
        self.turn += 1
        self.turns_done += 1
        self._emit(StsEvent(STATE, self.turn, state=LISTENING))

    def _gate(self, pcm: bytes) -> None:
        """While a too-long turn is skipped: a pause as long as the hangover ends the skipping."""
        levels, window = window_levels_db(pcm)
        for level in levels:
            self._quiet_ms = self._quiet_ms + window * 1000 / RATE if level < GATE_QUIET_DBFS else 0.0
            if self._quiet_ms >= self.options.endpointing.hangover_ms:
                self._skipping = False  # results stay dropped until the next speech starts
                return

    def _interrupt(self, reason: str) -> None:
        reply = self._reply
        if reply is None or self._gen_task is None or reply.interrupted_reason:
            return
        reply.interrupted_reason = reason  # audio of this reply still queued is dropped (events())
        reply.interrupted_wall = time.monotonic()
        self._gen_task.cancel()
        if self._echo is not None:
            self._echo.stop_render()  # what the caller has not played yet never plays: no echo of it to expect

    def _render_echo(self, piece: AudioPiece) -> None:
        """Reply audio the caller took is the echo canceller's reference (at 16 kHz, from now on)."""
        if self._echo_resampler is None or self._echo_resampler.src_rate != piece.sample_rate_hz:
            self._echo_resampler = audio.StreamResampler(piece.sample_rate_hz, RATE)
        pcm = self._echo_resampler.feed(piece.pcm)
        if pcm:
            self._echo.render(pcm)

    def _own_words(self, transcript: str) -> bool:
        """Speech over the reply whose words are the reply's own just sent: the agent hearing itself."""
        reply = self._reply
        if reply is None:
            return False
        if is_own_words(transcript, heard_text(reply.text, reply.pieces) or reply.text):
            metrics.STS_BARGE_IN_REFUSED.labels(*self._labels, "own_words").inc()
            log.info("speech over the reply %r is the reply's own words (echo): no barge-in", transcript)
            return True
        return False

    # --- replies --------------------------------------------------------------------------------------------
    async def _run_turn(self, turn: UserTurn, reply: _Reply | None = None) -> None:
        if reply is None:
            reply = _Reply(turn, served_by=self.served_by)
            self._reply = reply
        elif reply.discarded:
            return  # dropped before it started
        if reply.held and self._words is not None and self._words.text == turn.text:
            # The brain serves one request at a time and a streamed reply holds it to its end: the reading goes first.
            await self._words.settled(JUDGEMENT_WAIT_MS / 1000)
            if reply.discarded:
                return
        gen = asyncio.create_task(self.generate_reply(turn, ReplySink(self, reply)), name="dialogue-reply")
        self._gen_task = reply.gen_task = gen
        await asyncio.wait({gen})
        if reply.held and not reply.discarded and not self._closing:
            await reply.released.wait()  # generation ended before the commit (or failed): wait for it
        if self._closing or reply.discarded:
            return
        error = None if gen.cancelled() else gen.exception()
        if self._gen_task is gen:
            self._gen_task = None
        self.context.add(Message("user", turn.text, turn.audio))
        if error is not None and not reply.interrupted_reason:
            code = error.code if isinstance(error, VoiceError) else grpc.StatusCode.INTERNAL
            message = error.message if isinstance(error, VoiceError) else f"reply failed: {type(error).__name__}"
            if not isinstance(error, VoiceError):
                log.error("reply failed", exc_info=error)
            self._emit(StsEvent(TURN_ERROR, turn.index, code=code.value[0], message=message))
            kept = heard_text(reply.text, reply.pieces)
            if kept:
                self.context.add(Message("assistant", kept))
        else:
            interrupted = bool(reply.interrupted_reason)
            heard = heard_text(reply.text, reply.pieces) if interrupted else reply.text.strip()
            if interrupted:
                silence = None
                if reply.interrupted_wall is not None:
                    last = reply.last_audio_wall or reply.interrupted_wall
                    silence = max(0.0, last - reply.interrupted_wall)
                self._emit(
                    StsEvent(
                        INTERRUPTED,
                        turn.index,
                        reason=reply.interrupted_reason,
                        audio_sent_ms=round(reply.sent_s * 1000),
                        heard_text=heard,
                        silence_after_s=silence,
                    )
                )
            kept = self.assistant_message(reply, heard)
            if kept is not None:
                self.context.add(kept)
            self._emit(StsEvent(TURN_COMPLETE, turn.index), (reply, heard, interrupted))
        self._reply = None
        self.turn += 1
        self.turns_done += 1
        overlap, utt = self._overlap_start_ms, self._overlap_utt
        self._overlap_start_ms = self._overlap_utt = None
        if self._speech_active and overlap is not None:
            # Speech that began over the reply and goes on after it: the next user turn.
            self._turn_start_ms = overlap
            self._ignored.discard(utt)
        self._set_state(LISTENING)
        if self.turns_done >= self.limits.max_turns:
            self._fail_session(
                ResourceExhausted(
                    f"the session reached {self.limits.max_turns} turns (moss_sts.max_turns_per_session);"
                    " open a new session to go on"
                )
            )
            return
        self._maybe_end_turn()  # finals that came while the agent spoke (barge-in speech) may already end a turn

    def _result(self, reply: _Reply, heard: str, interrupted: bool) -> TurnResult:
        turn = reply.turn
        end = turn.speech_end_wall
        timings = TurnTimings(
            speech_end_to_first_audio=(reply.first_audio_wall - end) if end and reply.first_audio_wall else None,
            speech_end_to_transcript=(turn.transcript_wall - end) if end else None,
            transcript_to_first_text=(reply.first_text_wall - turn.transcript_wall) if reply.first_text_wall else None,
            reply_audio=reply.sent_s,
            speech_end_to_commit=(turn.commit_wall - end) if end and turn.commit_wall else None,
            discarded_replies=turn.discarded,
            preemptive=turn.preemptive,
        )
        return TurnResult(turn.text, heard, interrupted, timings, reply.served_by)

    async def _reply_text(self, reply: _Reply, delta: str) -> None:
        if reply.first_text_wall is None:
            reply.first_text_wall = time.monotonic()
        reply.text += delta
        if reply.held:
            reply.held_text.append(delta)  # sent at the commit; never, if the reply is dropped
            return
        self._emit(StsEvent(REPLY_TEXT, reply.turn.index, text=delta))

    async def _reply_audio(self, reply: _Reply, piece: AudioPiece) -> None:
        """Cut the piece into chunks and hand each out when playback is within ``playout_lead_s`` of it."""
        samples = len(piece.pcm) // 2
        if samples == 0:
            return
        if reply.held:
            await reply.released.wait()  # a preemptive reply: nothing is sent before the turn commits
        if reply.discarded:
            raise asyncio.CancelledError
        sent = _SentPiece(piece.text_start, piece.text_end, samples, 0, *voiced_span(piece.pcm))
        reply.pieces.append(sent)
        rate = piece.sample_rate_hz
        offset = 0
        lead = self.limits.playout_lead_s
        while offset < samples:
            limit_ms = self.limits.first_chunk_ms if not reply.started_speaking else self.limits.chunk_ms
            n = min(samples - offset, max(1, rate * limit_ms // 1000))
            # Pace: queue a chunk only while the audio queued is at most `lead` ahead of both what the caller has
            # taken and what has played since the first chunk went out.
            while True:
                if reply.interrupted_reason:
                    raise asyncio.CancelledError  # belt and braces: never queue audio for a cut reply
                played = time.monotonic() - reply.first_audio_wall if reply.first_audio_wall else 0.0
                ahead = reply.queued_s - min(reply.sent_s, played)
                if ahead <= lead:
                    break
                reply.progress.clear()
                # Not asyncio.wait_for: on Python 3.11 it can swallow a cancel (the interruption) when the event
                # is set in the same loop iteration; asyncio.wait never does.
                waiter = asyncio.ensure_future(reply.progress.wait())
                try:
                    await asyncio.wait({waiter}, timeout=max(0.005, ahead - lead))
                finally:
                    waiter.cancel()
            chunk = dataclasses.replace(piece, pcm=piece.pcm[offset * 2 : (offset + n) * 2])
            if not reply.started_speaking:
                reply.started_speaking = True
                self._set_state(SPEAKING)
            self._emit(StsEvent(REPLY_AUDIO, reply.turn.index, audio=chunk), (reply, sent, n))
            offset += n
            reply.queued_s += n / rate

    # --- user audio for engines that answer audio -----------------------------------------------------------
    def _turn_audio(self) -> bytes:
        """The current turn's audio (from its start minus a pad to now), bounded by the ring."""
        start_ms = self._turn_start_ms if self._turn_start_ms is not None else self._fed_ms()
        return self._audio_ring.since((start_ms - USER_AUDIO_PAD_MS) * RATE // 1000)
