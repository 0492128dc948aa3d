"""The ``moss_sts`` config section (composed into the fleet config by services/common/config.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.config_base import (
    DEFAULT_BACKCHANNELS,
    DEFAULT_MIN_WORDS,
    DEFAULT_STOP_WORDS,
    AsrEndpointingConfig,
    EspeakConfig,
    TtsServiceConfig,
    check,
)


@dataclass
class MossGpuConfig:
    """moss_sts GPU engine: MOSS-Speech (fnlp/MOSS-Speech + fnlp/MOSS-Speech-Codec) on transformers, from mounts."""

    model_dir: str = "/models/MOSS-Speech"
    codec_dir: str = "/models/MOSS-Speech-Codec"
    # Checkout of OpenMOSS/MOSS-Speech (its cosyvoice/ package and Matcha-TTS submodule hold the codec's flow
    # decoder code that the codec's remote code imports); put on sys.path.
    repo_dir: str = "/opt/MOSS-Speech"
    # Voice prompt the codec decoder speaks in (relative to repo_dir or absolute).
    prompt_wav: str = "assets/prompt_en.wav"
    device: str = "cuda"
    # MOSS-Speech is Qwen3-8B based and published in bfloat16: float16 risks overflow to inf/NaN in activations.
    dtype: str = "bfloat16"
    # "auto": flash_attention_2 when the flash-attn package imports, else sdpa.
    attn_implementation: str = "auto"
    # Streaming decode: codec frames (12.5 Hz, 80 ms each) in the first chunk and in later chunks. What a chunk
    # needs past its end (overlap or pre-lookahead) is the codec decoder's own, read at load (moss_stream.py).
    first_chunk_frames: int = 2
    chunk_frames: int = 4
    top_k: int = 20
    repetition_penalty: float = 1.1
    max_new_tokens: int = 600
    # Text -> speech (the Synthesizer): the system prompt that asks MOSS to say the text as it is.
    tts_system_prompt: str = (
        "You are a text-to-speech voice. Read the user's message aloud exactly as written, word for word,"
        " and say nothing else."
    )

    def validate(self, path: str) -> None:
        check(path, "model_dir", bool(self.model_dir.strip()), "must be the mounted weights directory")
        check(path, "codec_dir", bool(self.codec_dir.strip()), "must be the mounted codec directory")
        check(path, "dtype", self.dtype in ("float16", "bfloat16", "float32"), "must be float16, bfloat16 or float32")
        check(
            path,
            "attn_implementation",
            self.attn_implementation in ("auto", "flash_attention_2", "sdpa", "eager"),
            "must be auto, flash_attention_2, sdpa or eager",
        )
        check(path, "first_chunk_frames", 1 <= self.first_chunk_frames <= 5, "must be 1..5")
        check(
            path, "chunk_frames", self.first_chunk_frames <= self.chunk_frames <= 25, "must be first_chunk_frames..25"
        )
        check(path, "max_new_tokens", 16 <= self.max_new_tokens <= 8192, "must be 16..8192")


@dataclass
class MossStsConfig(TtsServiceConfig):
    """moss_sts: Conversation (+ Synthesizer). CPU: a cascade in a box (asr -> brain -> piper/espeak);
    GPU: MOSS-Speech speech-to-speech. Limits and defaults: docs/conversation.md."""

    # Where the dialogue's ASR runs: "remote": the asr service, over gRPC (one model of each kind in memory and on
    # the card); "local": the asr engines in this process (configured by the asr section), e.g. moss_sts alone.
    asr: str = "remote"
    # The asr service when asr is remote (host:port or a gRPC target); "": the router's (router.backends.asr),
    # else asr.host:asr.port.
    asr_address: str = ""

    # CPU cascade: the in-box TTS engine ("piper": the joe voice; "espeak": espeak-ng voices).
    tts_engine: str = "piper"
    espeak: EspeakConfig = field(default_factory=EspeakConfig)
    # System prompt for sessions that send none.
    default_system_prompt: str = (
        "You are a friendly voice assistant. Answer in one or two short sentences. Do not use lists or emojis."
    )
    max_system_prompt_chars: int = 4000
    # Reply length when the client's sampling.max_tokens is 0, and the most a client may ask for.
    default_max_tokens: int = 80
    max_tokens_limit: int = 1024
    # Sessions served at once; more get RESOURCE_EXHAUSTED.
    max_concurrent_sessions: int = 4
    # A session that sends no message for this long ends with DEADLINE_EXCEEDED (send audio continuously).
    idle_timeout_seconds: float = 10.0
    # User audio one session may send in all, and turns per session; past either the session ends with
    # RESOURCE_EXHAUSTED.
    max_session_seconds: float = 3600.0
    max_turns_per_session: int = 200
    # A user turn longer than this fails (TurnError RESOURCE_EXHAUSTED): the agent stops transcribing it and listens
    # again once the user pauses. Bounds the turn's transcript and audio (a monologue does not grow memory).
    max_user_turn_seconds: float = 60.0
    max_user_turn_chars: int = 2000
    # Context kept for the reply model: the last turns, and at most this many characters (oldest dropped first).
    max_context_turns: int = 16
    max_context_chars: int = 3000
    # Reply audio is sent at the pace it plays, at most this far ahead of playback, so a barge-in stops what the
    # user would hear and the context keeps only what was sent.
    playout_lead_ms: int = 300
    # Reply audio chunk size (the first chunk of a reply is at most first_chunk_ms).
    reply_chunk_ms: int = 100
    reply_first_chunk_ms: int = 40
    # User turn endpointing defaults (EndpointingConfig fields left at 0) and barge-in.
    # Conversations default to semantic end of turn (the turn model in the asr engine; docs/conversation.md).
    endpointing: AsrEndpointingConfig = field(
        default_factory=lambda: AsrEndpointingConfig(hangover_ms=400, mode="semantic")
    )
    barge_in_min_speech_ms: int = 500
    # Barge-in by words (BargeInConfig fields left empty): speech over the reply interrupts at once on a stop word or
    # phrase, or once it has barge_in_min_words words that are not backchannels; backchannels never interrupt.
    # Speech with no word heard yet (or only backchannels) interrupts only once it lasts barge_in_unheard_ms.
    barge_in_stop_words: list[str] = field(default_factory=lambda: list(DEFAULT_STOP_WORDS))
    barge_in_backchannels: list[str] = field(default_factory=lambda: list(DEFAULT_BACKCHANNELS))
    barge_in_min_words: int = DEFAULT_MIN_WORDS
    barge_in_unheard_ms: int = 1500
    # A user turn commits once the user has been silent this long after their speech; the reply starts earlier, at
    # the final transcript, and its text and audio are held until the commit (dropped if the user goes on).
    # 0: no preemptive reply (commit at the final).
    turn_commit_ms: int = 250
    # Cancel the echo of the reply in the caller's audio (WebRTC AEC3, the pywebrtc-audio wheel), so a speakerphone
    # or a phone line without echo cancellation does not make the agent interrupt itself (docs/conversation.md#echo).
    echo_cancellation: bool = True
    gpu: MossGpuConfig = field(default_factory=MossGpuConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        check(path, "asr", self.asr in ("remote", "local"), f"must be remote or local, got {self.asr!r}")
        check(
            path,
            "tts_engine",
            self.tts_engine in ("piper", "espeak"),
            f"must be piper or espeak, got {self.tts_engine!r}",
        )
        self.espeak.validate(f"{path}.espeak")
        check(path, "max_system_prompt_chars", 1 <= self.max_system_prompt_chars <= 100_000, "must be 1..100000")
        check(
            path,
            "default_max_tokens",
            1 <= self.default_max_tokens <= self.max_tokens_limit,
            "must be 1..max_tokens_limit",
        )
        check(path, "max_tokens_limit", 1 <= self.max_tokens_limit <= 32_768, "must be 1..32768")
        check(path, "max_concurrent_sessions", 1 <= self.max_concurrent_sessions <= 1000, "must be 1..1000")
        check(path, "idle_timeout_seconds", self.idle_timeout_seconds > 0, "must be > 0")
        check(path, "max_session_seconds", self.max_session_seconds >= 10, "must be >= 10")
        check(path, "max_turns_per_session", self.max_turns_per_session >= 1, "must be >= 1")
        check(path, "max_user_turn_seconds", 2 <= self.max_user_turn_seconds <= 3600, "must be 2..3600")
        check(path, "max_user_turn_chars", 100 <= self.max_user_turn_chars <= 100_000, "must be 100..100000")
        check(path, "max_context_turns", 1 <= self.max_context_turns <= 1000, "must be 1..1000")
        check(path, "max_context_chars", 200 <= self.max_context_chars <= 1_000_000, "must be 200..1000000")
        check(path, "playout_lead_ms", 0 <= self.playout_lead_ms <= 10_000, "must be 0..10000")
        check(path, "reply_chunk_ms", 10 <= self.reply_chunk_ms <= 1000, "must be 10..1000")
        check(
            path,
            "reply_first_chunk_ms",
            10 <= self.reply_first_chunk_ms <= self.reply_chunk_ms,
            "must be 10..reply_chunk_ms",
        )
        self.endpointing.validate(f"{path}.endpointing")
        check(path, "barge_in_min_speech_ms", 0 <= self.barge_in_min_speech_ms <= 5000, "must be 0..5000")
        check(path, "barge_in_min_words", 1 <= self.barge_in_min_words <= 50, "must be 1..50")
        check(path, "barge_in_unheard_ms", 200 <= self.barge_in_unheard_ms <= 10_000, "must be 200..10000")
        for name in ("barge_in_stop_words", "barge_in_backchannels"):
            phrases = getattr(self, name)
            check(
                path,
                name,
                all(isinstance(w, str) and w.strip() and len(w) <= 64 for w in phrases),
                "must be a list of words or phrases of 1..64 characters",
            )
        check(path, "turn_commit_ms", 0 <= self.turn_commit_ms <= 3000, "must be 0..3000")
        self.gpu.validate(f"{path}.gpu")
