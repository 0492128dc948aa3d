"""Residency-aware routing: where each time-shared model is, read from the router's own lease table.

A backend whose model is cold (holds no live lease) and whose swap-in would take longer than the request's
latency budget is passed over for a warm fallback of the same route, and its model is prefetched
(ModelControl.Load) so later requests find it warm. Backends that never held a lease (CPU engines without
residency) are always warm.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc

from services.common import metrics
from services.common.config import ResidencyConfig
from services.router.backends import Backend
from services.router.leases import LeaseManager
from voice.v1 import gpu_pb2, gpu_pb2_grpc

log = logging.getLogger("voicefleet.router.residency")


@dataclass(frozen=True)
class ModelPlace:
    time_shared: bool  # holds (or has held) a GPU lease: its model can be cold
    resident: bool
    swap_in_ms: int


class ResidencyView:
    def __init__(
        self, manager: LeaseManager, config: ResidencyConfig, backends: dict[str, Backend], default_budget_ms: int
    ):
        self.manager = manager
        self.config = config
        self.backends = backends
        self.default_budget_ms = default_budget_ms
        self._prefetching: dict[str, asyncio.Task] = {}

    def place(self, name: str) -> ModelPlace:
        live = [lease for lease in self.manager.leases.values() if lease.request.holder == name]
        waiting = [w for w in self.manager.waiters if w.request.holder == name]
        spec = self.config.services.get(name)
        # The holder's own figure from its latest acquire (measured once it has loaded), else the configured guess.
        swap_in = self.manager.swap_in_ms_seen.get(name) or (spec.swap_in_ms if spec else 0)
        time_shared = bool(live or waiting or name in self.manager.holders_seen or self.config.enabled)
        resident = any(not lease.revoking for lease in live)
        return ModelPlace(time_shared, resident, swap_in)

    def too_cold(self, name: str, budget_ms: int) -> bool:
        place = self.place(name)
        return place.time_shared and not place.resident and place.swap_in_ms > (budget_ms or self.default_budget_ms)

    def warm(self, name: str) -> bool:
        place = self.place(name)
        return not place.time_shared or place.resident

    def prefetch(self, name: str) -> None:
        """Load ``name``'s model in the background (once at a time), so the next request finds it warm."""
        if name in self._prefetching and not self._prefetching[name].done():
            return
        backend = self.backends.get(name)
        if backend is None or backend.channel is None:
            return
        self._prefetching[name] = asyncio.create_task(self._load(backend), name=f"prefetch-{name}")

    async def _load(self, backend: Backend) -> None:
        metrics.PREFETCHES.labels(backend.name).inc()
        try:
            async for step in gpu_pb2_grpc.ModelControlStub(backend.channel).Load(
                gpu_pb2.LoadRequest(request_id="router-prefetch"), timeout=600
            ):
                log.info("prefetch %s: %s (%.0f%%)", backend.name, step.stage, step.progress * 100)
        except grpc.aio.AioRpcError as e:
            log.warning("prefetch of %s failed: %s %s", backend.name, e.code().name, e.details())
