"""A backend one model service calls directly, with no router in between (moss_sts's dialogue listening through the
asr service): one channel to one address, and no health view of its own.

The router keeps health per backend to route around a bad one (services/router/backends.py); a model service has
one place to send the call, so there is nothing to route around: the channel reconnects by itself, and each call
says whether the backend answered (a failed turn, which the dialogue reports and survives).
"""

from __future__ import annotations

from services.common import security

# A restarted backend is found again within ~2 s, not gRPC's default 2 min backoff (as the router's channels).
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]


class DirectBackend:
    """Implements services.remote.base.Backend over one fleet channel (TLS and the fleet token when configured)."""

    def __init__(self, name: str, address: str):
        self.name = name
        self.address = address
        self.channel = security.fleet_channel(address, options=CHANNEL_OPTIONS)

    def usable(self) -> bool:
        return True  # the call itself tells (UNAVAILABLE while the backend is down)

    def describe(self) -> str:
        return f"{self.name} ({self.address})"

    def record_success(self) -> None:
        pass

    def record_failure(self, reason: str = "failures") -> None:
        pass
