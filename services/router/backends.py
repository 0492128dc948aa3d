"""The router's backends: one channel each; health from grpc.health.v1 Watch plus passive outlier detection.

A backend is *routable* (the policy sends it requests) when its Watch says SERVING and it is not recovering.
It stops being routable when

* its Watch says NOT_SERVING or the connection drops (UNREACHABLE), or
* it is *ejected*: ``eject_after_failures`` consecutive failed calls (UNAVAILABLE, INTERNAL, a backend that sent no
  audio in time) or failed deep probes while its health says SERVING (FAILED_PRECONDITION "still loading" is no
  failure; nor is anything while it is NOT_SERVING or unreachable: it is out of the route already). Ejection lasts ``ejection_seconds``, doubling with each ejection up to
  ``max_ejection_seconds``; a backend healthy for ``forget_ejections_seconds`` starts short again.

Either way it then *recovers* before it is routable again: once SERVING and past its ejection, the router sends it a
real tiny request (a short Synthesize; an empty recognition stream for asr) every ``probe_interval_seconds``, and only
``recovery_probes`` successes in a row make it routable. A failed probe ejects it again, for longer. This is the
hysteresis that keeps a flapping backend from flapping the route: every bad moment restarts the count.

A backend that has never been routable (the router just started) becomes routable at its first SERVING: services
report SERVING only after warm-up.

Deep probe (``deep_probe`` backends, default moss_sts): while routable, a short synthesis every
``deep_probe_interval_seconds`` must finish within ``deep_probe_deadline_ms``; a miss counts as a failed call.
SERVING alone says the process is up, not that the model answers. Probes respect GPU time-sharing: a backend whose
model is off its device (ModelControl says it is not RESIDENT) gets no deep probe, and its recovery probe is
ModelControl answering, so a probe never pulls a swapped-out model back onto the card.

State changes take ``now`` from an injectable clock so the rules are unit-tested without sleeping
(tests/router/test_router_health.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import metrics, security
from services.common.config.router import RouterHealthConfig
from services.common.health import PUBLIC_SERVICES
from voice.v1 import (
    audio_pb2,
    fleet_pb2,
    gpu_pb2,
    gpu_pb2_grpc,
    recognizer_pb2,
    recognizer_pb2_grpc,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)

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

# A backend with replicas on several nodes is one gRPC target naming them all (dns:///name:port, e.g. a Kubernetes
# headless Service, or ipv4:a:port,b:port): calls go round-robin to the replicas whose own grpc.health says SERVING
# (gRPC's client-side health checking), so a replica that stops serving or dies is out of the rotation at once, in
# every router, while the others keep serving (docs/scale.md#routers).
REPLICAS_SERVICE_CONFIG = json.dumps(
    {"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}
)


def names_replicas(address: str) -> bool:
    return address.startswith(("dns:", "ipv4:", "ipv6:"))


SERVING = fleet_pb2.BACKEND_HEALTH_SERVING
NOT_SERVING = fleet_pb2.BACKEND_HEALTH_NOT_SERVING
UNREACHABLE = fleet_pb2.BACKEND_HEALTH_UNREACHABLE
EJECTED = fleet_pb2.BACKEND_HEALTH_EJECTED
UNKNOWN = fleet_pb2.BACKEND_HEALTH_UNSPECIFIED

PROBE_RECOGNIZE_MS = 200  # silence sent by the asr recovery probe


def health_name(health: int) -> str:
    return fleet_pb2.BackendHealth.Name(health).removeprefix("BACKEND_HEALTH_")


# Why a backend gets ejected (voicefleet_router_ejections_total's reason): consecutive failed calls, a first-audio
# timeout, a failed recovery probe, a failed deep probe.
EJECTION_REASONS = ("failures", "no_audio", "probe", "deep_probe")


class Backend:
    def __init__(
        self,
        name: str,
        address: str,
        health: RouterHealthConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        connect: bool = True,
    ):
        self.name = name
        self.address = address
        self.config = health or RouterHealthConfig()
        self.clock = clock
        self.replicas = names_replicas(address)
        options = CHANNEL_OPTIONS + ([("grpc.service_config", REPLICAS_SERVICE_CONFIG)] if self.replicas else [])
        self.channel = security.fleet_channel(address, options=options) if connect else None
        self.watch = UNKNOWN  # what grpc.health.v1 Watch says
        self.changed_at = clock()
        self.consecutive_failures = 0
        self.ejections = 0  # ejections in a row (the next one lasts longer); forgotten after a healthy spell
        self.total_ejections = 0
        self.ejected_until = float("-inf")
        self.recovering = False  # must pass recovery probes before it is routable again
        self.good_probes = 0
        self.ever_routable = False
        self.routable_since = float("-inf")
        self.last_deep_probe = clock()
        self.deep = name in self.config.deep_probe
        # Every ejection series exists at 0 from the start, so a rate() on the dashboard sees the first ejection.
        for reason in EJECTION_REASONS:
            metrics.BACKEND_EJECTIONS.labels(name, reason)
        self._routable = False
        self._down = asyncio.Event()  # set while not routable (sessions on this backend wait for it)
        self._down.set()
        self._first_answer = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._listeners: list[Callable[[], None]] = []  # told when routable() changes

    def on_change(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    @property
    def serves(self) -> tuple[str, ...]:
        return SERVES.get(self.name, ())

    # --- what the policy asks ---------------------------------------------------------------------------------
    @property
    def health(self) -> int:
        """As GetFleetStatus shows it: what Watch says, or EJECTED while SERVING under an ejection."""
        return EJECTED if self.watch == SERVING and self.ejected() else self.watch

    def ejected(self, now: float | None = None) -> bool:
        return (self.clock() if now is None else now) < self.ejected_until

    def ejected_for(self, now: float | None = None) -> float:
        return max(0.0, self.ejected_until - (self.clock() if now is None else now))

    def routable(self) -> bool:
        """The policy routes here: SERVING, not ejected, not recovering."""
        return self._routable

    def usable(self) -> bool:
        """Worth trying when nothing better is left: serving or not known yet (the call itself will tell), even if
        ejected or recovering. UNREACHABLE / NOT_SERVING backends are not tried at all."""
        return self.watch in (SERVING, UNKNOWN)

    def describe(self) -> str:
        return f"{self.name} ({self.address}) is {self.state_detail()}"

    def state_detail(self) -> str:
        now = self.clock()
        if self.watch != SERVING:
            return health_name(self.watch)
        if self.ejected(now):
            return f"EJECTED for {self.ejected_for(now):.1f}s more (ejection {self.ejections} in a row)"
        if self.recovering:
            return f"RECOVERING ({self.good_probes} of {self.config.recovery_probes} probes ok)"
        return "SERVING"

    async def wait_unroutable(self) -> None:
        await self._down.wait()

    # --- state changes (pure: ``now`` from the clock) ---------------------------------------------------------
    def _update(self) -> None:
        routable = self.watch == SERVING and not self.recovering
        if routable != self._routable:
            self._routable = routable
            if routable:
                self.ever_routable = True
                self.routable_since = self.clock()
                self._down.clear()
            else:
                self._down.set()
            log.info("%s is %s", self.name, "routable" if routable else f"not routable: {self.state_detail()}")
            for callback in self._listeners:
                callback()
        metrics.BACKEND_ROUTABLE.labels(self.name).set(1 if routable else 0)

    def set_watch(self, health: int) -> None:
        if health != self.watch:
            log.info("%s health -> %s", self.name, health_name(health))
            if health != SERVING and self.ever_routable:
                self._start_recovery()  # back from any outage only through recovery probes
            self.watch = health
            self.changed_at = self.clock()
        metrics.BACKEND_UP.labels(self.name).set(1 if health == SERVING else 0)
        self._update()
        self._first_answer.set()

    def _start_recovery(self) -> None:
        self.recovering = True
        self.good_probes = 0

    def record_success(self) -> None:
        self.consecutive_failures = 0

    def record_failure(self, reason: str = "failures") -> None:
        """A failed call (UNAVAILABLE, INTERNAL, or no audio in time) or a failed deep probe. Counted only while its
        health says SERVING: a backend that is down or still warming up is out of the route already, and calls that
        reach it then (a ListVoices to every backend) are no evidence of an outlier."""
        if self.watch != SERVING:
            return
        self.consecutive_failures += 1
        if self.consecutive_failures >= self.config.eject_after_failures and not self.ejected():
            self.eject(reason)

    def eject(self, reason: str) -> None:
        now = self.clock()
        c = self.config
        if self._routable and now - self.routable_since >= c.forget_ejections_seconds:
            self.ejections = 0  # healthy for long: this is a new problem, start short
        self.ejections += 1
        self.total_ejections += 1
        seconds = min(c.ejection_seconds * 2 ** (self.ejections - 1), c.max_ejection_seconds)
        self.ejected_until = now + seconds
        self.consecutive_failures = 0
        self._start_recovery()
        metrics.BACKEND_EJECTIONS.labels(self.name, reason).inc()
        log.warning("%s ejected for %.1fs (%s; ejection %d in a row)", self.name, seconds, reason, self.ejections)
        self._update()

    def probe_result(self, ok: bool) -> None:
        """A recovery probe finished."""
        if not ok:
            self.eject("probe")
            return
        self.good_probes += 1
        self.consecutive_failures = 0
        if self.good_probes >= self.config.recovery_probes:
            self.recovering = False
            self.good_probes = 0
            log.info("%s recovered (%d probes in a row)", self.name, self.config.recovery_probes)
        self._update()

    def probe_due(self, now: float) -> str | None:
        """Which probe to send now: "recovery", "deep" or None."""
        if self.recovering:
            return "recovery" if self.watch == SERVING and now >= self.ejected_until else None
        if self.deep and self._routable and now - self.last_deep_probe >= self.config.deep_probe_interval_seconds:
            return "deep"
        return None

    # --- the tasks --------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._watch(), name=f"watch-{self.name}"),
            asyncio.create_task(self._probe_loop(), name=f"probe-{self.name}"),
        ]

    async def first_answer(self, wait_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_answer.wait(), wait_s)

    async def _watch(self) -> None:
        stub = health_pb2_grpc.HealthStub(self.channel)
        backoff = 0.2
        while True:
            try:
                async for answer in stub.Watch(health_pb2.HealthCheckRequest(service="")):
                    serving = answer.status == health_pb2.HealthCheckResponse.SERVING
                    if not serving and await self._another_replica_serving(stub):
                        break  # this replica stopped; watch again through the channel, which picks a serving one
                    self.set_watch(SERVING if serving else NOT_SERVING)
                    backoff = 0.2
                else:
                    if not await self._another_replica_serving(stub):
                        self.set_watch(NOT_SERVING)  # the server ended the watch: it is shutting down
            except grpc.aio.AioRpcError as e:
                if not await self._another_replica_serving(stub):
                    self.set_watch(UNREACHABLE if e.code() == grpc.StatusCode.UNAVAILABLE else NOT_SERVING)
            # Watch again as soon as the channel connects (its own reconnect backoff paces the attempts), so a
            # backend that comes up is seen at once, not a sleep later; at most ``backoff`` between tries.
            await asyncio.sleep(0.05)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.channel.channel_ready(), backoff)
            backoff = min(backoff * 2, 2.0)

    async def _another_replica_serving(self, stub) -> bool:
        """For a backend with replicas: the watched replica stopped or died; is another one serving? (A Check goes
        only to replicas gRPC's health checking still counts as serving; the dead one may take a moment to drop.)"""
        if not self.replicas:
            return False
        for _ in range(3):
            with contextlib.suppress(grpc.aio.AioRpcError):
                answer = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            await asyncio.sleep(0.1)
        return False

    async def _probe_loop(self) -> None:
        c = self.config
        tick = min(c.probe_interval_seconds, c.deep_probe_interval_seconds) if self.deep else c.probe_interval_seconds
        while True:
            await asyncio.sleep(tick)
            kind = self.probe_due(self.clock())
            if kind is None:
                continue
            if kind == "deep":
                self.last_deep_probe = self.clock()
            timeout = (c.deep_probe_deadline_ms if kind == "deep" else c.probe_timeout_ms) / 1000
            resident = await self.resident(timeout)
            if resident is False:
                # Its model is off the device (a GPU lease went to another model): a synthesis would pull it back
                # and undo the time-sharing. No deep probe then; a recovery probe is ModelControl answering.
                if kind == "deep":
                    continue
                ok = True
            else:
                ok = await self.probe(timeout)
            if ok is None:
                continue  # still loading (FAILED_PRECONDITION): neither a pass nor an outlier failure
            metrics.ROUTER_PROBES.labels(self.name, kind, "ok" if ok else "failed").inc()
            if kind == "recovery" and self.recovering:
                self.probe_result(ok)
            elif kind == "deep":
                if ok:
                    self.record_success()
                else:
                    log.warning("%s failed its deep probe (a short synthesis within %.1fs)", self.name, timeout)
                    self.record_failure("deep_probe")

    async def resident(self, timeout_s: float) -> bool | None:
        """Whether its model is on its device (ModelControl.GetModelStatus); None when it does not say."""
        if "voice.v1.ModelControl" not in self.serves:
            return None
        try:
            reply = await gpu_pb2_grpc.ModelControlStub(self.channel).GetModelStatus(
                gpu_pb2.GetModelStatusRequest(request_id="router-probe"), timeout=timeout_s
            )
        except grpc.aio.AioRpcError:
            return None  # not served (UNIMPLEMENTED) or not answering: the probe itself will tell
        return reply.status.residency == gpu_pb2.RESIDENCY_RESIDENT

    async def probe(self, timeout_s: float) -> bool | None:
        """A real tiny request that must finish OK within ``timeout_s``: a short Synthesize (TTS backends) or a
        recognition stream of a little silence (asr). None when the backend says it is still loading."""
        try:
            if "voice.v1.Synthesizer" in self.serves:
                stub = synthesizer_pb2_grpc.SynthesizerStub(self.channel)
                request = synthesizer_pb2.SynthesizeRequest(request_id="router-probe", text=self.config.probe_text)
                audio = 0
                async for reply in stub.Synthesize(request, timeout=timeout_s):
                    audio += len(reply.audio.data)
                return audio > 0
            if "voice.v1.Recognizer" in self.serves:
                stub = recognizer_pb2_grpc.RecognizerStub(self.channel)
                rate = 16_000
                config = recognizer_pb2.RecognitionConfig(
                    input_format=audio_pb2.AudioFormat(
                        encoding=audio_pb2.AUDIO_ENCODING_LINEAR_PCM_S16LE, sample_rate_hz=rate, channels=1
                    )
                )

                def requests():
                    yield recognizer_pb2.StreamingRecognizeRequest(request_id="router-probe", config=config)
                    yield recognizer_pb2.StreamingRecognizeRequest(audio=bytes(rate * PROBE_RECOGNIZE_MS // 1000 * 2))

                async for _ in stub.StreamingRecognize(requests(), timeout=timeout_s):
                    pass
                return True
            return self.watch == SERVING
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                log.info("%s probe: not ready yet (%s)", self.name, e.details())
                return None
            log.info("%s probe failed: %s %s", self.name, e.code().name, e.details())
            return False

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.channel is not None:
            await self.channel.close()

    def to_proto(self) -> fleet_pb2.BackendStatus:
        now = self.clock()
        return fleet_pb2.BackendStatus(
            name=self.name,
            address=self.address,
            health=self.health,
            ejected_for_ms=round(self.ejected_for(now) * 1000),
            consecutive_failures=self.consecutive_failures,
            services=list(self.serves),
            routable=self._routable,
            ejections=self.total_ejections,
            detail=self.state_detail(),
        )


class ServiceReadiness:
    """Per public service name: SERVING while one of its routes is routable, a route being the backends a call needs
    all of (one backend; for Conversation also the fallback cascade: asr and its TTS backend). Follows the backends'
    health as it changes (services/common/health.py publishes it; Watch sees every change)."""

    names = PUBLIC_SERVICES

    def __init__(self, backends: dict[str, Backend], extra_routes: dict[str, list[list[Backend]]] | None = None):
        self.backends = backends
        self.routes: dict[str, list[list[Backend]]] = {
            name: [[b] for b in backends.values() if name in b.serves] for name in PUBLIC_SERVICES
        }
        for name, routes in (extra_routes or {}).items():
            self.routes[name] += routes

    def ready(self, name: str) -> bool:
        return any(all(b.routable() for b in route) for route in self.routes.get(name, ()))

    def why_not(self, name: str) -> str:
        routes = self.routes.get(name)
        if not routes:
            return "no backend serves it; add one to fleet.services or router.backends"
        return "; ".join(" + ".join(b.describe() for b in route) for route in routes)

    def on_change(self, callback: Callable[[], None]) -> None:
        for b in self.backends.values():
            b.on_change(callback)
