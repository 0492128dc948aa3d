"""cosyvoice_tts: Fun-CosyVoice3-0.5B on GPU (cosyvoice_engine.py), piper with the bundled joe voice on CPU."""

from __future__ import annotations

from services.common.config import Config
from services.common.engines import TtsEngine
from services.common.server import ServiceParts
from services.common.wiring import tts_service
from services.residency.from_config import lease_bytes, resident_tts

SERVICE = "cosyvoice_tts"


def make_engine(config: Config) -> TtsEngine:
    section = config.cosyvoice_tts
    if section.engine == "cpu":
        from services.engines.piper_engine import PiperTtsEngine

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
    model = "piper:en_US-joe-medium" if section.engine == "cpu" else section.gpu.model_dir
    resident = resident_tts(config, SERVICE, make_engine(config), model=model, gpu_engine=section.engine == "gpu")
    return tts_service(SERVICE, section, resident)
