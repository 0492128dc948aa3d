"""What a service's grpc.health.v1 answers, and how it stays true after warm-up.

Names: "" and one per gRPC service the process serves (``voice.v1.Synthesizer``, ...). Every name is NOT_SERVING
until warm-up is done. After that:

* a model service stays SERVING only while its **deep probe** passes: when no stream has sent anything for
  ``health_probe_interval_seconds`` (traffic that produces output is proof enough), the service sends its engine a
  tiny real request (a short synthesis; a little silence through a recognition stream). ``health_probe_failures``
  probes in a row that fail or miss ``health_probe_deadline_ms`` turn every name NOT_SERVING (a wedged engine); the
  next probe that passes turns them SERVING again. The router watches "" and ejects / re-admits the backend.
* the router reports **readiness per service name**: ``voice.v1.Synthesizer``, ``voice.v1.Recognizer`` and
  ``voice.v1.Conversation`` are SERVING only while a backend (or, for Conversation, the fallback cascade) that
  serves them is routable, and follow its backends' health as it changes, so Watch works. Its "" is its own liveness.

Chaos drills (``chaos_hang_file``): while that file exists, every engine call of the service waits before it
starts, as a wedged engine would. Operators use it to rehearse what the deep probe, the router's ejection and
failover do (docs/architecture.md#health); the engines themselves know nothing about it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from grpc_health.v1 import health, health_pb2

from services.common import metrics, rpc
from services.common.engines import AsrEngine, RecognitionOptions, SynthesisOptions, TtsEngine

log = logging.getLogger("voicefleet.health")

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
PROBE_REQUEST_ID = "health-probe"
PROBE_TEXT = "Hi."
PROBE_SILENCE_MS = 200
# Liveness, separate from readiness: SERVING from the moment the port is bound until shutdown, whatever warm-up or
# the deep probe say (a model still loading, or a wedged engine the readiness already routes around, is no reason to
# restart the process; an event loop that cannot answer this is). Kubernetes' livenessProbe asks this name.
LIVENESS = "voicefleet.liveness"
# The router's public services: its health reports each one's readiness (services/router/backends.py).
PUBLIC_SERVICES = ("voice.v1.Synthesizer", "voice.v1.Recognizer", "voice.v1.Conversation")


class Readiness(Protocol):
    """Readiness a service computes itself for some of its names (the router: from its backends' health)."""

    names: tuple[str, ...]

    def ready(self, name: str) -> bool: ...

    def why_not(self, name: str) -> str: ...

    def on_change(self, callback: Callable[[], None]) -> None: ...


class Health:
    """Publishes grpc.health.v1 statuses from what is known: warmed up, deep probe passing, per-name readiness."""

    def __init__(self, service: str, servicer: health.aio.HealthServicer, names: Iterable[str]):
        self.service = service
        self.servicer = servicer
        self.names = tuple(names)
        self.readiness: Readiness | None = None
        self.started = False
        self.probe_ok = True
        self._published: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self._publishing: set[asyncio.Task] = set()

    def follow(self, readiness: Readiness) -> None:
        """Let ``readiness`` decide its names, republishing whenever it says something changed."""
        self.readiness = readiness

        def changed() -> None:
            task = asyncio.get_running_loop().create_task(self.publish())
            self._publishing.add(task)
            task.add_done_callback(self._publishing.discard)

        readiness.on_change(changed)

    def status(self, name: str) -> int:
        live = self.started and self.probe_ok
        if name and live and self.readiness is not None and name in self.readiness.names:
            return SERVING if self.readiness.ready(name) else NOT_SERVING
        return SERVING if live else NOT_SERVING

    async def publish(self) -> None:
        # One publisher at a time, each reading the state when it runs: the last one leaves the latest truth.
        async with self._lock:
            for name in ("", *self.names):
                status = self.status(name)
                if self._published.get(name) == status:
                    continue
                if name in self._published and self.readiness is not None and name in self.readiness.names:
                    detail = "" if status == SERVING else f" ({self.readiness.why_not(name)})"
                    log.info("%s %s -> %s%s", self.service, name, _name(status), detail)
                self._published[name] = status
                await self.servicer.set(name, status)


class HealthServicer(health.aio.HealthServicer):
    """grpc.health.v1 with ``List`` too (grpcio-health-checking's asyncio servicer leaves it unimplemented, which
    answers with a logged traceback)."""

    async def List(self, request, context):
        # _server_status: the library's own table of what Check answers (grpcio-health-checking 1.85).
        statuses = {name: health_pb2.HealthCheckResponse(status=s) for name, s in self._server_status.items()}
        return health_pb2.HealthListResponse(statuses=statuses)


def _name(status: int) -> str:
    return health_pb2.HealthCheckResponse.ServingStatus.Name(status)


class DeepProbe:
    """Runs ``probe`` (a tiny real request through the engine) when the service is idle; see the module doc."""

    def __init__(
        self,
        health: Health,
        probe: Callable[[], Awaitable[str | None]],
        interval_s: float,
        deadline_s: float,
        failures_to_trip: int,
    ):
        self.health = health
        self.probe = probe
        self.interval_s = interval_s
        self.deadline_s = deadline_s
        self.failures_to_trip = failures_to_trip
        self.failures = 0

    async def run(self) -> None:
        last_probe = time.monotonic()
        while True:
            due = max(last_probe, rpc.last_output()) + self.interval_s
            if not self.health.probe_ok:
                due = last_probe + self.interval_s  # failing: only a probe that passes brings it back
            await asyncio.sleep(max(0.05, due - time.monotonic()))
            if self.health.probe_ok and time.monotonic() - rpc.last_output() < self.interval_s:
                continue  # streams sent output meanwhile
            await self.once()
            last_probe = time.monotonic()

    async def once(self) -> bool:
        service = self.health.service
        try:
            skipped = await asyncio.wait_for(self.probe(), self.deadline_s)
        except TimeoutError:
            problem = f"no answer within {self.deadline_s:.1f}s"
        except Exception as e:  # noqa: BLE001 - any failure of the engine is the finding
            problem = f"{type(e).__name__}: {getattr(e, 'message', None) or e}"
        else:
            metrics.DEEP_PROBES.labels(service, "skipped" if skipped else "ok").inc()
            self.failures = 0
            if not self.health.probe_ok:
                log.warning("%s: deep probe passed again: SERVING", service)
                self.health.probe_ok = True
                await self.health.publish()
            return True
        metrics.DEEP_PROBES.labels(service, "failed").inc()
        self.failures += 1
        if self.health.probe_ok and self.failures >= self.failures_to_trip:
            log.warning(
                "%s: deep probe failed %d times in a row (%s): NOT_SERVING until a probe passes",
                service,
                self.failures,
                problem,
            )
            self.health.probe_ok = False
            await self.health.publish()
        else:
            log.info("%s: deep probe failed (%s)", service, problem)
        return False


# --- the probes each service supplies -------------------------------------------------------------------------------
def synthesis_probe(engine: TtsEngine) -> Callable[[], Awaitable[str | None]]:
    """A short synthesis with the engine's first voice; it must give audio. (A time-shared model's probe is
    ResidentTtsEngine.probe: skipped while the model is off its device.)"""

    async def probe() -> str | None:
        voice = (await engine.voices())[0]
        options = SynthesisOptions(
            voice=voice.id,
            language=voice.languages[0] if voice.languages else "",
            sample_rate_hz=voice.native_sample_rate_hz,
            request_id=PROBE_REQUEST_ID,
        )
        audio = 0
        async with contextlib.aclosing(engine.synthesize(PROBE_TEXT, options)) as pieces:
            async for piece in pieces:
                audio += len(piece.pcm)
        if not audio:
            raise RuntimeError(f"synthesizing {PROBE_TEXT!r} gave no audio")
        return None

    return probe


def recognition_probe(engine: AsrEngine) -> Callable[[], Awaitable[str | None]]:
    """A recognition stream of a little silence, finished and drained."""

    async def probe() -> str | None:
        rate = engine.native_sample_rate or 16_000
        stream = await engine.open_stream(RecognitionOptions(sample_rate_hz=rate, request_id=PROBE_REQUEST_ID))
        try:
            await stream.feed(bytes(rate * PROBE_SILENCE_MS // 1000 * 2))
            await stream.finish()
            async for _ in stream.events():
                pass
        finally:
            await stream.close()
        return None

    return probe


# --- chaos drills --------------------------------------------------------------------------------------------------
ENGINE_CALLS = ("synthesize", "synthesize_text_stream", "register_voice", "open_stream", "open_session")


def hang_while_file_exists(path: str, engines: Iterable[object], service: str) -> None:
    """Chaos drill: every call of the engines' request methods waits while ``path`` exists (a wedged engine)."""
    held = rpc.ThrottledLog(log)

    def wedged() -> bool:
        return os.path.exists(path)  # a stat of a local file: microseconds

    async def hold() -> None:
        if not wedged():
            return
        held.warning("%s: chaos drill: engine calls wait while %s exists", service, path)
        while True:  # polled: a file has nothing to await
            await asyncio.sleep(0.05)
            if not wedged():
                return

    def wedgeable(call):
        if inspect.iscoroutinefunction(call):

            async def coroutine(*args, **kwargs):
                await hold()
                return await call(*args, **kwargs)

            return coroutine

        async def stream(*args, **kwargs):  # async generators, and functions returning an async iterator
            await hold()
            async with contextlib.aclosing(call(*args, **kwargs)) as items:
                async for item in items:
                    yield item

        return stream

    for engine in engines:
        for name in ENGINE_CALLS:
            if callable(getattr(type(engine), name, None)):
                setattr(engine, name, wedgeable(getattr(engine, name)))
