"""The ``cosyvoice_tts`` config section (composed into the fleet config by services/common/config/__init__.py)."""

from __future__ import annotations

from pydantic import Field, model_validator

from services.common.config.base import Section, TtsServiceConfig, bounded, check


class CosyVoiceGpuConfig(Section):
    """cosyvoice_tts GPU engine: Fun-CosyVoice3-0.5B on the official CosyVoice code (see docs/tts.md)."""

    # Weights (mounted, may be read-only): cosyvoice3.yaml, llm.pt, flow.pt, hift.pt, *.onnx, CosyVoice-BlankEN/.
    model_dir: str = bounded("/models/Fun-CosyVoice3-0.5B", pattern=r"\S", says="must be the mounted weights directory")
    # Writable state: registered speakers (spk2info.pt + voices.json + prompt WAVs), TensorRT plans, vLLM export.
    state_dir: str = bounded("/var/lib/voicefleet/cosyvoice_tts", pattern=r"\S", says="must be a writable directory")
    # Checkout of FunAudioLLM/CosyVoice at the pinned commit (with third_party/Matcha-TTS), put on sys.path.
    repo_dir: str = "/opt/CosyVoice"
    device: str = "cuda"
    load_vllm: bool = False
    load_trt: bool = False
    fp16: bool = False
    trt_concurrent: int = bounded(1, ge=1)
    # wetext text-normalisation FSTs (zh/tn/*.fst, en/tn/*.fst from modelscope pengzhendong/wetext), mounted with
    # the weights; the library would download them at every start. "" = no text normalisation.
    text_normalizer_dir: str = "/models/wetext"
    # Streaming hop in speech tokens (25 Hz): the first chunk waits for first_hop_tokens (the model's training chunk
    # is 25 = 1 s of audio), each next hop grows by hop_growth up to max_hop_tokens (bigger = fewer flow passes).
    first_hop_tokens: int = bounded(
        25, ge=25, multiple_of=25, says="must be a multiple of 25 (the model's training chunk)"
    )
    max_hop_tokens: int = 100
    hop_growth: int = bounded(2, ge=1, le=4)
    # A preset voice made at first start from a prompt shipped in the CosyVoice checkout ("" = none).
    preset_voice_id: str = "cosyvoice_zh_prompt"
    preset_prompt_wav: str = "asset/zero_shot_prompt.wav"  # relative to repo_dir
    preset_prompt_text: str = "希望你以后能够做的比我还好呦。"
    preset_language: str = "zh-CN"
    # Seed for requests that give none (set_all_random_seed before each segment).
    default_seed: int = 1986

    @model_validator(mode="after")
    def _hops(self):
        check(
            "max_hop_tokens",
            self.max_hop_tokens >= self.first_hop_tokens and self.max_hop_tokens % 25 == 0,
            "must be a multiple of 25 and >= first_hop_tokens",
        )
        return self


class CosyVoiceTtsConfig(TtsServiceConfig):
    """cosyvoice_tts: piper (joe) on CPU, Fun-CosyVoice3 on GPU."""

    port: int = bounded(50052, ge=1, le=65535)
    metrics_port: int = bounded(9302, ge=0, le=65535)

    gpu: CosyVoiceGpuConfig = Field(default_factory=CosyVoiceGpuConfig)
