"""Placement: the router's view of where each time-shared model is resident, read from the cards' lease tables.

A backend whose model is cold (holds no live lease) and whose swap-in would take longer than the request's
latency budget is passed over for a warm fallback of the same route, and its model is prefetched
(ModelControl.Load) so later requests find it warm. Backends that never held a lease (CPU engines without
residency) are always warm.

The tables: with one card, the router's own (``LocalLeaseTables``); beyond one card, every card's lease authority
(``RemoteLeaseTables``, router.leases.authorities), read every ``authorities_poll_seconds``. A model counts as warm
when it is resident on any card; a card whose authority stops answering is dropped from the view (its node is gone,
and its leases with it).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import grpc

from services.common import metrics, security
from services.common.config.residency import ResidencyConfig
from services.residency.lease_client import authority_addresses
from services.residency.lease_table import LeaseManager
from services.router.backends import Backend
from voice.v1 import gpu_pb2, gpu_pb2_grpc

log = logging.getLogger("voicefleet.router.placement")


@dataclass
class CardTable:
    """One card's lease table, as far as routing needs it."""

    card: str
    live: dict[str, list[bool]] = field(default_factory=dict)  # holder -> its live leases' "revoking" flags
    waiting: set[str] = field(default_factory=set)
    swap_in_ms: dict[str, int] = field(default_factory=dict)  # from each holder's latest acquire

    @classmethod
    def from_proto(cls, card: str, table: gpu_pb2.ListLeasesResponse) -> CardTable:
        out = cls(card)
        for lease in table.leases:
            out.live.setdefault(lease.holder, []).append(lease.revoking)
            if lease.swap_in_ms:
                out.swap_in_ms[lease.holder] = lease.swap_in_ms
        for waiter in table.waiting:
            out.waiting.add(waiter.holder)
            if waiter.swap_in_ms:
                out.swap_in_ms[waiter.holder] = waiter.swap_in_ms
        return out


class LocalLeaseTables:
    """The one card whose leases this router grants itself."""

    def __init__(self, manager: LeaseManager):
        self.manager = manager

    @property
    def holders_seen(self) -> set[str]:
        return self.manager.holders_seen

    @property
    def swap_in_ms_seen(self) -> dict[str, int]:
        return self.manager.swap_in_ms_seen

    def tables(self) -> list[CardTable]:
        table = CardTable("router")
        for lease in self.manager.leases.values():
            table.live.setdefault(lease.request.holder, []).append(lease.revoking)
        table.waiting = {w.request.holder for w in self.manager.waiters}
        return [table]


class RemoteLeaseTables:
    """Every card's table, read from its lease authority. An authority address whose host resolves to several
    addresses (a Kubernetes headless Service) stands for all of them; each is asked on its own."""

    def __init__(self, authorities: list[str], poll_s: float, timeout_s: float = 2.0):
        self.authorities = authorities
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.holders_seen: set[str] = set()
        self.swap_in_ms_seen: dict[str, int] = {}  # each holder's latest figure, kept after it released
        self._tables: dict[str, CardTable] = {}
        self._channels: dict[str, object] = {}
        self._task: asyncio.Task | None = None
        self._unanswered: set[str] = set()

    def tables(self) -> list[CardTable]:
        return list(self._tables.values())

    async def start(self) -> None:
        await self.poll_once()
        self._task = asyncio.create_task(self._poll_forever(), name="lease-tables")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        for channel in self._channels.values():
            await channel.close()

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            await self.poll_once()

    async def poll_once(self) -> None:
        cards, problems = await asyncio.to_thread(authority_addresses, self.authorities)
        for problem in problems:
            log.warning("%s", problem)
        answers = await asyncio.gather(*(self._read(card) for card in cards))
        self._tables = {card: table for card, table in zip(cards, answers, strict=True) if table is not None}
        for table in self._tables.values():
            self.holders_seen.update(table.live, table.waiting)
            self.swap_in_ms_seen.update(table.swap_in_ms)

    async def _read(self, card: str) -> CardTable | None:
        channel = self._channels.get(card)
        if channel is None:
            channel = self._channels[card] = security.fleet_channel(card)
        try:
            table = await gpu_pb2_grpc.GpuLeasesStub(channel).ListLeases(
                gpu_pb2.ListLeasesRequest(request_id="router-residency"), timeout=self.timeout_s
            )
        except grpc.aio.AioRpcError as e:
            if card not in self._unanswered:
                log.warning("lease authority %s does not answer (%s): its card is out of the view", card, e.code().name)
                self._unanswered.add(card)
            return None
        if card in self._unanswered:
            log.info("lease authority %s answers again", card)
            self._unanswered.discard(card)
        return CardTable.from_proto(card, table)


@dataclass(frozen=True)
class ModelPlace:
    time_shared: bool  # holds (or has held) a GPU lease: its model can be cold
    resident: bool
    swap_in_ms: int


class PlacementView:
    def __init__(
        self,
        tables: LocalLeaseTables | RemoteLeaseTables,
        config: ResidencyConfig,
        backends: dict[str, Backend],
        default_budget_ms: int,
    ):
        self.tables = tables
        self.config = config
        self.backends = backends
        self.default_budget_ms = default_budget_ms
        self._prefetching: dict[str, asyncio.Task] = {}

    def place(self, name: str) -> ModelPlace:
        tables = self.tables.tables()
        live = [revoking for t in tables for revoking in t.live.get(name, [])]
        waiting = any(name in t.waiting for t in tables)
        spec = self.config.services.get(name)
        # The holder's own figure from its latest acquire (measured once it has loaded), else the configured guess.
        swap_in = self.tables.swap_in_ms_seen.get(name) or (spec.swap_in_ms if spec else 0)
        time_shared = bool(live or waiting or name in self.tables.holders_seen or self.config.enabled)
        resident = any(not revoking for revoking in live)
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
