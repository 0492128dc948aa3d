"""The ``qwen_tts`` config section (composed into the fleet config by services/common/config/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.config.base import EspeakConfig, TtsServiceConfig, check


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
        check(
            path,
            "backend",
            self.backend in ("vllm_omni", "qwen_tts"),
            f"must be 'vllm_omni' or 'qwen_tts', got {self.backend!r}",
        )
        check(path, "model_dir", bool(self.model_dir.strip()), "must be the mounted weights directory")
        check(
            path,
            "base_url",
            self.base_url.startswith(("http://", "https://")),
            f"must be an http(s) URL, got {self.base_url!r}",
        )
        check(path, "initial_codec_chunk_frames", 1 <= self.initial_codec_chunk_frames <= 50, "must be 1..50")
        check(path, "max_request_chars", 20 <= self.max_request_chars <= 5000, "must be 20..5000")
        check(path, "sidecar_start_timeout_seconds", self.sidecar_start_timeout_seconds > 0, "must be > 0")


@dataclass
class QwenTtsConfig(TtsServiceConfig):
    """qwen_tts: espeak-ng on CPU, Qwen3-TTS on GPU."""

    espeak: EspeakConfig = field(default_factory=EspeakConfig)
    gpu: QwenGpuConfig = field(default_factory=QwenGpuConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        self.espeak.validate(f"{path}.espeak")
        self.gpu.validate(f"{path}.gpu")
