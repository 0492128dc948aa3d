"""The ``fleet`` config section: what `voicefleet up` starts and how it supervises it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from services.common.config.base import MODEL_SERVICES, Names, Section, bounded, check

MEMBERS = (*MODEL_SERVICES, "brain", "router", "gateway", "lease_authority")


class RestartConfig(Section):
    """How `voicefleet up` supervises its members: like compose `restart: unless-stopped` / systemd
    `Restart=on-failure` with `StartLimitBurst` (docs/architecture.md#supervisor)."""

    # on-failure: a member that exits while the fleet is not stopping is started again; no: it stays down.
    policy: Literal["on-failure", "no"] = "on-failure"
    # Delay before a restart: backoff_initial_seconds, doubled for each earlier exit inside the crash-loop window,
    # capped at backoff_max_seconds.
    backoff_initial_seconds: float = bounded(0.5, gt=0, le=60, says="must be > 0 and <= 60")
    backoff_max_seconds: float = 30.0
    # crash_loop_exits exits within crash_loop_window_seconds: the member is given up (reported; the rest stay up).
    crash_loop_exits: int = bounded(5, ge=1, le=1000)
    crash_loop_window_seconds: float = bounded(120.0, gt=0, le=86_400, says="must be > 0")

    @model_validator(mode="after")
    def _backoff(self):
        check(
            "backoff_max_seconds",
            self.backoff_initial_seconds <= self.backoff_max_seconds <= 3600,
            f"must be backoff_initial_seconds ({self.backoff_initial_seconds})..3600, got {self.backoff_max_seconds}",
        )
        return self


class FleetConfig(Section):
    """What `voicefleet up` starts, in this order (the router once its backends are up; the gateway, its HTTP front
    door, after it)."""

    services: Names = Field(
        default_factory=lambda: ["cosyvoice_tts", "qwen_tts", "asr", "brain", "moss_sts", "router", "gateway"]
    )
    # Seconds to wait for every service to report SERVING.
    start_timeout_seconds: float = bounded(120.0, gt=0)
    restart: RestartConfig = Field(default_factory=RestartConfig)
    # The supervisor's own HTTP port on 127.0.0.1: /metrics (restarts per member) and /members (what
    # `voicefleet status` shows: state, restarts, last exit, uptime). 0: not served.
    supervisor_port: int = bounded(9300, ge=0, le=65535)

    @field_validator("services")
    @classmethod
    def _known(cls, services: list[str]) -> list[str]:
        for name in services:
            if name not in MEMBERS:
                raise ValueError(f"unknown service {name!r}; known: {', '.join(MEMBERS)}")
        return services
