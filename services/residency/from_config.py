"""A model service's residency from the fleet config (``residency.*``): its engines wrapped to hold their model
resident, and its ModelControl servicer."""

from __future__ import annotations

from services.common.engines import AsrEngine, StsEngine, TtsEngine
from services.residency.model_control import model_control
from services.residency.model_residency import GIB, ModelResidency, engine_hooks
from services.residency.resident_engines import ResidentAsrEngine, ResidentStsEngine, ResidentTtsEngine
from voice.v1 import gpu_pb2


def lease_bytes(config, service: str) -> int:
    """The bytes ``service``'s lease asks for (residency.services.<service>.declared_gb): what its GPU engine sizes
    its allocator to (docs/leases.md, memory plan)."""
    spec = config.residency.services.get(service)
    return int(spec.declared_gb * GIB) if spec else 0


def holder_config(config, service: str):
    """``service``'s residency.services entry, or the defaults of one."""
    rc = config.residency
    spec = rc.services.get(service)
    if spec is None:
        spec = type(next(iter(rc.services.values())))() if rc.services else None
    return spec


def residency_for(config, service: str, engine, model: str, gpu_engine: bool) -> ModelResidency:
    """The residency of ``service``'s ``engine`` from the fleet config: leases always for GPU engines, on CPU when
    enabled."""
    rc = config.residency
    spec = holder_config(config, service)
    pinned = bool(spec and spec.pinned)
    return ModelResidency(
        service,
        engine_hooks(engine, model, service, gpu_engine, pinned),
        lease_enabled=gpu_engine or rc.enabled,
        pinned=pinned,
        lease_address=config.residency.lease_authority or config.router.address,
        declared_bytes=int((spec.declared_gb if spec else 0) * GIB),
        priority=gpu_pb2.LeasePriority.Value(f"LEASE_PRIORITY_{spec.priority}")
        if spec
        else gpu_pb2.LEASE_PRIORITY_INTERACTIVE,
        swap_in_ms=spec.swap_in_ms if spec else 0,
        swap_out_ms=spec.swap_out_ms if spec else 0,
        acquire_timeout_s=rc.acquire_timeout_seconds,
        max_waiting_requests=rc.max_waiting_requests,
    )


def resident_tts(
    config, service: str, engine: TtsEngine, model: str, gpu_engine: bool
) -> tuple[ResidentTtsEngine, object]:
    """``engine`` wrapped to hold its model resident per request, and the service's ModelControl servicer."""
    residency = residency_for(config, service, engine, model, gpu_engine)
    return ResidentTtsEngine(engine, residency), model_control(residency)


def resident_asr(config, service: str, engine: AsrEngine, model: str, gpu_engine: bool):
    """``engine`` wrapped so each stream holds its model resident, and the service's ModelControl servicer."""
    residency = residency_for(config, service, engine, model, gpu_engine)
    return ResidentAsrEngine(engine, residency), model_control(residency)


def resident_sts(config, service: str, sts: StsEngine, tts: TtsEngine, model: str, gpu_engine: bool):
    """moss_sts: one model behind two services (Conversation sessions and its Synthesizer), so one residency: both
    wrapped engines hold it, and the one ModelControl servicer moves it."""
    residency = residency_for(config, service, sts, model, gpu_engine)
    return ResidentStsEngine(sts, residency), ResidentTtsEngine(tts, residency), model_control(residency)
