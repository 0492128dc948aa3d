"""Residency: whether one model's weights are on its device, and the lease that lets them be there.

``ModelResidency`` owns the state COLD → LOADING → RESIDENT → OFFLOADING → COLD. With leases on (GPU engines
always; CPU engines when ``residency.enabled``, accounting their declared size on a virtual card), loading first
acquires a lease from GpuLeases (the router's, or the card's lease authority), then loads the weights; a revoke waits
for in-flight requests to finish, offloads and releases; a lost lease (renew deadline passed, authority gone) offloads
at once. In-flight requests make the lease's renewals say ``busy`` (busy holders are not revoked).

``engine_hooks`` says how to move one engine's model: engines that can free their device memory declare
``Offloadable`` (services/common/engines.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from services.common import metrics, security
from services.common.config.base import ConfigError
from services.common.engines import Offloadable
from services.common.errors import FailedPrecondition, ResourceExhausted, Unavailable
from services.residency.lease_client import GpuLease
from voice.v1 import gpu_pb2

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
        clock: Callable[[], float] = time.monotonic,  # times the swaps; tests pass their own
    ):
        self.service = service
        self._clock = clock
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
            t0 = self._clock()
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
            elapsed = self._clock() - t0
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
            t0 = self._clock()
            await self._idle.wait()  # in-flight requests finish first (new ones wait for the reload)
            await self.hooks.offload()
            if self.lease is not None:
                await self.lease.close()
                self.lease = None
            self.state = COLD
            elapsed = self._clock() - t0
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


def engine_hooks(engine, model: str, service: str, gpu_engine: bool, pinned: bool = False) -> ResidencyHooks:
    """Residency hooks of an engine. A GPU engine that takes turns on the card must free its device memory on a
    revoke: it is ``Offloadable`` (docs/leases.md, how each engine offloads), or it is configured ``pinned`` (never
    revoked). CPU engines only account their declared size on the virtual card: nothing to move."""

    async def nothing() -> None:
        return None

    offloadable = isinstance(engine, Offloadable)
    limit = engine.offload_limit if offloadable else "it is not Offloadable: it has no offload and reload"
    if gpu_engine and not pinned and limit:
        raise ConfigError(
            f"residency.services.{service}: engine {engine.name} cannot free its GPU memory ({limit}), so it cannot"
            f" take turns on the card; set residency.services.{service}.pinned: true to keep it resident (its lease"
            " is never revoked) and size the other holders around it"
        )
    moves = gpu_engine and not pinned
    return ResidencyHooks(
        start=engine.start,
        reload=engine.reload if moves else nothing,
        offload=engine.offload if moves else nothing,
        resident_bytes=engine.resident_bytes,
        engine=engine.name,
        model=model,
        device=lambda: engine.device,
        moves_weights=moves,
    )
