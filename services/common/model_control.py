"""Where a service's model lives, the GPU lease that lets it be there, and voice.v1.ModelControl.

``ModelResidency`` owns the state COLD → LOADING → RESIDENT → OFFLOADING → COLD. With leases on (GPU engines
always; CPU engines when ``residency.enabled``, accounting their declared size on a virtual card), loading first
acquires a lease from the router's GpuLeases, then loads the weights; a revoke waits for in-flight requests to
finish, offloads and releases; a lost lease (renew deadline passed, router gone) offloads at once.

``ResidentTtsEngine`` wraps a TTS engine so the shared servicer needs no change: a request to a COLD model waits
(bounded: RESOURCE_EXHAUSTED with a retry hint past ``max_waiting_requests``) while the model is loaded back, and
in-flight requests make the lease's renewals say ``busy`` (busy holders are not revoked).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc

from services.common import metrics, security
from services.common.config.base import ConfigError
from services.common.engines import AsrEngine, AsrStream, StsEngine, StsSession, TtsEngine
from services.common.errors import FailedPrecondition, ResourceExhausted, Unavailable
from services.common.health import synthesis_probe
from services.common.lease_client import GpuLease
from services.common.rpc import new_request_id, rpc
from voice.v1 import gpu_pb2, gpu_pb2_grpc

log = logging.getLogger("voicefleet.residency")
GIB = 1 << 30
SWAP_AVERAGE_WEIGHT = 0.3  # weight of the newest swap in the moving averages: a few swaps move it, one outlier does not


def _moving_average(average_ms: float, sample_ms: float, samples: int) -> float:
    return sample_ms if samples <= 1 else (1 - SWAP_AVERAGE_WEIGHT) * average_ms + SWAP_AVERAGE_WEIGHT * sample_ms


COLD, LOADING, RESIDENT, OFFLOADING = (
    gpu_pb2.RESIDENCY_COLD,
    gpu_pb2.RESIDENCY_LOADING,
    gpu_pb2.RESIDENCY_RESIDENT,
    gpu_pb2.RESIDENCY_OFFLOADING,
)


@dataclass
class ResidencyHooks:
    """How to move one engine's model: first start, later reloads, offloads, and what it holds."""

    start: Callable[[], Awaitable[None]]
    reload: Callable[[], Awaitable[None]]
    offload: Callable[[], Awaitable[None]]
    resident_bytes: Callable[[], int]
    engine: str
    model: str
    device: Callable[[], str]
    # False for CPU engines on the virtual card: nothing moves, so their measured "swaps" are lease waits only and
    # the configured swap times (a GPU's cost, simulated) stay what their lease asks with.
    moves_weights: bool = True


class ModelResidency:
    def __init__(
        self,
        service: str,
        hooks: ResidencyHooks,
        *,
        lease_enabled: bool,
        lease_address: str = "",
        declared_bytes: int = 0,
        priority: int = gpu_pb2.LEASE_PRIORITY_INTERACTIVE,
        swap_in_ms: int = 0,
        swap_out_ms: int = 0,
        acquire_timeout_s: float = 120.0,
        max_waiting_requests: int = 8,
        pinned: bool = False,
    ):
        self.service = service
        self.pinned = pinned
        self.hooks = hooks
        self.lease_enabled = lease_enabled
        self.lease_address = lease_address  # the router's GpuLeases, or this card's lease authority
        self.declared_bytes = declared_bytes
        self.priority = priority
        self.swap_in_ms, self.swap_out_ms = swap_in_ms, swap_out_ms
        self.acquire_timeout_s = acquire_timeout_s
        self.max_waiting = max_waiting_requests
        self.state = COLD
        self.active = 0
        self.waiting = 0
        self.lease: GpuLease | None = None
        self._channel: grpc.aio.Channel | None = None
        self._lock = asyncio.Lock()
        self._idle = asyncio.Event()
        self._idle.set()
        self._started = False
        # Measured swaps (ModelStatus fields 10-12): the configured swap_in_ms/swap_out_ms are first guesses only.
        self.swap_ins = 0
        self.swap_outs = 0
        self.measured_swap_in_ms = 0.0
        self.measured_swap_out_ms = 0.0
        self.measured_bytes = 0  # what the engine held on its device after its last load (engines that move weights)

    # --- loading and offloading ---------------------------------------------------------------------------------
    async def load(self, progress: Callable[[str, float], None] = lambda stage, fraction: None) -> None:
        async with self._lock:
            if self.state == RESIDENT:
                progress("ready", 1.0)
                return
            self.state = LOADING
            t0 = time.monotonic()
            try:
                if self.lease_enabled:
                    progress("waiting for GPU lease", 0.1)
                    await self._acquire(lambda line: progress(line, 0.2))
                progress("loading weights", 0.5)
                if self._started:
                    await self.hooks.reload()
                else:
                    await self.hooks.start()
                    self._started = True
            except BaseException:
                self.state = COLD
                if self.lease is not None:
                    await self.lease.close()
                    self.lease = None
                raise
            self.state = RESIDENT
            self._measure_bytes()
            elapsed = time.monotonic() - t0
            self.swap_ins += 1
            self.measured_swap_in_ms = _moving_average(self.measured_swap_in_ms, elapsed * 1000, self.swap_ins)
            metrics.SWAP_SECONDS.labels(self.service, "in").observe(elapsed)
            log.info("%s resident in %.2fs (lease epoch %s)", self.service, elapsed, self.epoch)
            progress("ready", 1.0)

    def _measure_bytes(self) -> None:
        if not self.hooks.moves_weights:
            return
        self.measured_bytes = self.hooks.resident_bytes()
        if self.measured_bytes > self.declared_bytes:
            log.warning(
                "%s holds %.2f GiB on its device, more than its lease's %.2f GiB (residency.services.%s.declared_gb):"
                " its next lease asks for what it holds",
                self.service,
                self.measured_bytes / GIB,
                self.declared_bytes / GIB,
                self.service,
            )

    def lease_bytes(self) -> int:
        """The bytes a lease asks for: the declared size (what the engine caps its allocator to), or what the engine
        was measured to hold after a load if that is more (growing waits for room like any other request)."""
        return max(self.declared_bytes, self.measured_bytes)

    async def _acquire(self, progress: Callable[[str], None]) -> None:
        if self._channel is None:
            self._channel = security.fleet_channel(self.lease_address)
        self.lease = GpuLease(
            self._channel,
            self.service,
            self.hooks.model,
            self.lease_bytes(),
            self.priority,
            self.lease_swap_in_ms(),
            self.lease_swap_out_ms(),
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
            busy=lambda: self.pinned or self.active > 0,  # busy holders are never revoked
        )
        try:
            await self.lease.acquire(progress=progress, wait_s=self.acquire_timeout_s)
        except grpc.aio.AioRpcError as e:
            raise Unavailable(
                f"{self.service}: cannot reach GpuLeases at {self.lease_address} (residency.lease_authority, or the"
                f" router when empty): {e.details()}"
            ) from None

    async def offload(self, reason: str) -> None:
        if self.pinned:
            raise FailedPrecondition(
                f"{self.service} is pinned (residency.services.{self.service}.pinned): its model stays on the card"
            )
        async with self._lock:
            if self.state != RESIDENT:
                return
            self.state = OFFLOADING
            t0 = time.monotonic()
            await self._idle.wait()  # in-flight requests finish first (new ones wait for the reload)
            await self.hooks.offload()
            if self.lease is not None:
                await self.lease.close()
                self.lease = None
            self.state = COLD
            elapsed = time.monotonic() - t0
            self.swap_outs += 1
            self.measured_swap_out_ms = _moving_average(self.measured_swap_out_ms, elapsed * 1000, self.swap_outs)
            metrics.SWAP_SECONDS.labels(self.service, "out").observe(elapsed)
            log.info("%s offloaded in %.2fs (%s)", self.service, elapsed, reason)

    async def _on_revoke(self, reason: str) -> None:
        if self.pinned:  # never revoked while its renewals say busy; should a revoke come anyway, the weights stay
            log.warning("%s is pinned: ignoring a revoke (%s)", self.service, reason)
            return
        await self.offload(f"revoked: {reason}")

    async def _on_lost(self, reason: str) -> None:
        if self.pinned:
            # The weights cannot leave the card: ask for the lease again at once so the table accounts for them.
            log.warning("%s lost its lease (%s); pinned, so it asks for it again", self.service, reason)
            async with self._lock:
                if self.lease is not None:
                    await self.lease.close()
                    self.lease = None
                self.state = COLD
            self._reacquire = asyncio.get_running_loop().create_task(self.load())
            return
        await self.offload(f"lease lost: {reason}")

    async def close(self) -> None:
        if self.lease is not None:
            await self.lease.close()
        if self._channel is not None:
            await self._channel.close()

    # --- requests -----------------------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def use(self):
        """Hold the model resident for one request (loading it back first if it was offloaded)."""
        if self.state != RESIDENT:
            if self.waiting >= self.max_waiting:
                raise ResourceExhausted(
                    f"{self.service} is loading its model onto the GPU and {self.waiting} requests already wait;"
                    f" retry in about {max(1, self.lease_swap_in_ms() // 1000)} s or use another engine"
                )
            self.waiting += 1
            try:
                await self.load()
            finally:
                self.waiting -= 1
        self.active += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.active -= 1
            if self.active == 0:
                self._idle.set()

    # --- status -------------------------------------------------------------------------------------------------
    def lease_swap_in_ms(self) -> int:
        """The swap-in cost a lease asks with: measured once the model has loaded (engines that move weights), else
        the configured guess."""
        measured = self.hooks.moves_weights and self.swap_ins
        return round(self.measured_swap_in_ms) if measured else self.swap_in_ms

    def lease_swap_out_ms(self) -> int:
        measured = self.hooks.moves_weights and self.swap_outs
        return round(self.measured_swap_out_ms) if measured else self.swap_out_ms

    @property
    def epoch(self) -> int:
        return (self.lease.epoch or 0) if self.lease else 0

    def status(self) -> gpu_pb2.ModelStatus:
        return gpu_pb2.ModelStatus(
            service=self.service,
            engine=self.hooks.engine,
            model=self.hooks.model,
            device=self.hooks.device(),
            residency=self.state,
            resident_bytes=self.hooks.resident_bytes() if self.state == RESIDENT else 0,
            declared_bytes=self.declared_bytes,
            lease_epoch=self.epoch,
            active_streams=self.active,
            swap_in_ms=round(self.measured_swap_in_ms),
            swap_out_ms=round(self.measured_swap_out_ms),
            swap_ins=self.swap_ins,
        )


class ResidentTtsEngine(TtsEngine):
    """A TTS engine whose model may be offloaded: every request holds it resident (see ModelResidency.use)."""

    def __init__(self, inner: TtsEngine, residency: ModelResidency):
        self.inner = inner
        self.residency = residency
        self.name = inner.name
        self.service = inner.service
        self.clones_voices = inner.clones_voices

    @property
    def native_sample_rate(self) -> int:
        return self.inner.native_sample_rate

    @property
    def scheduler(self):
        """The inner engine's SegmentScheduler: admission predicts a newcomer's first-audio wait from it."""
        return self.inner.scheduler

    async def start(self) -> None:
        await self.residency.load()

    async def close(self) -> None:
        await self.residency.close()
        await self.inner.close()

    async def voices(self):
        return await self.inner.voices()

    async def synthesize(self, text, options) -> AsyncIterator:
        async with self.residency.use():
            async with contextlib.aclosing(self.inner.synthesize(text, options)) as pieces:
                async for piece in pieces:
                    yield piece

    async def synthesize_text_stream(self, events, options, policy) -> AsyncIterator:
        async with self.residency.use():
            async with contextlib.aclosing(self.inner.synthesize_text_stream(events, options, policy)) as pieces:
                async for piece in pieces:
                    yield piece

    async def register_voice(self, *args, **kwargs):
        async with self.residency.use():
            return await self.inner.register_voice(*args, **kwargs)

    def resident_bytes(self) -> int:
        return self.inner.resident_bytes()

    async def probe(self) -> str | None:
        """The service's deep probe (services/common/health.py): a short synthesis, skipped while the model is off its
        device, so a probe never pulls a swapped-out model back onto the GPU."""
        if self.residency.state != RESIDENT:
            return "model not resident"
        return await synthesis_probe(self)()

    @property
    def device(self) -> str:
        return self.inner.device

    @property
    def served_by(self) -> str:
        return self.inner.served_by


def engine_hooks(engine, model: str, service: str, gpu_engine: bool, pinned: bool = False) -> ResidencyHooks:
    """Residency hooks of an engine. A GPU engine that takes turns on the card must free its device memory on a
    revoke: it defines ``offload()`` and ``reload()`` (docs/leases.md, how each engine offloads), or it is configured
    ``pinned`` (never revoked). CPU engines only account their declared size on the virtual card: nothing to move."""

    async def nothing() -> None:
        return None

    offload, reload = getattr(engine, "offload", None), getattr(engine, "reload", None)
    limit = getattr(engine, "offload_limit", None)  # an engine that offloads but cannot free all it holds says why
    if not (callable(offload) and callable(reload)):
        limit = "it has no offload and reload"
    if gpu_engine and not pinned and limit:
        raise ConfigError(
            f"residency.services.{service}: engine {engine.name} cannot free its GPU memory ({limit}), so it cannot"
            f" take turns on the card; set residency.services.{service}.pinned: true to keep it resident (its lease"
            " is never revoked) and size the other holders around it"
        )
    moves = gpu_engine and not pinned
    return ResidencyHooks(
        start=engine.start,
        reload=reload if moves else nothing,
        offload=offload if moves else nothing,
        resident_bytes=engine.resident_bytes,
        engine=engine.name,
        model=model,
        device=lambda: engine.device,
        moves_weights=moves,
    )


class ModelControlServicer(gpu_pb2_grpc.ModelControlServicer):
    def __init__(self, residency: ModelResidency):
        self.residency = residency
        self.service = residency.service
        for method in ("Load", "Offload", "GetModelStatus"):
            setattr(self, method, rpc(self.service, method)(getattr(type(self), method)).__get__(self))

    async def Load(self, request, context):
        rid = request.request_id or new_request_id()
        queue: asyncio.Queue = asyncio.Queue()
        if request.priority:
            self.residency.priority = request.priority
        task = asyncio.create_task(self.residency.load(lambda stage, fraction: queue.put_nowait((stage, fraction))))
        task.add_done_callback(lambda _t: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                stage, fraction = item
                yield gpu_pb2.LoadResponse(
                    request_id=rid, stage=stage, progress=fraction, status=self.residency.status()
                )
            task.result()
        finally:
            if not task.done():
                task.cancel()

    async def Offload(self, request, context):
        await self.residency.offload(request.reason or "ModelControl.Offload")
        return gpu_pb2.OffloadResponse(
            request_id=request.request_id or new_request_id(), status=self.residency.status()
        )

    async def GetModelStatus(self, request, context):
        return gpu_pb2.GetModelStatusResponse(
            request_id=request.request_id or new_request_id(), status=self.residency.status()
        )


def lease_bytes(config, service: str) -> int:
    """The bytes ``service``'s lease asks for (residency.services.<service>.declared_gb): what its GPU engine sizes
    its allocator to (docs/leases.md, memory plan)."""
    spec = config.residency.services.get(service)
    return int(spec.declared_gb * GIB) if spec else 0


def holder_config(config, service: str):
    """``service``'s residency.services entry, or the defaults of one."""
    rc = config.residency
    spec = rc.services.get(service)
    if spec is None:
        spec = type(next(iter(rc.services.values())))() if rc.services else None
    return spec


def residency_for(config, service: str, engine, model: str, gpu_engine: bool) -> ModelResidency:
    """The residency of ``service``'s ``engine`` from the fleet config: leases always for GPU engines, on CPU when
    enabled."""
    rc = config.residency
    spec = holder_config(config, service)
    pinned = bool(spec and spec.pinned)
    return ModelResidency(
        service,
        engine_hooks(engine, model, service, gpu_engine, pinned),
        lease_enabled=gpu_engine or rc.enabled,
        pinned=pinned,
        lease_address=config.residency.lease_authority or config.router.address,
        declared_bytes=int((spec.declared_gb if spec else 0) * GIB),
        priority=gpu_pb2.LeasePriority.Value(f"LEASE_PRIORITY_{spec.priority}")
        if spec
        else gpu_pb2.LEASE_PRIORITY_INTERACTIVE,
        swap_in_ms=spec.swap_in_ms if spec else 0,
        swap_out_ms=spec.swap_out_ms if spec else 0,
        acquire_timeout_s=rc.acquire_timeout_seconds,
        max_waiting_requests=rc.max_waiting_requests,
    )


def resident_tts(
    config, service: str, engine: TtsEngine, model: str, gpu_engine: bool
) -> tuple[ResidentTtsEngine, object]:
    """``engine`` wrapped to hold its model resident per request, and the service's ModelControl servicer."""
    residency = residency_for(config, service, engine, model, gpu_engine)
    return ResidentTtsEngine(engine, residency), model_control(residency)


# --- Recognition and conversation hold their model too (asr, moss_sts) -------------------------------------------
class _HeldUntilClosed:
    """Holds a ModelResidency (``use()``) from open until ``close`` (idempotent): an ASR stream or a conversation
    session keeps its model resident for its whole life, and its holder counts as busy meanwhile (busy holders are
    not revoked), so a live conversation is never cut by a swap."""

    def __init__(self, residency: ModelResidency):
        self._residency = residency
        self._stack = contextlib.AsyncExitStack()

    async def hold(self) -> None:
        await self._stack.enter_async_context(self._residency.use())

    async def release(self) -> None:
        await self._stack.aclose()


class _HeldStream:
    """What an ASR stream and a conversation session share: audio in, events out, and the hold released on close."""

    def __init__(self, inner, held: _HeldUntilClosed):
        self.inner, self._held = inner, held

    async def feed(self, pcm: bytes) -> None:
        await self.inner.feed(pcm)

    async def finish(self) -> None:
        await self.inner.finish()

    def events(self):
        return self.inner.events()

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            await self._held.release()


class _ResidentAsrStream(_HeldStream, AsrStream):
    pass


class _ResidentStsSession(_HeldStream, StsSession):
    async def control(self, action: str) -> None:
        await self.inner.control(action)

    async def interrupt(self) -> None:
        await self.inner.interrupt()


class _ResidentEngine:
    """What the ASR and conversation wrappers share: the inner engine's face, loading through the residency, and
    opening a stream or session that holds the model until it is closed."""

    def __init__(self, inner, residency: ModelResidency):
        self.inner = inner
        self.residency = residency
        self.name = inner.name
        self.service = inner.service

    @property
    def native_sample_rate(self) -> int:
        return self.inner.native_sample_rate

    async def start(self) -> None:
        await self.residency.load()

    async def close(self) -> None:
        await self.residency.close()
        await self.inner.close()

    def check_options(self, options) -> None:
        self.inner.check_options(options)

    def resident_bytes(self) -> int:
        return self.inner.resident_bytes()

    @property
    def device(self) -> str:
        return self.inner.device

    @property
    def served_by(self) -> str:
        return self.inner.served_by

    async def _open_held(self, open_inner, wrap):
        held = _HeldUntilClosed(self.residency)
        await held.hold()
        try:
            return wrap(await open_inner(), held)
        except BaseException:
            await held.release()
            raise


class ResidentAsrEngine(_ResidentEngine, AsrEngine):
    """An ASR engine whose model may be offloaded: every stream holds it resident until the stream is closed."""

    async def open_stream(self, options) -> AsrStream:
        return await self._open_held(lambda: self.inner.open_stream(options), _ResidentAsrStream)


class ResidentStsEngine(_ResidentEngine, StsEngine):
    """A conversation engine whose model may be offloaded: every session holds it resident until it is closed."""

    async def voices(self):
        return await self.inner.voices()

    async def open_session(self, options) -> StsSession:
        return await self._open_held(lambda: self.inner.open_session(options), _ResidentStsSession)


def when_resident(residency: ModelResidency, probe: Callable[[], Awaitable[str | None]]):
    """A deep probe that is skipped while the model is off its device: a probe must never pull a swapped-out model
    back onto the card (ResidentTtsEngine.probe does the same for TTS)."""

    async def probe_if_resident() -> str | None:
        if residency.state != RESIDENT:
            return "model not resident"
        return await probe()

    return probe_if_resident


def model_control(residency: ModelResidency):
    """The service's voice.v1.ModelControl servicer for ``residency``."""
    from services.common.server import Servicer

    return Servicer(
        gpu_pb2_grpc.add_ModelControlServicer_to_server, ModelControlServicer(residency), "voice.v1.ModelControl"
    )


def resident_asr(config, service: str, engine: AsrEngine, model: str, gpu_engine: bool):
    """``engine`` wrapped so each stream holds its model resident, and the service's ModelControl servicer."""
    residency = residency_for(config, service, engine, model, gpu_engine)
    return ResidentAsrEngine(engine, residency), model_control(residency)


def resident_sts(config, service: str, sts: StsEngine, tts: TtsEngine, model: str, gpu_engine: bool):
    """moss_sts: one model behind two services (Conversation sessions and its Synthesizer), so one residency: both
    wrapped engines hold it, and the one ModelControl servicer moves it."""
    residency = residency_for(config, service, sts, model, gpu_engine)
    return ResidentStsEngine(sts, residency), ResidentTtsEngine(tts, residency), model_control(residency)
