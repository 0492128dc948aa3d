"""qwen_tts: Qwen3-TTS CustomVoice on GPU (vLLM-Omni streaming sidecar, or the qwen-tts package), espeak-ng on CPU.

Every engine serves the shared Synthesizer servicer with the stock local resolver: a request that names a language
(or whose text's script gives one) but no voice gets the best voice that speaks it (services.common.voices).
"""

from __future__ import annotations

from services.common.config import Config
from services.common.engines import TtsEngine
from services.common.server import ServiceParts
from services.common.wiring import tts_service
from services.residency.from_config import lease_bytes, resident_tts

SERVICE = "qwen_tts"


def make_engine(config: Config) -> TtsEngine:
    section = config.qwen_tts
    if section.engine == "cpu":
        from services.engines.espeak_engine import EspeakTtsEngine

        return EspeakTtsEngine(SERVICE, section.chunking, section.espeak, section.scheduling.margin_ms)
    if section.gpu.backend == "vllm_omni":
        from services.qwen_tts.vllm_omni_engine import VllmOmniTtsEngine

        return VllmOmniTtsEngine(
            SERVICE, section.chunking, section.gpu, section.scheduling, lease_bytes(config, SERVICE)
        )
    from services.qwen_tts.qwen_engine import QwenTtsEngine

    return QwenTtsEngine(
        SERVICE,
        section.chunking,
        section.gpu,
        section.scheduling.margin_ms,
        memory_budget_bytes=lease_bytes(config, SERVICE),
    )


def build(config: Config) -> ServiceParts:
    section = config.qwen_tts
    model = "espeak-ng" if section.engine == "cpu" else section.gpu.model_dir
    resident = resident_tts(config, SERVICE, make_engine(config), model=model, gpu_engine=section.engine == "gpu")
    return tts_service(SERVICE, section, resident)
