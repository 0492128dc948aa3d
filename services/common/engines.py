"""Engine interfaces, declared once. Servicers talk only to these; engines are local models or remote services.

A TTS engine streams audio pieces for a text. Cancellation is the caller stopping its iteration
(``aclose()`` or task cancel): an engine must not start another step after that.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from services.common import languages
from services.common.endpointing import SEMANTIC_MODE as SEMANTIC_MODE
from services.common.endpointing import SILENCE_MODE as SILENCE_MODE
from services.common.endpointing import TEXT_CHECK_OFF as TEXT_CHECK_OFF
from services.common.endpointing import TEXT_CHECK_ON as TEXT_CHECK_ON
from services.common.endpointing import Endpointing
from services.common.errors import FailedPrecondition
from services.common.text import BufferPolicy, FirstSegment, TextEvent, stream_segments


@dataclass(frozen=True)
class VoiceInfo:
    id: str
    display_name: str
    languages: tuple[str, ...]
    native_sample_rate_hz: int
    service: str
    engine: str
    cloned: bool = False
    description: str = ""

    def speaks(self, language: str) -> bool:
        """BCP-47 match, case-insensitive (services.common.languages.matches): 'en' matches 'en-US'; 'zh-CN'
        matches 'zh' and 'cmn'; 'en-GB' does not match 'en-US'."""
        return any(languages.matches(language, v) for v in self.languages)


@dataclass(frozen=True)
class Routing:
    mode: int = 0
    engine: str = ""
    latency_budget_ms: int = 0


@dataclass(frozen=True)
class SynthesisOptions:
    voice: str
    language: str = ""
    speaking_rate: float = 1.0
    seed: int = 0
    # The rate the caller wants. Local engines produce their native rate (the servicer resamples);
    # remote engines ask their backend for this rate so audio crosses the network once, already resampled.
    sample_rate_hz: int = 0
    request_id: str = ""
    routing: Routing = field(default_factory=Routing)
    # Seconds left before the caller's deadline (None: no deadline).
    time_remaining: float | None = None


@dataclass(frozen=True)
class AudioPiece:
    """A piece of synthesized speech: s16le mono PCM and the text span it speaks."""

    pcm: bytes
    sample_rate_hz: int
    text_start: int
    text_end: int
    served_by: str
    # (end char in the request text, end sample in ``pcm``) of each word whose end the voice knows (piper's
    # alignment), in order; () when it does not say. What a caller heard of a cut reply is counted with it.
    word_ends: tuple[tuple[int, int], ...] = ()

    def shifted(self, chars: int) -> AudioPiece:
        """The same piece with its text positions (span and word ends) ``chars`` further on: a segment's piece placed
        in the whole text."""
        return dataclasses.replace(
            self,
            text_start=self.text_start + chars,
            text_end=self.text_end + chars,
            word_ends=tuple((char + chars, sample) for char, sample in self.word_ends),
        )


class TtsEngine(abc.ABC):
    """Text to speech. One instance serves many concurrent streams."""

    #: Short engine name, e.g. "piper".
    name: str
    #: Service this engine belongs to, e.g. "cosyvoice_tts".
    service: str

    @property
    @abc.abstractmethod
    def native_sample_rate(self) -> int: ...

    async def start(self) -> None:
        """Load weights and warm up. The service reports SERVING only after this returns."""

    async def close(self) -> None:
        """Release resources (threads, channels)."""

    @abc.abstractmethod
    async def voices(self) -> list[VoiceInfo]: ...

    @abc.abstractmethod
    def synthesize(self, text: str, options: SynthesisOptions) -> AsyncIterator[AudioPiece]:
        """Stream speech for ``text``. Stops work when the caller stops iterating."""

    async def synthesize_text_stream(
        self, events: AsyncIterator[TextEvent], options: SynthesisOptions, policy: BufferPolicy
    ) -> AsyncIterator[AudioPiece]:
        """Speak text that arrives in pieces. Spans index the concatenation of every delta.

        The default cuts the text into segments as they complete (services.common.text.stream_segments: sentence
        ends, the min-chars clause rule, the max-wait timer, flush and end) and speaks each with ``synthesize``
        while more text arrives. Engines that take streaming text natively, or remote engines, override it.
        """
        speak = self._text_stream_speaker()
        if policy.first is None and self.first_segment is not None:
            policy = dataclasses.replace(policy, first=self.first_segment)
        async with contextlib.aclosing(stream_segments(events, policy)) as segments:
            async for segment in segments:
                async with contextlib.aclosing(speak(segment.text, options)) as pieces:
                    async for piece in pieces:
                        yield piece.shifted(segment.start)

    #: Where the first segment of streaming text is cut (its chunking config's rule; services.common.text
    #: FirstSegment). None: the first segment is cut like every other (the caller's BufferPolicy alone).
    first_segment: FirstSegment | None = None

    #: The engine's SegmentScheduler (services/common/scheduler.py) when it schedules its work first-chunk-first;
    #: the servicer's admission control reads its predicted wait. None: the engine does not (remote engines).
    scheduler = None

    def _text_stream_speaker(self):
        """How ``synthesize_text_stream`` speaks each segment: ``synthesize`` by default. Scheduled engines speak
        every segment of one text stream as one playback, so its later segments are continuations, not firsts."""
        return self.synthesize

    #: True for engines that register zero-shot voices themselves (the servicer then checks the prompt's content
    #: first). Engines that cannot clone keep the default ``register_voice``, which answers FAILED_PRECONDITION;
    #: remote engines forward the request and leave the checks to their backend.
    clones_voices: bool = False

    async def register_voice(
        self, voice_id: str, prompt_pcm: bytes, prompt_rate: int, transcript: str, language: str
    ) -> VoiceInfo:
        raise FailedPrecondition(
            f"engine {self.service}/{self.name} cannot clone voices; use a voice from ListVoices"
            " or a cloning engine (cosyvoice_tts with engine: gpu)"
        )

    # Residency (GPU engines move weights; CPU engines load once and hold no GPU memory).
    def resident_bytes(self) -> int:
        return 0

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def served_by(self) -> str:
        return f"{self.service}/{self.name}"


# --- Speech to text ------------------------------------------------------------------------------------------------
# An ASR engine opens one stream per caller: audio goes in with ``feed``, events come out of ``events()``, ``finish``
# says the audio is over (the utterance in progress gets its final), ``close`` releases the decoders at once
# (cancel). Local engines take 16 kHz s16le mono (``native_sample_rate``; the servicer resamples); remote engines
# take the caller's audio as it came (``native_sample_rate`` 0) and their backend resamples.


# Endpointing (when speech starts and ends: modes, the text check, the stream's settings) is declared once, with
# every default and bound, in services/common/endpointing.py; its names are re-exported here for the engines.


class ScheduledTtsEngine(TtsEngine):
    """A TTS engine whose SegmentScheduler (``self.scheduler``) paces its work: ``_speak`` speaks one text as one
    playback, segment by segment. A text given whole is cut with the engine's first-segment rule; streaming text
    arrives already cut (the segmenter applied ``first_segment``), so each of its segments is spoken whole, and all of
    them are one playback (later segments are continuations, not firsts)."""

    def synthesize(self, text: str, options: SynthesisOptions) -> AsyncIterator[AudioPiece]:
        return self._speak(text, options, self.scheduler.playback(), self.first_segment)

    def _text_stream_speaker(self):
        return functools.partial(self._speak, playback=self.scheduler.playback(), first_segment=None)

    @abc.abstractmethod
    def _speak(
        self, text: str, options: SynthesisOptions, playback, first_segment: FirstSegment | None
    ) -> AsyncIterator[AudioPiece]:
        """Speak ``text`` (cut by ``first_segment``, None: sentences only) as ``playback`` (a Playback)."""


@dataclass(frozen=True)
class RecognitionOptions:
    # BCP-47 language; "" lets the engine detect it.
    language: str = ""
    interim_results: bool = False
    endpointing: Endpointing = field(default_factory=Endpointing)
    phrase_hints: tuple[str, ...] = ()
    # Phrases to report as soon as they are heard in a young utterance (PHRASE_SPOTTED), before its final.
    spot_phrases: tuple[str, ...] = ()
    # Decode the utterance in progress again every this many ms of its audio and report it (DRAFT); 0: never.
    draft_interval_ms: int = 0
    # Rate of the audio given to ``feed`` (the engine's native rate for local engines, the caller's for remote ones).
    sample_rate_hz: int = 16_000
    request_id: str = ""
    # Seconds left before the caller's deadline (None: no deadline).
    time_remaining: float | None = None


@dataclass(frozen=True)
class WordTiming:
    word: str
    start_ms: int
    end_ms: int
    confidence: float = 0.0


@dataclass(frozen=True)
class Hypothesis:
    """An interim (``is_final`` False) or final result for one utterance. Offsets are ms of stream audio."""

    transcript: str
    is_final: bool
    utterance_index: int
    utterance_start_ms: int
    utterance_end_ms: int
    audio_processed_ms: int
    stability: float = 0.0
    confidence: float = 0.0
    language: str = ""
    words: tuple[WordTiming, ...] = ()


@dataclass(frozen=True)
class TurnEstimate:
    """What the turn model judged at a pause (semantic endpointing). Offsets are ms of stream audio."""

    probability: float  # that the speaker's turn is complete, 0..1
    complete: bool  # probability >= the stream's turn_threshold: the utterance ends here
    silence_ms: int  # silence after the last speech when it judged
    offset_ms: int  # where it judged
    utterance_index: int
    # The model said complete, but the text so far ends with this word (not a sentence's end): complete is False.
    vetoed_by_word: str = ""
    # The model said incomplete, but the words so far read as a finished sentence: the utterance ends at the stream's
    # sentence_end_silence_ms unless speech resumes. ``transcript``: those words (the final it then gets).
    sentence_end: bool = False
    transcript: str = ""


@dataclass(frozen=True)
class SpottedPhrase:
    """A phrase of ``RecognitionOptions.spot_phrases`` heard in the utterance in progress, before its final. Offsets
    are ms of stream audio."""

    phrase: str  # as it was asked for
    transcript: str  # what the recognizer heard of the utterance so far
    utterance_index: int
    utterance_start_ms: int
    offset_ms: int  # end of the audio it heard


@dataclass(frozen=True)
class Draft:
    """The utterance in progress so far, decoded again by the final recognizer while it is spoken
    (``RecognitionOptions.draft_interval_ms``). Offsets are ms of stream audio."""

    transcript: str
    utterance_index: int
    utterance_start_ms: int
    offset_ms: int  # end of the audio it heard


SPEECH_START = "speech_start"
SPEECH_END = "speech_end"
RESULT = "result"
TURN_ESTIMATE = "turn_estimate"
PHRASE_SPOTTED = "phrase_spotted"
DRAFT = "draft"


@dataclass(frozen=True)
class AsrEvent:
    """``kind`` is SPEECH_START / SPEECH_END (with ``offset_ms``), RESULT (with ``result``), TURN_ESTIMATE (with
    ``turn``; semantic endpointing only, sent before the utterance's SPEECH_END when it ends the utterance) or
    PHRASE_SPOTTED (with ``spotted``; only when spot phrases were asked for: after the utterance's SPEECH_START,
    before its final, at most one per utterance) or DRAFT (with ``draft``; only when drafts were asked for: after
    the utterance's SPEECH_START, before its final)."""

    kind: str
    offset_ms: int = 0
    result: Hypothesis | None = None
    turn: TurnEstimate | None = None
    spotted: SpottedPhrase | None = None
    draft: Draft | None = None


class AsrStream(abc.ABC):
    """One caller's recognition stream. ``feed`` may apply backpressure (it returns once the audio is taken)."""

    @abc.abstractmethod
    async def feed(self, pcm: bytes) -> None:
        """Audio in the options' sample rate, s16le mono, a whole number of samples."""

    @abc.abstractmethod
    async def finish(self) -> None:
        """No more audio: the utterance in progress is finalized; ``events()`` ends after its final."""

    @abc.abstractmethod
    def events(self) -> AsyncIterator[AsrEvent]:
        """VAD events and results, in order; ends after ``finish`` (or ``close``). Raises the engine's errors."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release decoders now (also after a cancel); stop any work in flight at its next step. Idempotent."""

    async def pause_spotting(self, paused: bool) -> None:  # noqa: B027 - optional: a stream without spotting ignores it
        """Pause (True) or resume the options' spot_phrases from here on (StreamingRecognizeRequest.spotting): paused,
        no utterance is spotted (one being spotted stops); resumed, utterances that start from then on are."""


class AsrEngine(abc.ABC):
    """Speech to text. One instance serves many concurrent streams."""

    name: str
    service: str

    @property
    def native_sample_rate(self) -> int:
        """Rate ``feed`` takes; 0: any rate in 8..48 kHz, as the caller sent it (remote engines)."""
        return 16_000

    async def start(self) -> None:
        """Load models and warm up. The service reports SERVING only after this returns."""

    async def close(self) -> None:
        """Release resources (threads, channels)."""

    def check_options(self, options: RecognitionOptions) -> None:
        """Raise InvalidArgument (naming the config field) for options this engine cannot serve."""

    @abc.abstractmethod
    async def open_stream(self, options: RecognitionOptions) -> AsrStream: ...

    def resident_bytes(self) -> int:
        return 0

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def served_by(self) -> str:
        return f"{self.service}/{self.name}"


# --- Speech to speech (Conversation) -------------------------------------------------------------------------------
# An STS engine opens one session per Converse call: user audio goes in with ``feed`` (continuously, silence
# included), controls with ``control``, and events come out of ``events()``: state changes, user transcripts, reply
# text and audio, interruptions, finished and failed turns. The session owns turn-taking (endpointing, barge-in,
# context); ``finish`` says the user's audio is over (the turn in progress is answered, then ``events()`` ends);
# ``close`` stops everything at once (cancel). Local engines take 16 kHz s16le mono (``native_sample_rate``); remote
# engines take the caller's audio as it came (0) and ask their backend for ``output_sample_rate_hz``.

LISTENING, THINKING, SPEAKING = "listening", "thinking", "speaking"
INTERRUPT, END_OF_TURN, MUTE, UNMUTE, RESPOND = "interrupt", "end_of_turn", "mute", "unmute", "respond"


@dataclass(frozen=True)
class Sampling:
    """Reply model sampling. 0.4-0.6 limits acoustic hallucination in speech models."""

    temperature: float = 0.5
    top_p: float = 0.8
    max_tokens: int = 0  # 0: the engine's default
    seed: int = 0  # 0: a fixed default


@dataclass(frozen=True)
class BargeIn:
    enabled: bool = True
    # User speech shorter than this (a cough, "mm-hm") does not interrupt the agent.
    min_speech_ms: int = 500
    # Speech over the reply whose transcript holds one of these (lower case words or phrases) interrupts at once;
    # () = the service's list.
    stop_words: tuple[str, ...] = ()
    # Speech over the reply interrupts once its transcript has this many words that are not backchannels (0: default).
    min_words: int = 0
    # Words that never interrupt on their own; () = the service's list.
    backchannels: tuple[str, ...] = ()


# Tool choice modes (ConversationConfig.tool_choice).
TOOL_AUTO, TOOL_NONE, TOOL_REQUIRED, TOOL_FUNCTION = "auto", "none", "required", "function"


@dataclass(frozen=True)
class Tool:
    """A function the agent may call (services/common/tools.py checks it). ``parameters``: its arguments' JSON
    Schema (an object schema; {} = no arguments)."""

    name: str
    description: str = ""
    parameters: dict = field(default_factory=dict, hash=False, compare=False)
    parameters_json: str = ""  # as the caller wrote it (passed on unchanged by the router)


@dataclass(frozen=True)
class ToolChoice:
    mode: str = TOOL_AUTO
    function: str = ""  # TOOL_FUNCTION: the tool to call


@dataclass(frozen=True)
class FunctionCall:
    """A call of one of the session's tools, or a piece of it (FUNCTION_CALL events): ``arguments_delta`` while the
    arguments stream, then ``done`` with the whole ``arguments`` (validated JSON)."""

    call_id: str
    name: str
    arguments_delta: str = ""
    done: bool = False
    arguments: str = ""


@dataclass(frozen=True)
class SessionOptions:
    # Rate of the audio given to ``feed`` (the engine's native rate for local engines, the caller's for remote ones).
    input_sample_rate_hz: int = 16_000
    # Rate the caller wants reply audio in (local engines send their native rate and the servicer resamples).
    output_sample_rate_hz: int = 16_000
    voice: str = ""
    system_prompt: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    language: str = ""
    endpointing: Endpointing = field(default_factory=Endpointing)
    barge_in: BargeIn = field(default_factory=BargeIn)
    routing: Routing = field(default_factory=Routing)
    request_id: str = ""
    time_remaining: float | None = None
    # The caller's audio comes already echo-cancelled (ConversationConfig.client_cancels_echo): no server canceller.
    client_cancels_echo: bool = False
    # Functions the agent may call, which of them, and how long a call waits for its output (0: the service's).
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    tool_timeout_s: float = 0.0
    # A call waiting this long for its output gets a spoken filler (DialogueLimits.tool_filler_text); 0: never.
    tool_filler_s: float = 0.0


@dataclass(frozen=True)
class TurnTimings:
    """Where a turn's time went, in seconds (None: did not happen, e.g. no audio before an interruption)."""

    speech_end_to_first_audio: float | None = None
    speech_end_to_transcript: float | None = None
    transcript_to_first_text: float | None = None
    reply_audio: float = 0.0
    speech_end_to_commit: float | None = None
    discarded_replies: int = 0  # replies started at a candidate end of this turn, then dropped (the user went on)
    preemptive: bool = False  # the reply started before the turn committed (its audio held until the commit)


@dataclass(frozen=True)
class TurnResult:
    user_text: str
    reply_text: str  # as the context keeps it: truncated to what was sent when interrupted
    interrupted: bool
    timings: TurnTimings
    served_by: str


# StsEvent kinds.
STATE, USER_TRANSCRIPT, REPLY_TEXT, REPLY_AUDIO, INTERRUPTED, TURN_COMPLETE, TURN_ERROR, END_OF_TURN_JUDGED = (
    "state",
    "user_transcript",
    "reply_text",
    "reply_audio",
    "interrupted",
    "turn_complete",
    "turn_error",
    "end_of_turn_judged",
)
FUNCTION_CALL, FUNCTION_CALL_CANCELLED = "function_call", "function_call_cancelled"


@dataclass(frozen=True)
class StsEvent:
    """One event of a session. ``kind`` says which of the other fields is set."""

    kind: str
    turn_index: int
    state: str = ""  # STATE: LISTENING / THINKING / SPEAKING
    transcript: Hypothesis | None = None  # USER_TRANSCRIPT
    text: str = ""  # REPLY_TEXT: a delta of the reply text
    audio: AudioPiece | None = None  # REPLY_AUDIO
    # INTERRUPTED: why ("barge_in" / "client"), reply audio sent before the cut, the text whose audio was sent, and
    # (local sessions) barge-in detected -> last reply audio handed out, in seconds.
    reason: str = ""
    audio_sent_ms: int = 0
    heard_text: str = ""
    silence_after_s: float | None = None
    result: TurnResult | None = None  # TURN_COMPLETE
    code: int = 0  # TURN_ERROR: gRPC status code number
    message: str = ""  # TURN_ERROR
    turn: TurnEstimate | None = None  # END_OF_TURN_JUDGED: the turn model's judgement of a pause
    # FUNCTION_CALL: the call or a piece of it; FUNCTION_CALL_CANCELLED: its call_id (and ``reason``).
    call: FunctionCall | None = None


class StsSession(abc.ABC):
    """One caller's dialogue. ``feed`` may apply backpressure (it returns once the audio is taken)."""

    @abc.abstractmethod
    async def feed(self, pcm: bytes) -> None:
        """User audio in the options' input rate, s16le mono; send it continuously (silence counts)."""

    @abc.abstractmethod
    async def control(self, action: str, played_ms: int | None = None) -> None:
        """INTERRUPT (no-op while listening), END_OF_TURN, MUTE, UNMUTE or RESPOND (the agent speaks without a user
        turn; END_OF_TURN while the user has words pending, a no-op while the agent has the turn). ``played_ms`` (INTERRUPT only): how much
        of the reply the caller has played, when it knows (the context keeps the text of that much)."""

    async def interrupt(self) -> None:
        """Stop the agent's reply now (the client's ACTION_INTERRUPT)."""
        await self.control(INTERRUPT)

    async def function_call_output(self, call_id: str, output: str) -> None:
        """The client's answer to a FUNCTION_CALL event; the reply goes on from it. Raises InvalidArgument for a
        call_id this session never emitted; an answer to a call no longer waited for (cancelled) is dropped."""
        from services.common.errors import InvalidArgument

        raise InvalidArgument("function_call_output.call_id", f"{call_id!r}: this session called no function")

    @abc.abstractmethod
    async def finish(self) -> None:
        """No more user audio: the turn in progress is answered; ``events()`` ends after it."""

    @abc.abstractmethod
    def events(self) -> AsyncIterator[StsEvent]:
        """Events in order; ends after ``finish`` (or ``close``). Raises errors that end the session."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop now (also after a cancel): reply generation and recognition stop at their next step. Idempotent."""


class StsEngine(abc.ABC):
    """Speech to speech (spoken dialogue). One instance serves many concurrent sessions."""

    name: str
    service: str

    @property
    def native_sample_rate(self) -> int:
        """Rate ``feed`` takes; 0: any rate in 8..48 kHz, as the caller sent it (remote engines)."""
        return 16_000

    async def start(self) -> None:
        """Load models and warm up. The service reports SERVING only after this returns."""

    async def close(self) -> None:
        """Release resources."""

    async def voices(self) -> list[VoiceInfo]:
        """Reply voices (the first is the default)."""
        return []

    def check_options(self, options: SessionOptions) -> None:
        """Raise InvalidArgument (naming the config field) for options this engine cannot serve."""

    @abc.abstractmethod
    async def open_session(self, options: SessionOptions) -> StsSession: ...

    def first_words_wait_s(self) -> float | None:
        """What a committed turn would wait now before its reply can start (the servicer's admission refuses new
        sessions past moss_sts.max_first_words_wait_ms); None: the engine cannot say."""
        return None

    def resident_bytes(self) -> int:
        return 0

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def served_by(self) -> str:
        return f"{self.service}/{self.name}"


# --- Residency -----------------------------------------------------------------------------------------------------
class Offloadable(abc.ABC):
    """An engine whose model can leave its device and come back: what a GPU engine must be to take turns on a card
    (services/residency/model_residency.py; docs/leases.md, how each engine offloads). Mixed into the engine's class
    beside its interface, e.g. ``class QwenTtsEngine(TtsEngine, Offloadable)``. A GPU engine that is not Offloadable
    runs only ``pinned`` (its lease is never revoked)."""

    @abc.abstractmethod
    async def offload(self) -> None:
        """Free the model's device memory (weights to host memory, or unloaded). The residency calls it after
        in-flight requests have finished; new ones wait for ``reload``."""

    @abc.abstractmethod
    async def reload(self) -> None:
        """Put the model back on its device after ``offload``; the engine serves again when it returns."""

    #: Why an offload cannot free all the engine holds on its device (it must then be pinned), or None.
    offload_limit: str | None = None
