"""asr: Recognizer (StreamingRecognize, Recognize). CPU: Silero VAD + pocketsphinx interims + whisper finals;
GPU: the same pipeline with faster-whisper on CUDA (docs/asr.md)."""

from __future__ import annotations

from services.common.asr_servicer import AsrLimits, RecognizerServicer, instrument
from services.common.config import Config
from services.common.engines import AsrEngine
from services.common.health import recognition_probe
from services.common.server import ServiceParts, Servicer
from voice.v1 import recognizer_pb2_grpc

SERVICE = "asr"


def make_engine(config: Config) -> AsrEngine:
    section = config.asr
    if section.engine == "gpu":
        from services.asr.gpu_engine import GpuAsrEngine

        return GpuAsrEngine(SERVICE, section)
    from services.asr.cpu_engine import CpuAsrEngine

    return CpuAsrEngine(SERVICE, section)


def build(config: Config) -> ServiceParts:
    engine = make_engine(config)
    servicer = instrument(RecognizerServicer(SERVICE, engine, AsrLimits.from_config(config.asr)))
    return ServiceParts(
        servicers=[Servicer(recognizer_pb2_grpc.add_RecognizerServicer_to_server, servicer, "voice.v1.Recognizer")],
        start=engine.start,
        stop=engine.close,
        probe=recognition_probe(engine),
        engines=[engine],
    )
