"""How a model service is put together from its config section: its Synthesizer (when it speaks), its ModelControl,
and the start, stop, deep probe and engines the bootstrap (services/common/server.py) runs. A service's build() makes
its engines and passes them here; what it adds is its own (qwen_tts's resolver, moss_sts's Conversation)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from services.common.engines import TtsEngine
from services.common.server import ServiceParts, Servicer
from services.common.tts_servicer import EngineResolver, LocalEngineResolver, SynthesizerServicer, admission_for
from voice.v1 import synthesizer_pb2_grpc


def synthesizer(service: str, section, resolver: EngineResolver) -> Servicer:
    """A model service's Synthesizer as its config section (a TtsServiceConfig) says: text limit, chunking (first
    chunk and later ones), admission."""
    return Servicer(
        synthesizer_pb2_grpc.add_SynthesizerServicer_to_server,
        SynthesizerServicer(
            service,
            resolver,
            max_text_chars=section.max_text_chars,
            max_chunk_ms=section.chunking.max_chunk_ms,
            first_chunk_ms=section.chunking.first_chunk_ms or None,
            admission=admission_for(service, section),
        ),
        "voice.v1.Synthesizer",
    )


def model_service(
    engine,
    model_control: Servicer,
    servicers: list[Servicer],
    probe: Callable[[], Awaitable[str | None]] | None = None,
    engines: list | None = None,
) -> ServiceParts:
    """The parts of a model service around its main engine: the servicers and its ModelControl; the engine starts and
    stops with the process, serves the deep probe (unless ``probe`` says otherwise) and is wedged by chaos drills
    (with ``engines``, when more than one serves requests)."""
    return ServiceParts(
        servicers=[*servicers, model_control],
        start=engine.start,
        stop=engine.close,
        probe=probe or engine.probe,
        engines=engines or [engine],
    )


def tts_service(
    service: str,
    section,
    resident: tuple[TtsEngine, Servicer],
    resolver: Callable[[TtsEngine], EngineResolver] = LocalEngineResolver,
) -> ServiceParts:
    """A TTS service: one engine (as ``resident_tts`` wrapped it, with its ModelControl) behind the Synthesizer."""
    engine, model_control = resident
    return model_service(engine, model_control, [synthesizer(service, section, resolver(engine))])
