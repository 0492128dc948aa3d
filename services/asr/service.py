"""asr: Recognizer (StreamingRecognize, Recognize). CPU: Silero VAD + pocketsphinx interims + whisper finals;
GPU: the same pipeline with faster-whisper on CUDA (docs/asr.md)."""

from __future__ import annotations

from services.common.asr_servicer import AsrLimits, RecognizerServicer
from services.common.config import Config
from services.common.engines import AsrEngine
from services.common.health import recognition_probe
from services.common.server import ServiceParts, Servicer
from services.common.wiring import model_service
from services.engines.asr.turn_model import TurnModelMissing
from services.residency.from_config import resident_asr
from services.residency.resident_engines import when_resident
from voice.v1 import recognizer_pb2_grpc

SERVICE = "asr"


def make_engine(config: Config) -> AsrEngine:
    try:
        return _make_engine(config)
    except TurnModelMissing as e:
        raise SystemExit(f"{SERVICE}: cannot start: {e}") from None  # the default mode needs a model it lacks


def _make_engine(config: Config) -> AsrEngine:
    section = config.asr
    if section.engine == "gpu":
        from services.engines.asr.gpu_engine import GpuAsrEngine

        return GpuAsrEngine(SERVICE, section)
    from services.engines.asr.cpu_engine import CpuAsrEngine

    return CpuAsrEngine(SERVICE, section)


def build(config: Config) -> ServiceParts:
    section = config.asr
    # A GPU lease holder like every model service (GPU: always; CPU: on the virtual card when residency.enabled);
    # each recognition stream holds the model resident until it closes.
    engine, model_control = resident_asr(
        config,
        SERVICE,
        make_engine(config),
        model=section.gpu.model_dir if section.engine == "gpu" else "whisper+pocketsphinx (cpu)",
        gpu_engine=section.engine == "gpu",
    )
    recognizer = RecognizerServicer(SERVICE, engine, AsrLimits.from_config(section))
    return model_service(
        engine,
        model_control,
        [Servicer(recognizer_pb2_grpc.add_RecognizerServicer_to_server, recognizer, "voice.v1.Recognizer")],
        probe=when_resident(engine.residency, recognition_probe(engine)),
    )
