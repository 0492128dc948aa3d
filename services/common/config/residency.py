"""The ``residency`` config section: model services holding GPU leases (docs/leases.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from services.common.config.base import MODEL_SERVICES, FieldValueError, Section, bounded, is_host_port


class HolderConfig(Section):
    """One model service as a GPU lease holder."""

    # Bytes the lease asks for, in GiB: weights + cache + workspace (GPU engines); on CPU, the size accounted on
    # the virtual card so time-sharing can be exercised without a GPU.
    declared_gb: float = bounded(1.0, gt=0)
    priority: Literal["BATCH", "INTERACTIVE", "REALTIME"] = "INTERACTIVE"
    # Measured cost of moving the model on and off the card (the router weighs it when routing and revoking).
    swap_in_ms: int = bounded(0, ge=0)
    swap_out_ms: int = bounded(0, ge=0)
    # Keep the model on the card for good: its lease is never revoked (its renewals always say busy). For an engine
    # that cannot free its device memory; the card space stays taken, so size the other holders around it.
    pinned: bool = False


def _default_holders() -> dict[str, HolderConfig]:
    # Sizes from DESIGN §4 (FP16 estimates): MOSS-Speech ~15-21 GB, CosyVoice3 ~5-9 GB, Qwen3-TTS-0.6B ~3.4 GB.
    return {
        "moss_sts": HolderConfig(declared_gb=21, priority="REALTIME", swap_in_ms=8000, swap_out_ms=2000),
        "cosyvoice_tts": HolderConfig(declared_gb=8, priority="INTERACTIVE", swap_in_ms=3000, swap_out_ms=800),
        "qwen_tts": HolderConfig(declared_gb=3.4, priority="INTERACTIVE", swap_in_ms=2000, swap_out_ms=500),
        "asr": HolderConfig(declared_gb=2, priority="INTERACTIVE", swap_in_ms=1500, swap_out_ms=300),
    }


class ResidencyConfig(Section):
    """Model services holding GPU leases from the router (docs/leases.md)."""

    # GPU engines always hold a lease before their weights go on the card. true: CPU engines hold one too, for
    # their declared size on the router's virtual card (time-sharing without a GPU).
    enabled: bool = False
    # Where model services ask for GPU leases: host:port of their card's lease authority (several GPU nodes,
    # docs/scale.md); empty: the router's GpuLeases (one card, the default).
    lease_authority: str = ""
    # Longest wait for a lease before a load fails with UNAVAILABLE.
    acquire_timeout_seconds: float = bounded(120.0, gt=0)
    # Requests that may wait for a model to be loaded back; more get RESOURCE_EXHAUSTED with a retry hint.
    max_waiting_requests: int = bounded(8, ge=0)
    services: dict[str, HolderConfig] = Field(default_factory=_default_holders)

    @field_validator("lease_authority")
    @classmethod
    def _authority(cls, v: str) -> str:
        if v and not is_host_port(v):
            raise ValueError(f"must be host:port (or empty: the router), got {v!r}")
        return v

    @field_validator("services", mode="before")
    @classmethod
    def _model_services(cls, services):
        for name in services if isinstance(services, dict) else ():
            if name not in MODEL_SERVICES:
                raise FieldValueError(name, f"is not a model service ({', '.join(MODEL_SERVICES)})")
        return services
