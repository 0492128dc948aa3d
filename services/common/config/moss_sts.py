"""The ``moss_sts`` config section (composed into the fleet config by services/common/config/__init__.py)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import Field, field_validator, model_validator

from services.common.config.base import (
    DEFAULT_BACKCHANNELS,
    DEFAULT_MIN_WORDS,
    DEFAULT_STOP_WORDS,
    SEMANTIC_MODE,
    EspeakConfig,
    FirstSegment,
    Names,
    Section,
    TtsServiceConfig,
    bounded,
    check,
    endpointing_section,
)


class MossGpuConfig(Section):
    """moss_sts GPU engine: MOSS-Speech (fnlp/MOSS-Speech + fnlp/MOSS-Speech-Codec) on transformers, from mounts."""

    model_dir: str = bounded("/models/MOSS-Speech", pattern=r"\S", says="must be the mounted weights directory")
    codec_dir: str = bounded("/models/MOSS-Speech-Codec", pattern=r"\S", says="must be the mounted codec directory")
    # Checkout of OpenMOSS/MOSS-Speech (its cosyvoice/ package and Matcha-TTS submodule hold the codec's flow
    # decoder code that the codec's remote code imports); put on sys.path.
    repo_dir: str = "/opt/MOSS-Speech"
    # Voice prompt the codec decoder speaks in (relative to repo_dir or absolute).
    prompt_wav: str = "assets/prompt_en.wav"
    device: str = "cuda"
    # MOSS-Speech is Qwen3-8B based and published in bfloat16: float16 risks overflow to inf/NaN in activations.
    dtype: Literal["float16", "bfloat16", "float32"] = "bfloat16"
    # "auto": flash_attention_2 when the flash-attn package imports, else sdpa.
    attn_implementation: Literal["auto", "flash_attention_2", "sdpa", "eager"] = "auto"
    # Streaming decode: codec frames (12.5 Hz, 80 ms each) in the first chunk and in later chunks. What a chunk
    # needs past its end (overlap or pre-lookahead) is the codec decoder's own, read at load (moss_stream.py).
    first_chunk_frames: int = bounded(2, ge=1, le=5)
    chunk_frames: int = 4
    top_k: int = 20
    repetition_penalty: float = 1.1
    max_new_tokens: int = bounded(600, ge=16, le=8192)
    # Text -> speech (the Synthesizer): the system prompt that asks MOSS to say the text as it is.
    tts_system_prompt: str = (
        "You are a text-to-speech voice. Read the user's message aloud exactly as written, word for word,"
        " and say nothing else."
    )

    @model_validator(mode="after")
    def _chunks(self):
        check("chunk_frames", self.first_chunk_frames <= self.chunk_frames <= 25, "must be first_chunk_frames..25")
        return self


StsEndpointingConfig = endpointing_section(
    "StsEndpointingConfig",
    "A conversation's user turns: semantic end of turn (the turn model in the asr engine; docs/conversation.md) and a"
    " longer hangover than plain recognition.",
    hangover_ms=400,
    mode=SEMANTIC_MODE,
)


class MossStsConfig(TtsServiceConfig):
    """moss_sts: Conversation (+ Synthesizer). CPU: a cascade in a box (asr -> brain -> piper/espeak);
    GPU: MOSS-Speech speech-to-speech. Limits and defaults: docs/conversation.md."""

    port: int = bounded(50055, ge=1, le=65535)
    metrics_port: int = bounded(9305, ge=0, le=65535)

    # Where the dialogue's ASR runs: "remote": the asr service, over gRPC (one model of each kind in memory and on
    # the card); "local": the asr engines in this process (configured by the asr section), e.g. moss_sts alone.
    asr: Literal["remote", "local"] = "remote"
    # The asr service when asr is remote (host:port or a gRPC target); "": the router's (router.backends.asr),
    # else asr.host:asr.port.
    asr_address: str = ""

    # The cascade's reply (text streamed from the brain) cuts its first sentence sooner than the Synthesizer
    # (``chunking``) does: once this many characters came without a sentence end, at its first clause mark past
    # reply_min_first_chars, else after reply_first_segment_words words; so the reply's first audio waits for 2 words
    # of the brain, not a sentence (3 words: ~30-45 ms later at the caller, docs/conversation.md#turn-taking-2026-11-27-f).
    # Whole texts keep ``chunking``'s rule: a cut inside a short sentence is an audible break for little time when the
    # text is all there (docs/conversation.md#turn-taking-2026-11-27).
    reply_first_segment_max_chars: int = bounded(12, ge=0)
    reply_min_first_chars: int = bounded(8, ge=1)
    reply_first_segment_words: int = bounded(2, ge=0, le=50, says="must be 0 (clause marks only) or 1..50")

    # CPU cascade: the in-box TTS engine ("piper": the joe voice; "espeak": espeak-ng voices).
    tts_engine: Literal["piper", "espeak"] = "piper"
    espeak: EspeakConfig = Field(default_factory=EspeakConfig)
    # System prompt for sessions that send none.
    default_system_prompt: str = (
        "You are a friendly voice assistant. Answer in one or two short sentences. Do not use lists or emojis."
    )
    max_system_prompt_chars: int = bounded(4000, ge=1, le=100_000)
    # Reply length when the client's sampling.max_tokens is 0, and the most a client may ask for.
    default_max_tokens: int = bounded(80, ge=1, says="must be 1..max_tokens_limit")
    max_tokens_limit: int = bounded(1024, ge=1, le=32_768)
    # Sessions served at once; more get RESOURCE_EXHAUSTED. 0: what was measured to stay real-time: the CPU
    # cascade, 1 per core (2 on 2 cores, services/common/sts_servicer.py says why); MOSS-Speech on a card, 4.
    max_concurrent_sessions: int = bounded(0, ge=0, le=1000, says="must be 0 (the measured default) or 1..1000")
    # A new session is refused (RESOURCE_EXHAUSTED with a retry hint) while a committed turn would wait longer than
    # this for the brain to start its reply (the recent turns' wait, or the turns already queued:
    # services/conversation/brain_queue.py): admitted, it would wait as long for every answer. 0: off.
    max_first_words_wait_ms: int = bounded(1000, ge=0, le=60_000)
    # A session that sends no message for this long ends with DEADLINE_EXCEEDED (send audio continuously).
    idle_timeout_seconds: float = bounded(10.0, gt=0)
    # How long the agent's function call waits for the client's output (ConversationConfig.tool_timeout_ms, 0) before
    # it is cancelled and the turn fails with DEADLINE_EXCEEDED (docs/conversation.md#tools).
    tool_timeout_ms: int = bounded(10_000, ge=100, le=600_000)
    # While a function call waits this long for its output, the agent says tool_filler_text (0: never; a session may
    # set its own, ConversationConfig.tool_filler_ms). Off by default: a client that speaks its own filler (an OpenAI
    # Realtime app) would hear two.
    tool_filler_ms: int = bounded(0, ge=0, le=60_000)
    tool_filler_text: str = Field(default="One moment.", min_length=1, max_length=100)
    # User audio one session may send in all, and turns per session; past either the session ends with
    # RESOURCE_EXHAUSTED.
    max_session_seconds: float = bounded(3600.0, ge=10)
    max_turns_per_session: int = bounded(200, ge=1)
    # A user turn longer than this fails (TurnError RESOURCE_EXHAUSTED): the agent stops transcribing it and listens
    # again once the user pauses. Bounds the turn's transcript and audio (a monologue does not grow memory).
    max_user_turn_seconds: float = bounded(60.0, ge=2, le=3600)
    max_user_turn_chars: int = bounded(2000, ge=100, le=100_000)
    # Context kept for the reply model: the last turns, and at most this many characters (oldest dropped first).
    max_context_turns: int = bounded(16, ge=1, le=1000)
    max_context_chars: int = bounded(3000, ge=200, le=1_000_000)
    # Reply audio is sent at the pace it plays, at most this far ahead of playback, so a barge-in stops what the
    # user would hear and the context keeps only what was sent.
    playout_lead_ms: int = bounded(300, ge=0, le=10_000)
    # Reply audio chunk size (the first chunk of a reply is at most first_chunk_ms).
    reply_chunk_ms: int = bounded(100, ge=10, le=1000)
    reply_first_chunk_ms: int = bounded(40, ge=10, says="must be 10..reply_chunk_ms")
    # User turn endpointing defaults (EndpointingConfig fields left at 0) and barge-in.
    # Conversations default to semantic end of turn (the turn model in the asr engine; docs/conversation.md).
    endpointing: StsEndpointingConfig = Field(default_factory=StsEndpointingConfig)
    barge_in_min_speech_ms: int = bounded(500, ge=0, le=5000)
    # Barge-in by words (BargeInConfig fields left empty): speech over the reply interrupts at once on a stop word or
    # phrase, or once it has barge_in_min_words words that are not backchannels; backchannels never interrupt.
    # Speech with no word heard yet (or only backchannels) interrupts only once it lasts barge_in_unheard_ms.
    barge_in_stop_words: Names = Field(default_factory=lambda: list(DEFAULT_STOP_WORDS))
    barge_in_backchannels: Names = Field(default_factory=lambda: list(DEFAULT_BACKCHANNELS))
    barge_in_min_words: int = bounded(DEFAULT_MIN_WORDS, ge=1, le=50)
    barge_in_unheard_ms: int = bounded(1500, ge=200, le=10_000)
    # A user turn commits once the user has been silent this long after their speech; the reply starts earlier, at
    # the final transcript, and its text and audio are held until the commit (dropped if the user goes on).
    # 0: no preemptive reply (commit at the final).
    turn_commit_ms: int = bounded(250, ge=0, le=3000)
    # Engines with a text brain (the CPU cascade, the router's fallback): while the user speaks, the recognizer
    # re-decodes their words so far every this many ms of speech (RecognitionConfig.draft_interval_ms) and the brain
    # reads them ahead of the turn (a one-token request whose prompt prefix the turn's own request then resumes from,
    # llama.cpp's prompt cache): at the turn's end only its last words are left to evaluate
    # (docs/conversation.md#reading-ahead). 0: off; else 200..10000.
    brain_read_ahead_ms: int = bounded(600, ge=0, le=10_000)
    # Engines with a text brain: at a candidate end of turn the brain reads the user's words (log P that the chat
    # template's end-of-message token or a sentence's closing mark comes next after them, the recognizer's own mark
    # left off: the brain's /v1/end_of_turn); below brain_turn_logprob they read unfinished and the turn waits for
    # more speech up to endpointing.max_silence_ms after the speech ended, rather than turn_commit_ms. At -3.0 the
    # in-box SmolLM2 read 48 of 48 whole requests finished (the least -1.7) and 353 of 405 of them cut mid-phrase
    # unfinished (bench/results/turn-words-2026-11-28/; docs/conversation.md#the-words-judgement). false: the turn
    # model and the text check alone.
    brain_turn_check: bool = True
    brain_turn_logprob: float = bounded(-3.0, ge=-100, le=0, says="must be a natural-log probability, -100..0")
    # Words that read finished are *surely* finished when their log P plus brain_turn_sound_weight x the turn model's
    # log-odds that the pause ends the turn plus brain_turn_confidence_weight x (the recognizer's confidence - 0.8) is
    # at least brain_turn_sure_logprob; otherwise doubtful: the turn waits for more speech up to brain_turn_doubt_ms
    # after the speech ended (at most endpointing.max_silence_ms) rather than turn_commit_ms, as LiveKit's turn
    # detector stretches its delay when its probability is middling. Whisper completes a phrase cut mid-way into a
    # plausible sentence the brain reads as finished ("From fairest creatures we |" heard "... we deserve it."), less
    # confidently than it writes a whole sentence. -0.5 / 0.25 / 4.0: fitted on the tuning sets (recorded verse and
    # the fleet's voice; bench/results/turn-signs-2026-11-30/) -- the fewest mid-phrase cuts that read sure with at
    # most one whole line of the fleet's voice doubtful. The confidence is the CPU engine's (whisper's mean token
    # probability). 1400 ms: longer than a 1200 ms thinking pause (the commit then waits for the recognizer to call
    # the sound that came back speech). Both weights 0 and this equal to brain_turn_logprob: no doubtful band.
    brain_turn_sure_logprob: float = bounded(-0.5, ge=-100, le=10, says="must be -100..10 (a log P and its signs)")
    brain_turn_sound_weight: float = bounded(0.25, ge=0, le=10)
    brain_turn_confidence_weight: float = bounded(4.0, ge=0, le=50)
    # The turn model's log-odds are counted from this floor up (-2.0: p 0.12; -6.9: its whole range). Its far
    # "unfinished" tail is not knowledge: in sessions that keep their history it heard the end of the fleet's long,
    # whole lines at p 0.014-0.03, and 7 of 15 such lines waited brain_turn_doubt_ms; with the floor 4 of 15, three of
    # them lines whose words alone read low (bench/results/turn-signs-2026-11-30-clip/).
    brain_turn_sound_floor: float = bounded(-2.0, ge=-6.9, le=0)
    brain_turn_doubt_ms: int = bounded(1400, ge=0, le=10_000)
    # Cancel the echo of the reply in the caller's audio (WebRTC AEC3, the pywebrtc-audio wheel), so a speakerphone
    # or a phone line without echo cancellation does not make the agent interrupt itself (docs/conversation.md#echo).
    echo_cancellation: bool = True
    gpu: MossGpuConfig = Field(default_factory=MossGpuConfig)

    @field_validator("brain_read_ahead_ms")
    @classmethod
    def _read_ahead(cls, v: int) -> int:
        if v and v < 200:
            raise ValueError(f"must be 0 (off) or 200..10000, got {v}")
        return v

    @field_validator("barge_in_stop_words", "barge_in_backchannels")
    @classmethod
    def _phrases(cls, phrases: list[str]) -> list[str]:
        if not all(w.strip() and len(w) <= 64 for w in phrases):
            raise ValueError("must be a list of words or phrases of 1..64 characters")
        return phrases

    @model_validator(mode="after")
    def _limits(self):
        check("default_max_tokens", self.default_max_tokens <= self.max_tokens_limit, "must be 1..max_tokens_limit")
        check("reply_first_chunk_ms", self.reply_first_chunk_ms <= self.reply_chunk_ms, "must be 10..reply_chunk_ms")
        check(
            "brain_turn_sure_logprob",
            self.brain_turn_sure_logprob >= self.brain_turn_logprob,
            "must be at least brain_turn_logprob",
        )
        return self

    def reply_first_segment(self) -> FirstSegment:
        """The cascade reply's first-segment rule (``chunking.first_segment()`` with the reply_* knobs; text without
        spaces keeps chunking's cut)."""
        return dataclasses.replace(
            self.chunking.first_segment(),
            max_chars=self.reply_first_segment_max_chars,
            min_chars=self.reply_min_first_chars,
            words=self.reply_first_segment_words,
        )
