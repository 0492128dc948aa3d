"""cosyvoice_tts: Fun-CosyVoice3-0.5B on GPU (cosyvoice_engine.py), piper with the bundled joe voice on CPU."""

from __future__ import annotations

from services.common.config import Config
from services.common.engines import TtsEngine
from services.common.server import ServiceParts, Servicer
from services.common.tts_servicer import LocalEngineResolver, SynthesizerServicer, admission_for, instrument
from services.residency.from_config import lease_bytes, resident_tts
from voice.v1 import synthesizer_pb2_grpc

SERVICE = "cosyvoice_tts"


def make_engine(config: Config) -> TtsEngine:
    section = config.cosyvoice_tts
    if section.engine == "cpu":
        from services.cosyvoice_tts.piper_engine import PiperTtsEngine

        return PiperTtsEngine(SERVICE, section.chunking, section.scheduling)
    from services.cosyvoice_tts.cosyvoice_engine import CosyVoice3Engine

    return CosyVoice3Engine(
        SERVICE,
        section.gpu,
        section.chunking,
        scheduling=section.scheduling,
        memory_budget_bytes=lease_bytes(config, SERVICE),
    )


def build(config: Config) -> ServiceParts:
    section = config.cosyvoice_tts
    engine, model_control = resident_tts(
        config,
        SERVICE,
        make_engine(config),
        model="piper:en_US-joe-medium" if section.engine == "cpu" else section.gpu.model_dir,
        gpu_engine=section.engine == "gpu",
    )
    servicer = instrument(
        SynthesizerServicer(
            SERVICE,
            LocalEngineResolver(engine),
            max_text_chars=section.max_text_chars,
            max_chunk_ms=section.chunking.max_chunk_ms,
            first_chunk_ms=section.chunking.first_chunk_ms or None,
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
