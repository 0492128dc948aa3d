"""The router's backends: one channel each, health followed with grpc.health.v1 Watch."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import metrics, security
from voice.v1 import fleet_pb2

log = logging.getLogger("voicefleet.router.backends")

# What each backend name serves; the router routes a gRPC service only to backends that have it.
SERVES = {
    "cosyvoice_tts": ("voice.v1.Synthesizer", "voice.v1.ModelControl"),
    "qwen_tts": ("voice.v1.Synthesizer", "voice.v1.ModelControl"),
    "moss_sts": ("voice.v1.Conversation", "voice.v1.Synthesizer", "voice.v1.ModelControl"),
    "asr": ("voice.v1.Recognizer", "voice.v1.ModelControl"),
}

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 8 * 1024 * 1024),
    ("grpc.max_send_message_length", 8 * 1024 * 1024),
    # A restarted backend is found again within ~2 s, not the default 2 min backoff.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]

SERVING = fleet_pb2.BACKEND_HEALTH_SERVING
NOT_SERVING = fleet_pb2.BACKEND_HEALTH_NOT_SERVING
UNREACHABLE = fleet_pb2.BACKEND_HEALTH_UNREACHABLE
UNKNOWN = fleet_pb2.BACKEND_HEALTH_UNSPECIFIED


class Backend:
    def __init__(self, name: str, address: str):
        self.name = name
        self.address = address
        self.channel = security.fleet_channel(address, options=CHANNEL_OPTIONS)
        self.health = UNKNOWN
        self.changed_at = time.monotonic()
        self.consecutive_failures = 0
        self._first_answer = asyncio.Event()
        self._watch_task: asyncio.Task | None = None

    @property
    def serves(self) -> tuple[str, ...]:
        return SERVES.get(self.name, ())

    def usable(self) -> bool:
        """Worth trying: serving, or not known yet (the call itself will tell)."""
        return self.health in (SERVING, UNKNOWN)

    def describe(self) -> str:
        return f"{self.name} ({self.address}) is {fleet_pb2.BackendHealth.Name(self.health).removeprefix('BACKEND_HEALTH_')}"

    def record_success(self) -> None:
        self.consecutive_failures = 0

    def record_failure(self) -> None:
        self.consecutive_failures += 1

    def _set(self, health: int) -> None:
        if health != self.health:
            log.info("%s -> %s", self.name, fleet_pb2.BackendHealth.Name(health))
            self.health = health
            self.changed_at = time.monotonic()
        metrics.BACKEND_UP.labels(self.name).set(1 if health == SERVING else 0)
        self._first_answer.set()

    def start(self) -> None:
        self._watch_task = asyncio.create_task(self._watch(), name=f"watch-{self.name}")

    async def first_answer(self, wait_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_answer.wait(), wait_s)

    async def _watch(self) -> None:
        stub = health_pb2_grpc.HealthStub(self.channel)
        backoff = 0.2
        while True:
            try:
                async for answer in stub.Watch(health_pb2.HealthCheckRequest(service="")):
                    self._set(SERVING if answer.status == health_pb2.HealthCheckResponse.SERVING else NOT_SERVING)
                    backoff = 0.2
                self._set(NOT_SERVING)  # the server ended the watch: it is shutting down
            except grpc.aio.AioRpcError as e:
                self._set(UNREACHABLE if e.code() == grpc.StatusCode.UNAVAILABLE else NOT_SERVING)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def close(self) -> None:
        if self._watch_task:
            self._watch_task.cancel()
        await self.channel.close()

    def to_proto(self) -> fleet_pb2.BackendStatus:
        return fleet_pb2.BackendStatus(
            name=self.name,
            address=self.address,
            health=self.health,
            consecutive_failures=self.consecutive_failures,
            services=list(self.serves),
        )
