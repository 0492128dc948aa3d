"""cosyvoice_tts: Fun-CosyVoice3-0.5B on GPU (its own issue), piper with the bundled joe voice on CPU."""

from __future__ import annotations

from services.common.config import Config
from services.common.engines import TtsEngine
from services.common.errors import FailedPrecondition
from services.common.server import ServiceParts, Servicer
from services.common.tts_servicer import LocalEngineResolver, SynthesizerServicer, instrument
from voice.v1 import synthesizer_pb2_grpc

SERVICE = "cosyvoice_tts"


def make_engine(config: Config) -> TtsEngine:
    section = config.cosyvoice_tts
    if section.engine == "cpu":
        from services.cosyvoice_tts.piper_engine import PiperTtsEngine

        return PiperTtsEngine(SERVICE, section.chunking, max_workers=section.max_concurrent_syntheses)
    raise FailedPrecondition("cosyvoice_tts.engine: 'gpu' (Fun-CosyVoice3) is not available in this build yet")


def build(config: Config) -> ServiceParts:
    section = config.cosyvoice_tts
    engine = make_engine(config)
    servicer = instrument(
        SynthesizerServicer(
            SERVICE,
            LocalEngineResolver(engine),
            max_text_chars=section.max_text_chars,
            max_chunk_ms=section.chunking.max_chunk_ms,
            max_concurrent=section.max_concurrent_syntheses,
        )
    )
    return ServiceParts(
        servicers=[Servicer(synthesizer_pb2_grpc.add_SynthesizerServicer_to_server, servicer, "voice.v1.Synthesizer")],
        start=engine.start,
        stop=engine.close,
    )
