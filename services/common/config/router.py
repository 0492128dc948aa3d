"""The ``router`` config section (composed into the fleet config by services/common/config/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.config.base import ServerConfig, check, is_host_port


@dataclass
class LeaseConfig:
    """GPU time-sharing leases the router grants to model services (docs/leases.md)."""

    # Card memory that can be granted, in GiB (24 or 48 for the cards we target); 0 = read the card's total
    # memory from NVML and keep reserve_gb back for CUDA contexts.
    capacity_gb: float = 24.0
    reserve_gb: float = 1.0
    # A lease expires this long after its last renew; holders stop GPU work at renew_deadline (shorter).
    ttl_seconds: float = 6.0
    renew_deadline_seconds: float = 4.0
    # Anti-thrash: a holder is not revoked before it has been resident this long.
    min_residency_seconds: float = 10.0
    # A revoked holder should offload and release within this long.
    revoke_deadline_seconds: float = 10.0
    # Acquires waiting for room; more are refused with RESOURCE_EXHAUSTED.
    max_waiters: int = 16
    # Empty: this router grants the leases of the one card (above). Several GPU nodes (docs/scale.md): each card has
    # its own lease authority (`python -m services.router.lease_authority`, granting with the policy above), model
    # services ask theirs (residency.lease_authority), and routers only read these tables: host:port each, a
    # host that resolves to several addresses (a Kubernetes headless Service) standing for every one of them.
    authorities: list[str] = field(default_factory=list)
    # How often a router reads the authorities' tables for residency-aware routing.
    authorities_poll_seconds: float = 1.0

    def validate(self, path: str) -> None:
        for address in self.authorities:
            check(path, "authorities", is_host_port(address), f"must be host:port each, got {address!r}")
        check(path, "authorities_poll_seconds", 0 < self.authorities_poll_seconds <= 60, "must be > 0 and <= 60")
        check(path, "capacity_gb", 0 <= self.capacity_gb <= 1024, f"must be 0..1024, got {self.capacity_gb}")
        check(path, "reserve_gb", self.reserve_gb >= 0, "must be >= 0")
        check(
            path,
            "renew_deadline_seconds",
            0 < self.renew_deadline_seconds < self.ttl_seconds,
            f"must be > 0 and < ttl_seconds ({self.ttl_seconds}), got {self.renew_deadline_seconds}",
        )
        check(path, "min_residency_seconds", self.min_residency_seconds >= 0, "must be >= 0")
        check(path, "revoke_deadline_seconds", self.revoke_deadline_seconds > 0, "must be > 0")
        check(path, "max_waiters", self.max_waiters >= 1, "must be >= 1")


TTS_BACKENDS = ("cosyvoice_tts", "qwen_tts", "moss_sts")


def backend_target_ok(target: str) -> bool:
    """host:port, or a gRPC target naming several replicas: dns:///host:port (every address the name resolves to,
    e.g. a Kubernetes headless Service) or ipv4:host:port,host:port (a fixed list)."""
    if target.startswith("dns:///"):
        return is_host_port(target.removeprefix("dns:///"))
    if target.startswith(("ipv4:", "ipv6:")):
        return all(is_host_port(a) for a in target.split(":", 1)[1].split(","))
    return is_host_port(target)


@dataclass
class LeaseAuthorityConfig(ServerConfig):
    """One GPU card's lease authority (services/router/lease_authority.py): GpuLeases next to the card, so any number
    of routers can route to any node. It grants with router.leases' card policy (capacity_gb, ttl, ...)."""

    # Names the card in logs and in ListLeases' request ids (default: this host's name).
    card: str = ""


@dataclass
class RoutesConfig:
    """Which backend serves a request and what it fails over to (docs/router.md#policy).

    Each list is a fallback chain in priority order: the first backend that is healthy (not ejected, recovered) and
    has the voice serves; the next ones take over when it fails (Synthesize: before the first audio;
    StreamingSynthesize: from the next sentence). Backends not configured in router.backends are skipped."""

    # ROUTE_MODE_REALTIME (live dialogue: lowest time to first audio).
    realtime: list[str] = field(default_factory=lambda: ["moss_sts", "cosyvoice_tts"])
    # ROUTE_MODE_BROADCAST (narration: quality, cloned voices).
    broadcast: list[str] = field(default_factory=lambda: ["cosyvoice_tts"])
    # No mode given; empty: [router.default_tts_backend].
    default: list[str] = field(default_factory=list)
    # A request naming a voice goes to a backend that has it: its mode's chain first, then these, in order (a preset
    # voice of qwen_tts routes to qwen_tts). Backends of the chain that lack the voice are skipped as fallbacks.
    voice_owners: list[str] = field(default_factory=lambda: ["qwen_tts", "cosyvoice_tts", "moss_sts"])
    # A request that pins a backend (routing.engine) fails with that backend's status (false) or fails over along
    # its mode's chain (true).
    failover_pinned: bool = False
    # A backend that sent no audio this long (Synthesize: after the call; StreamingSynthesize: while text is due to
    # be spoken) is given up for the next one in the chain. Bounded by half the caller's remaining time while a
    # fallback is left, so a hung backend leaves time to fail over within the caller's deadline.
    first_audio_timeout_ms: int = 3000
    # Latency budget for requests that give none (Routing.latency_budget_ms): a cold time-shared model whose
    # swap-in takes longer is passed over for a warm fallback of the route, and prefetched.
    default_latency_budget_ms: int = 1000
    # Conversation: when moss_sts is unhealthy or fails mid-turn, the router answers with its own cascade (remote asr
    # -> brain -> the first configured backend of this list), replaying the user's audio of the turn.
    conversation_fallback: bool = True
    conversation_fallback_tts: list[str] = field(default_factory=lambda: ["cosyvoice_tts"])

    def validate(self, path: str) -> None:
        for name in ("realtime", "broadcast", "default", "voice_owners", "conversation_fallback_tts"):
            chain = getattr(self, name)
            for i, backend in enumerate(chain):
                check(
                    path,
                    f"{name}[{i}]",
                    backend in TTS_BACKENDS,
                    f"{backend!r} is not a TTS backend; use {', '.join(TTS_BACKENDS)}",
                )
            dup = next((b for i, b in enumerate(chain) if b in chain[:i]), None)
            check(path, name, dup is None, f"names {dup!r} twice; each backend once, in priority order")
        check(path, "realtime", bool(self.realtime), "must name at least one backend")
        check(path, "broadcast", bool(self.broadcast), "must name at least one backend")
        check(
            path,
            "first_audio_timeout_ms",
            100 <= self.first_audio_timeout_ms <= 120_000,
            f"must be 100..120000, got {self.first_audio_timeout_ms}",
        )


@dataclass
class RouterHealthConfig:
    """Backend health beyond grpc.health.v1 Watch: passive outlier detection, recovery and deep probes
    (docs/router.md#health)."""

    # Consecutive failed calls (UNAVAILABLE, INTERNAL, timeouts) or failed probes that eject a backend.
    eject_after_failures: int = 3
    # First ejection; each next one doubles, up to max_ejection_seconds. Healthy for forget_ejections_seconds: the
    # next ejection is short again.
    ejection_seconds: float = 5.0
    max_ejection_seconds: float = 60.0
    forget_ejections_seconds: float = 300.0
    # Back from an ejection or an outage, a backend serves again only after recovery_probes real tiny requests in a
    # row succeed, probe_interval_seconds apart (hysteresis: flapping health never flaps the route).
    recovery_probes: int = 3
    probe_interval_seconds: float = 1.0
    probe_timeout_ms: int = 3000
    probe_text: str = "Hi."
    # Deep health: these backends also get a short synthesis every deep_probe_interval_seconds while healthy; one
    # that does not finish within deep_probe_deadline_ms counts as a failure (SERVING alone is not enough).
    deep_probe: list[str] = field(default_factory=lambda: ["moss_sts"])
    deep_probe_interval_seconds: float = 10.0
    deep_probe_deadline_ms: int = 3000

    def validate(self, path: str) -> None:
        check(path, "eject_after_failures", 1 <= self.eject_after_failures <= 100, "must be 1..100")
        check(path, "ejection_seconds", 0 < self.ejection_seconds <= 3600, "must be > 0 and <= 3600")
        check(
            path,
            "max_ejection_seconds",
            self.ejection_seconds <= self.max_ejection_seconds <= 86_400,
            f"must be ejection_seconds ({self.ejection_seconds})..86400, got {self.max_ejection_seconds}",
        )
        check(path, "forget_ejections_seconds", self.forget_ejections_seconds > 0, "must be > 0")
        check(path, "recovery_probes", 1 <= self.recovery_probes <= 100, "must be 1..100")
        check(path, "probe_interval_seconds", 0.05 <= self.probe_interval_seconds <= 600, "must be 0.05..600")
        check(path, "probe_timeout_ms", 50 <= self.probe_timeout_ms <= 120_000, "must be 50..120000")
        check(path, "probe_text", bool(self.probe_text.strip()), "must be a few words to synthesize")
        for i, backend in enumerate(self.deep_probe):
            check(
                path,
                f"deep_probe[{i}]",
                backend in TTS_BACKENDS,
                f"{backend!r} cannot be deep-probed (a short synthesis); use {', '.join(TTS_BACKENDS)}",
            )
        check(path, "deep_probe_interval_seconds", 0.1 <= self.deep_probe_interval_seconds <= 3600, "must be 0.1..3600")
        check(path, "deep_probe_deadline_ms", 50 <= self.deep_probe_deadline_ms <= 120_000, "must be 50..120000")


@dataclass
class RouterConfig(ServerConfig):
    """The front door."""

    # Backend name -> host:port. Filled from the enabled services' sections when left empty. Replicas of one
    # backend on several nodes: a gRPC target naming them all (dns:///name:port or ipv4:a:port,b:port); calls go
    # round-robin to the replicas whose grpc.health says SERVING (docs/scale.md#routers).
    backends: dict[str, str] = field(default_factory=dict)
    # Backend for text-to-speech when neither engine, voice nor mode picks one.
    default_tts_backend: str = "cosyvoice_tts"
    # Time kept back from the caller's deadline when calling a backend, so the router can still answer in time.
    deadline_margin_ms: int = 50
    # Deadline for calls that came without one (a hung backend must not hang the client forever).
    default_deadline_seconds: float = 120.0
    # How long a backend's voice list is reused before asking again.
    voices_cache_seconds: float = 5.0
    max_text_chars: int = 5000
    leases: LeaseConfig = field(default_factory=LeaseConfig)
    routes: RoutesConfig = field(default_factory=RoutesConfig)
    health: RouterHealthConfig = field(default_factory=RouterHealthConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        for name, address in self.backends.items():
            check(
                f"{path}.backends",
                name,
                backend_target_ok(address),
                f"must be host:port, dns:///host:port or ipv4:host:port,host:port; got {address!r}",
            )
        check(path, "deadline_margin_ms", 0 <= self.deadline_margin_ms <= 5000, "must be 0..5000")
        check(path, "default_deadline_seconds", self.default_deadline_seconds > 0, "must be > 0")
        check(path, "voices_cache_seconds", self.voices_cache_seconds >= 0, "must be >= 0")
        check(path, "max_text_chars", 1 <= self.max_text_chars <= 100_000, "must be 1..100000")
        self.leases.validate(f"{path}.leases")
        self.routes.validate(f"{path}.routes")
        self.health.validate(f"{path}.health")
        check(
            path,
            "default_tts_backend",
            self.default_tts_backend in TTS_BACKENDS,
            f"{self.default_tts_backend!r} is not a TTS backend; use {', '.join(TTS_BACKENDS)}",
        )
