"""qwen_tts: Qwen3-TTS CustomVoice on GPU (vLLM-Omni streaming sidecar, or the qwen-tts package), espeak-ng on CPU.

Every engine serves the shared Synthesizer servicer. The resolver differs from the stock local one in one way:
a request that names a language but no voice gets the first voice that speaks that language (this service is
multilingual; its default voice speaks only one).
"""

from __future__ import annotations

from services.common.config import Config
from services.common.engines import Routing, TtsEngine, VoiceInfo
from services.common.server import ServiceParts
from services.common.tts_servicer import LocalEngineResolver
from services.common.voices import pick_voice
from services.common.wiring import tts_service
from services.residency.from_config import lease_bytes, resident_tts

SERVICE = "qwen_tts"


class QwenResolver(LocalEngineResolver):
    async def resolve(
        self, voice: str, language: str, routing: Routing, time_remaining: float | None, **where
    ) -> tuple[TtsEngine, VoiceInfo]:
        voices = await self.engine.voices()
        if not voice and language:
            # The voice named like the language (espeak's "fr" for fr), then one whose first language it is,
            # then any voice that speaks it.
            lang = language.lower()
            speaking = [v for v in voices if v.speaks(language)]
            speaking.sort(key=lambda v: (v.id.lower() != lang, v.languages[0].lower() != lang))
            voices = speaking or voices
        return self.engine, pick_voice(voices, voice, language, where=self.engine.service, **where)


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
    return tts_service(SERVICE, section, resident, resolver=QwenResolver)
