"""qwen_tts: Qwen3-TTS CustomVoice on GPU (vLLM-Omni streaming sidecar, or the qwen-tts package), espeak-ng on CPU.

Every engine serves the shared Synthesizer servicer. The resolver differs from the stock local one in one way:
a request that names a language but no voice gets the first voice that speaks that language (this service is
multilingual; its default voice speaks only one).
"""

from __future__ import annotations

from services.common.config import Config
from services.common.engines import Routing, TtsEngine, VoiceInfo
from services.common.model_control import lease_bytes, resident_tts
from services.common.server import ServiceParts, Servicer
from services.common.tts_servicer import LocalEngineResolver, SynthesizerServicer, admission_for, instrument
from services.common.voices import pick_voice
from voice.v1 import synthesizer_pb2_grpc

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
        from services.qwen_tts.espeak_engine import EspeakTtsEngine

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
    engine, model_control = resident_tts(
        config,
        SERVICE,
        make_engine(config),
        model="espeak-ng" if section.engine == "cpu" else section.gpu.model_dir,
        gpu_engine=section.engine == "gpu",
    )
    servicer = instrument(
        SynthesizerServicer(
            SERVICE,
            QwenResolver(engine),
            max_text_chars=section.max_text_chars,
            max_chunk_ms=section.chunking.max_chunk_ms,
            admission=admission_for(SERVICE, section),
        )
    )
    return ServiceParts(
        servicers=[
            Servicer(synthesizer_pb2_grpc.add_SynthesizerServicer_to_server, servicer, "voice.v1.Synthesizer"),
            model_control,
        ],
        start=engine.start,
        stop=engine.close,
        probe=engine.probe,
        engines=[engine],
    )
