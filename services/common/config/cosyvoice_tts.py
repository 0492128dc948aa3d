"""The ``cosyvoice_tts`` config section (composed into the fleet config by services/common/config/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.config.base import TtsServiceConfig, check


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
    # wetext text-normalisation FSTs (zh/tn/*.fst, en/tn/*.fst from modelscope pengzhendong/wetext), mounted with
    # the weights; the library would download them at every start. "" = no text normalisation.
    text_normalizer_dir: str = "/models/wetext"
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
        check(path, "model_dir", bool(self.model_dir.strip()), "must be the mounted weights directory")
        check(path, "state_dir", bool(self.state_dir.strip()), "must be a writable directory")
        check(path, "trt_concurrent", self.trt_concurrent >= 1, "must be >= 1")
        check(
            path,
            "first_hop_tokens",
            self.first_hop_tokens >= 25 and self.first_hop_tokens % 25 == 0,
            f"must be a multiple of 25 (the model's training chunk), got {self.first_hop_tokens}",
        )
        check(
            path,
            "max_hop_tokens",
            self.max_hop_tokens >= self.first_hop_tokens and self.max_hop_tokens % 25 == 0,
            "must be a multiple of 25 and >= first_hop_tokens",
        )
        check(path, "hop_growth", 1 <= self.hop_growth <= 4, "must be 1..4")


@dataclass
class CosyVoiceTtsConfig(TtsServiceConfig):
    """cosyvoice_tts: piper (joe) on CPU, Fun-CosyVoice3 on GPU."""

    gpu: CosyVoiceGpuConfig = field(default_factory=CosyVoiceGpuConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        self.gpu.validate(f"{path}.gpu")
