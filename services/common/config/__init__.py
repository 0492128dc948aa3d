"""Fleet configuration: one YAML file plus environment overrides, validated at start.

Every service reads the same file (default: ``services/common/default_config.yaml``; ``--config PATH`` or
``VOICEFLEET_CONFIG`` picks another) and takes its own section. Any field can be overridden from the environment:
``VOICEFLEET_<SECTION>__<FIELD>[__<KEY>]``, e.g. ``VOICEFLEET_ROUTER__PORT=6000`` or
``VOICEFLEET_ROUTER__BACKENDS__COSYVOICE_TTS=10.0.0.5:50052``. A bad value stops the process at start with a
message naming the field (``router.port: must be 1..65535, got 70000``).

Each section has its module in this package (``services/common/config/<section>.py``, a validated dataclass built
from base.py), at the bottom with the shared runtime: services import their section, no section imports a service.
This module composes them into ``Config`` and keeps what is shared: the loader, the environment overrides, the
fleet-wide sections (fleet, residency, security) and the error reporting.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from services.common.config.asr import AsrServiceConfig
from services.common.config.base import ConfigError, is_host_port
from services.common.config.base import check as _check  # the name the sections below call it by
from services.common.config.brain import BrainConfig
from services.common.config.cosyvoice_tts import CosyVoiceTtsConfig
from services.common.config.gateway import GatewayConfig
from services.common.config.moss_sts import MossStsConfig
from services.common.config.qwen_tts import QwenTtsConfig
from services.common.config.router import LeaseAuthorityConfig, RouterConfig

ENV_PREFIX = "VOICEFLEET_"
# VOICEFLEET_* variables that are not config fields: the config file's path, and the pid of the `voicefleet up` that
# started this member (services/common/server.py die_with_supervisor).
NOT_FIELDS = ("VOICEFLEET_CONFIG", "VOICEFLEET_SUPERVISOR_PID")
DEFAULT_CONFIG_PATH = Path(__file__).parents[1] / "default_config.yaml"
MODEL_SERVICES = ("cosyvoice_tts", "qwen_tts", "asr", "moss_sts")


@dataclass
class HolderConfig:
    """One model service as a GPU lease holder."""

    # Bytes the lease asks for, in GiB: weights + cache + workspace (GPU engines); on CPU, the size accounted on
    # the virtual card so time-sharing can be exercised without a GPU.
    declared_gb: float = 1.0
    priority: str = "INTERACTIVE"  # BATCH, INTERACTIVE or REALTIME
    # Measured cost of moving the model on and off the card (the router weighs it when routing and revoking).
    swap_in_ms: int = 0
    swap_out_ms: int = 0
    # Keep the model on the card for good: its lease is never revoked (its renewals always say busy). For an engine
    # that cannot free its device memory; the card space stays taken, so size the other holders around it.
    pinned: bool = False

    def validate(self, path: str) -> None:
        _check(path, "declared_gb", self.declared_gb > 0, f"must be > 0, got {self.declared_gb}")
        _check(
            path,
            "priority",
            self.priority in ("BATCH", "INTERACTIVE", "REALTIME"),
            f"must be BATCH, INTERACTIVE or REALTIME, got {self.priority!r}",
        )
        _check(path, "swap_in_ms", self.swap_in_ms >= 0, "must be >= 0")
        _check(path, "swap_out_ms", self.swap_out_ms >= 0, "must be >= 0")


def _default_holders() -> dict[str, HolderConfig]:
    # Sizes from DESIGN §4 (FP16 estimates): MOSS-Speech ~15-21 GB, CosyVoice3 ~5-9 GB, Qwen3-TTS-0.6B ~3.4 GB.
    return {
        "moss_sts": HolderConfig(declared_gb=20, priority="REALTIME", swap_in_ms=8000, swap_out_ms=2000),
        "cosyvoice_tts": HolderConfig(declared_gb=8, priority="INTERACTIVE", swap_in_ms=3000, swap_out_ms=800),
        "qwen_tts": HolderConfig(declared_gb=3.4, priority="INTERACTIVE", swap_in_ms=2000, swap_out_ms=500),
        "asr": HolderConfig(declared_gb=2, priority="INTERACTIVE", swap_in_ms=1500, swap_out_ms=300),
    }


@dataclass
class ResidencyConfig:
    """Model services holding GPU leases from the router (docs/leases.md)."""

    # GPU engines always hold a lease before their weights go on the card. true: CPU engines hold one too, for
    # their declared size on the router's virtual card (time-sharing without a GPU).
    enabled: bool = False
    # Where model services ask for GPU leases: host:port of their card's lease authority (several GPU nodes,
    # docs/scale.md); empty: the router's GpuLeases (one card, the default).
    lease_authority: str = ""
    # Longest wait for a lease before a load fails with UNAVAILABLE.
    acquire_timeout_seconds: float = 120.0
    # Requests that may wait for a model to be loaded back; more get RESOURCE_EXHAUSTED with a retry hint.
    max_waiting_requests: int = 8
    services: dict[str, HolderConfig] = field(default_factory=_default_holders)

    def validate(self, path: str) -> None:
        _check(
            path,
            "lease_authority",
            not self.lease_authority or is_host_port(self.lease_authority),
            f"must be host:port (or empty: the router), got {self.lease_authority!r}",
        )
        _check(path, "acquire_timeout_seconds", self.acquire_timeout_seconds > 0, "must be > 0")
        _check(path, "max_waiting_requests", self.max_waiting_requests >= 0, "must be >= 0")
        for name, holder in self.services.items():
            _check(
                f"{path}.services",
                name,
                name in MODEL_SERVICES,
                f"is not a model service ({', '.join(MODEL_SERVICES)})",
            )
            holder.validate(f"{path}.services.{name}")


@dataclass
class SecurityConfig:
    """Transport security and access control (docs/security.md). Everything off by default (loopback fleet)."""

    # PEM files. tls_cert + tls_key: every fleet port listens with TLS. tls_ca: the fleet CA clients verify with.
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    # Model services require client certificates signed by tls_ca (mutual TLS between router and services).
    mtls: bool = False
    # Accepted on the router's public RPCs as "authorization: Bearer <token>"; empty = no token needed.
    bearer_tokens: list[str] = field(default_factory=list)
    # Shared secret of fleet services: GpuLeases, ModelControl and model services' ports need it when set.
    fleet_token: str = ""

    def validate(self, path: str) -> None:
        _check(path, "tls_key", bool(self.tls_cert) == bool(self.tls_key), "tls_cert and tls_key go together")
        _check(
            path,
            "tls_ca",
            not self.mtls or bool(self.tls_ca and self.tls_cert),
            "mtls needs tls_ca, tls_cert and tls_key",
        )
        _check(path, "bearer_tokens", all(t.strip() for t in self.bearer_tokens), "tokens must not be empty")


@dataclass
class RestartConfig:
    """How `voicefleet up` supervises its members: like compose `restart: unless-stopped` / systemd
    `Restart=on-failure` with `StartLimitBurst` (docs/architecture.md#supervisor)."""

    # on-failure: a member that exits while the fleet is not stopping is started again; no: it stays down.
    policy: str = "on-failure"
    # Delay before a restart: backoff_initial_seconds, doubled for each earlier exit inside the crash-loop window,
    # capped at backoff_max_seconds.
    backoff_initial_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    # crash_loop_exits exits within crash_loop_window_seconds: the member is given up (reported; the rest stay up).
    crash_loop_exits: int = 5
    crash_loop_window_seconds: float = 120.0

    def validate(self, path: str) -> None:
        _check(path, "policy", self.policy in ("on-failure", "no"), f"must be on-failure or no, got {self.policy!r}")
        _check(path, "backoff_initial_seconds", 0 < self.backoff_initial_seconds <= 60, "must be > 0 and <= 60")
        _check(
            path,
            "backoff_max_seconds",
            self.backoff_initial_seconds <= self.backoff_max_seconds <= 3600,
            f"must be backoff_initial_seconds ({self.backoff_initial_seconds})..3600, got {self.backoff_max_seconds}",
        )
        _check(path, "crash_loop_exits", 1 <= self.crash_loop_exits <= 1000, "must be 1..1000")
        _check(path, "crash_loop_window_seconds", 0 < self.crash_loop_window_seconds <= 86_400, "must be > 0")


@dataclass
class FleetConfig:
    """What `voicefleet up` starts, in this order (the router once its backends are up; the gateway, its HTTP front
    door, after it)."""

    services: list[str] = field(
        default_factory=lambda: ["cosyvoice_tts", "qwen_tts", "asr", "brain", "moss_sts", "router", "gateway"]
    )
    # Seconds to wait for every service to report SERVING.
    start_timeout_seconds: float = 120.0
    restart: RestartConfig = field(default_factory=RestartConfig)
    # The supervisor's own HTTP port on 127.0.0.1: /metrics (restarts per member) and /members (what
    # `voicefleet status` shows: state, restarts, last exit, uptime). 0: not served.
    supervisor_port: int = 9300

    def validate(self, path: str) -> None:
        known = (*MODEL_SERVICES, "brain", "router", "gateway", "lease_authority")
        for name in self.services:
            _check(path, "services", name in known, f"unknown service {name!r}; known: {', '.join(known)}")
        _check(path, "start_timeout_seconds", self.start_timeout_seconds > 0, "must be > 0")
        self.restart.validate(f"{path}.restart")
        _check(path, "supervisor_port", 0 <= self.supervisor_port <= 65535, "must be 0..65535")


@dataclass
class Config:
    fleet: FleetConfig = field(default_factory=FleetConfig)
    router: RouterConfig = field(default_factory=lambda: RouterConfig(port=50051, metrics_port=9301))
    cosyvoice_tts: CosyVoiceTtsConfig = field(default_factory=lambda: CosyVoiceTtsConfig(port=50052, metrics_port=9302))
    qwen_tts: QwenTtsConfig = field(default_factory=lambda: QwenTtsConfig(port=50053, metrics_port=9303))
    asr: AsrServiceConfig = field(default_factory=lambda: AsrServiceConfig(port=50054, metrics_port=9304))
    moss_sts: MossStsConfig = field(default_factory=lambda: MossStsConfig(port=50055, metrics_port=9305))
    brain: BrainConfig = field(default_factory=BrainConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    lease_authority: LeaseAuthorityConfig = field(
        default_factory=lambda: LeaseAuthorityConfig(port=50056, metrics_port=9306)
    )
    residency: ResidencyConfig = field(default_factory=ResidencyConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def validate(self) -> None:
        for f in dataclasses.fields(self):
            getattr(self, f.name).validate(f.name)
        if not self.router.backends:
            self.router.backends = {
                name: getattr(self, name).address
                for name in self.fleet.services
                if name != "router" and name in MODEL_SERVICES and hasattr(self, name)
            }


def load_config(path: str | os.PathLike | None = None, env: typing.Mapping[str, str] | None = None) -> Config:
    """Read the file, apply env overrides, validate. Raises ConfigError naming the bad field."""
    env = os.environ if env is None else env
    path = Path(path or env.get("VOICEFLEET_CONFIG") or DEFAULT_CONFIG_PATH)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping of sections")
    _apply_env(raw, env)
    config = _build(Config, raw, "")
    config.validate()
    return config


def _apply_env(raw: dict, env: typing.Mapping[str, str]) -> None:
    for key, value in env.items():
        if not key.startswith(ENV_PREFIX) or key in NOT_FIELDS:
            continue
        parts = [p.lower() for p in key[len(ENV_PREFIX) :].split("__")]
        node = raw
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{key}: {'.'.join(parts)} does not name a config field")
        node[parts[-1]] = yaml.safe_load(value) if value != "" else ""


def _build(cls: type, raw: Any, path: str, base: Any = None) -> Any:
    """``cls`` from ``raw``, over ``base`` (the enclosing default, e.g. router's port 50051) or cls()."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path or 'config'}: must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(f"{where}: unknown field; known fields: {', '.join(sorted(fields))}")
    result = copy.deepcopy(base) if base is not None else cls()
    for name, value in raw.items():
        where = f"{path}.{name}" if path else name
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            setattr(result, name, _build(tp, value, where, base=getattr(result, name)))
        else:
            setattr(result, name, _coerce(tp, value, where))
    return result


def _coerce(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: must be a mapping, got {value!r}")
        _, vt = typing.get_args(tp)
        return {str(k): _coerce(vt, v, f"{path}.{k}") for k, v in value.items()}
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{path}: must be a list, got {value!r}")
        (it,) = typing.get_args(tp)
        return [_coerce(it, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin in (typing.Union, types.UnionType):
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: must be true or false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: must be a number, got {value!r}")
        if tp is int and float(value) != int(value):
            raise ConfigError(f"{path}: must be a whole number, got {value!r}")
        return tp(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{path}: must be a string, got {value!r}")
        return str(value)
    return value
