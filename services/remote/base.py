"""What every remote engine shares: the backend it calls and the deadline it gives that call.

Deadlines: a call to a backend gets the caller's remaining time minus the router's margin, so the router can still
answer DEADLINE_EXCEEDED itself.
"""

from __future__ import annotations

from typing import Protocol

import grpc

from services.common.errors import DeadlineExceeded


class Backend(Protocol):
    """What a remote engine needs of the backend it calls (the router's ``backends.Backend``)."""

    name: str
    channel: grpc.aio.Channel | None

    def usable(self) -> bool: ...
    def describe(self) -> str: ...
    def record_success(self) -> None: ...
    def record_failure(self, reason: str = "failures") -> None: ...


def backend_timeout(time_remaining: float | None, margin_s: float, backend: str) -> float | None:
    """The deadline for a call to ``backend``: the caller's remaining time less the router's margin, so the router
    can still answer DEADLINE_EXCEEDED itself. None when the caller set no deadline."""
    if time_remaining is None:
        return None
    timeout = time_remaining - margin_s
    if timeout <= 0:
        raise DeadlineExceeded(f"deadline too short to call {backend}; allow more time")
    return timeout
