"""The ``router`` config section (composed into the fleet config by services/common/config/__init__.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from services.common.config.base import Names, Section, ServerConfig, bounded, check, comma_list, is_host_port


class LeaseConfig(Section):
    """GPU time-sharing leases the router grants to model services (docs/leases.md)."""

    # Card memory that can be granted, in GiB (24 or 48 for the cards we target); 0 = read the card's total
    # memory from NVML and keep reserve_gb back for CUDA contexts.
    capacity_gb: float = bounded(24.0, ge=0, le=1024)
    reserve_gb: float = bounded(1.0, ge=0)
    # A lease expires this long after its last renew; holders stop GPU work at renew_deadline (shorter).
    ttl_seconds: float = 6.0
    renew_deadline_seconds: float = 4.0
    # Anti-thrash: a holder is not revoked before it has been resident this long.
    min_residency_seconds: float = bounded(10.0, ge=0)
    # A revoked holder should offload and release within this long.
    revoke_deadline_seconds: float = bounded(10.0, gt=0)
    # Acquires waiting for room; more are refused with RESOURCE_EXHAUSTED.
    max_waiters: int = bounded(16, ge=1)
    # Empty: this router grants the leases of the one card (above). Several GPU nodes (docs/scale.md): each card has
    # its own lease authority (`python -m services.residency`, granting with the policy above), model
    # services ask theirs (residency.lease_authority), and routers only read these tables: host:port each, a
    # host that resolves to several addresses (a Kubernetes headless Service) standing for every one of them.
    authorities: Names = Field(default_factory=list)
    # How often a router reads the authorities' tables for residency-aware routing.
    authorities_poll_seconds: float = bounded(1.0, gt=0, le=60, says="must be > 0 and <= 60")

    @field_validator("authorities")
    @classmethod
    def _authorities(cls, addresses: list[str]) -> list[str]:
        for address in addresses:
            if not is_host_port(address):
                raise ValueError(f"must be host:port each, got {address!r}")
        return addresses

    @model_validator(mode="after")
    def _renewal(self):
        check(
            "renew_deadline_seconds",
            0 < self.renew_deadline_seconds < self.ttl_seconds,
            f"must be > 0 and < ttl_seconds ({self.ttl_seconds}), got {self.renew_deadline_seconds}",
        )
        return self


TTS_BACKENDS = ("cosyvoice_tts", "qwen_tts", "moss_sts")
TtsBackendName = Literal["cosyvoice_tts", "qwen_tts", "moss_sts"]


def backend_target_ok(target: str) -> bool:
    """host:port, or a gRPC target naming several replicas: dns:///host:port (every address the name resolves to,
    e.g. a Kubernetes headless Service) or ipv4:host:port,host:port (a fixed list)."""
    if target.startswith("dns:///"):
        return is_host_port(target.removeprefix("dns:///"))
    if target.startswith(("ipv4:", "ipv6:")):
        return all(is_host_port(a) for a in target.split(":", 1)[1].split(","))
    return is_host_port(target)


def _tts_backend(name: str) -> str:
    if name not in TTS_BACKENDS:
        raise ValueError(f"{name!r} is not a TTS backend; use {', '.join(TTS_BACKENDS)}")
    return name


def _deep_probed(name: str) -> str:
    if name not in TTS_BACKENDS:
        raise ValueError(f"{name!r} cannot be deep-probed (a short synthesis); use {', '.join(TTS_BACKENDS)}")
    return name


def _backend_target(target: str) -> str:
    if not backend_target_ok(target):
        raise ValueError(f"must be host:port, dns:///host:port or ipv4:host:port,host:port; got {target!r}")
    return target


# Names checked with today's messages (a Literal would say less); the schema still lists them.
TtsBackend = Annotated[str, AfterValidator(_tts_backend), Field(json_schema_extra={"enum": list(TTS_BACKENDS)})]
DeepProbed = Annotated[str, AfterValidator(_deep_probed), Field(json_schema_extra={"enum": list(TTS_BACKENDS)})]
Chain = Annotated[list[TtsBackend], BeforeValidator(comma_list)]
BackendTarget = Annotated[str, AfterValidator(_backend_target)]


class LeaseAuthorityConfig(ServerConfig):
    """One GPU card's lease authority (services/residency/__main__.py): GpuLeases next to the card, so any number
    of routers can route to any node. It grants with router.leases' card policy (capacity_gb, ttl, ...)."""

    port: int = bounded(50056, ge=1, le=65535)
    metrics_port: int = bounded(9306, ge=0, le=65535)

    # Names the card in logs and in ListLeases' request ids (default: this host's name).
    card: str = ""


class RoutesConfig(Section):
    """Which backend serves a request and what it fails over to (docs/router.md#policy).

    Each list is a fallback chain in priority order: the first backend that is healthy (not ejected, recovered) and
    has the voice serves; the next ones take over when it fails (Synthesize: before the first audio;
    StreamingSynthesize: from the next sentence). Backends not configured in router.backends are skipped."""

    # ROUTE_MODE_REALTIME (live dialogue: lowest time to first audio).
    realtime: Chain = bounded(["moss_sts", "cosyvoice_tts"], min_length=1, says="must name at least one backend")
    # ROUTE_MODE_BROADCAST (narration: quality, cloned voices).
    broadcast: Chain = bounded(["cosyvoice_tts"], min_length=1, says="must name at least one backend")
    # No mode given; empty: [router.default_tts_backend].
    default: Chain = Field(default_factory=list)
    # A request naming a voice goes to a backend that has it: its mode's chain first, then these, in order (a preset
    # voice of qwen_tts routes to qwen_tts). Backends of the chain that lack the voice are skipped as fallbacks.
    voice_owners: Chain = Field(default_factory=lambda: ["qwen_tts", "cosyvoice_tts", "moss_sts"])
    # A request that pins a backend (routing.engine) fails with that backend's status (false) or fails over along
    # its mode's chain (true).
    failover_pinned: bool = False
    # A backend that sent no audio this long (Synthesize: after the call; StreamingSynthesize: while text is due to
    # be spoken) is given up for the next one in the chain. Bounded by half the caller's remaining time while a
    # fallback is left, so a hung backend leaves time to fail over within the caller's deadline.
    first_audio_timeout_ms: int = bounded(3000, ge=100, le=120_000)
    # Latency budget for requests that give none (Routing.latency_budget_ms): a cold time-shared model whose
    # swap-in takes longer is passed over for a warm fallback of the route, and prefetched.
    default_latency_budget_ms: int = 1000
    # Conversation: when moss_sts is unhealthy or fails mid-turn, the router answers with its own cascade (remote asr
    # -> brain -> the first configured backend of this list), replaying the user's audio of the turn.
    conversation_fallback: bool = True
    conversation_fallback_tts: Chain = Field(default_factory=lambda: ["cosyvoice_tts"])
    # A conversation that declares tools when moss_sts calls none (MOSS-Speech on a card): cascade = the router's
    # cascade serves the whole session (it calls tools); refuse = the caller gets moss_sts's FAILED_PRECONDITION
    # naming config.tools. docs/conversation.md#tools
    conversation_tools: Literal["cascade", "refuse"] = "cascade"

    @field_validator("realtime", "broadcast", "default", "voice_owners", "conversation_fallback_tts")
    @classmethod
    def _once_each(cls, chain: list[str]) -> list[str]:
        dup = next((b for i, b in enumerate(chain) if b in chain[:i]), None)
        if dup is not None:
            raise ValueError(f"names {dup!r} twice; each backend once, in priority order")
        return chain


class RouterHealthConfig(Section):
    """Backend health beyond grpc.health.v1 Watch: passive outlier detection, recovery and deep probes
    (docs/router.md#health)."""

    # Consecutive failed calls (UNAVAILABLE, INTERNAL, timeouts) or failed probes that eject a backend.
    eject_after_failures: int = bounded(3, ge=1, le=100)
    # First ejection; each next one doubles, up to max_ejection_seconds. Healthy for forget_ejections_seconds: the
    # next ejection is short again.
    ejection_seconds: float = bounded(5.0, gt=0, le=3600, says="must be > 0 and <= 3600")
    max_ejection_seconds: float = 60.0
    forget_ejections_seconds: float = bounded(300.0, gt=0)
    # Back from an ejection or an outage, a backend serves again only after recovery_probes real tiny requests in a
    # row succeed, probe_interval_seconds apart (hysteresis: flapping health never flaps the route).
    recovery_probes: int = bounded(3, ge=1, le=100)
    probe_interval_seconds: float = bounded(1.0, ge=0.05, le=600)
    probe_timeout_ms: int = bounded(3000, ge=50, le=120_000)
    probe_text: str = bounded("Hi.", pattern=r"\S", says="must be a few words to synthesize")
    # Deep health: these backends also get a short synthesis every deep_probe_interval_seconds while healthy; one
    # that does not finish within deep_probe_deadline_ms counts as a failure (SERVING alone is not enough).
    deep_probe: list[DeepProbed] = Field(default_factory=lambda: ["moss_sts"])
    deep_probe_interval_seconds: float = bounded(10.0, ge=0.1, le=3600)
    deep_probe_deadline_ms: int = bounded(3000, ge=50, le=120_000)

    @model_validator(mode="after")
    def _ejections(self):
        check(
            "max_ejection_seconds",
            self.ejection_seconds <= self.max_ejection_seconds <= 86_400,
            f"must be ejection_seconds ({self.ejection_seconds})..86400, got {self.max_ejection_seconds}",
        )
        return self


class RouterConfig(ServerConfig):
    """The front door."""

    port: int = bounded(50051, ge=1, le=65535)
    metrics_port: int = bounded(9301, ge=0, le=65535)

    # Backend name -> host:port. Filled from the enabled services' sections when left empty. Replicas of one
    # backend on several nodes: a gRPC target naming them all (dns:///name:port or ipv4:a:port,b:port); calls go
    # round-robin to the replicas whose grpc.health says SERVING (docs/scale.md#routers).
    backends: dict[str, BackendTarget] = Field(default_factory=dict)
    # Backend for text-to-speech when neither engine, voice nor mode picks one.
    default_tts_backend: TtsBackend = "cosyvoice_tts"
    # Time kept back from the caller's deadline when calling a backend, so the router can still answer in time.
    deadline_margin_ms: int = bounded(50, ge=0, le=5000)
    # Deadline for calls that came without one (a hung backend must not hang the client forever).
    default_deadline_seconds: float = bounded(120.0, gt=0)
    # How long a backend's voice list is reused before asking again.
    voices_cache_seconds: float = bounded(5.0, ge=0)
    max_text_chars: int = bounded(5000, ge=1, le=100_000)
    leases: LeaseConfig = Field(default_factory=LeaseConfig)
    routes: RoutesConfig = Field(default_factory=RoutesConfig)
    health: RouterHealthConfig = Field(default_factory=RouterHealthConfig)
