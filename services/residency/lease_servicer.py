"""GpuLeases over gRPC: one bidi stream per holder, driven by one card's lease table (lease_table.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from services.common import metrics
from services.common.config import Config, ConfigError
from services.common.errors import FailedPrecondition, InvalidArgument, VoiceError
from services.common.rpc import request_id
from services.residency.lease_table import (
    Ended,
    Event,
    Granted,
    LeaseManager,
    LeasePolicy,
    LeaseRequest,
    Queued,
    Revoke,
)
from voice.v1 import gpu_pb2, gpu_pb2_grpc

log = logging.getLogger("voicefleet.leases")
GIB = 1 << 30


def card_capacity_bytes(capacity_gb: float, reserve_gb: float) -> int:
    """Grantable bytes: the configured size, or (capacity_gb 0) the card's total memory from NVML less the reserve."""
    if capacity_gb:
        return int(capacity_gb * GIB)
    try:
        import pynvml  # only in GPU images (nvidia-ml-py)

        pynvml.nvmlInit()
        total = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total
    except Exception as e:  # noqa: BLE001 - any NVML failure means "no card to read"
        raise ConfigError(
            f"router.leases.capacity_gb: 0 means 'read the card from NVML', but NVML is not available here ({e});"
            " set the card's size in GiB (24 or 48)"
        ) from None
    return int(total - reserve_gb * GIB)


class GpuLeasesServicer(gpu_pb2_grpc.GpuLeasesServicer):
    def __init__(self, manager: LeaseManager, tick_s: float = 0.25):
        self.manager = manager
        self.tick_s = tick_s
        self._outboxes: dict[str, asyncio.Queue] = {}
        self._ticker: asyncio.Task | None = None

    async def start(self) -> None:
        self._ticker = asyncio.create_task(self._tick_forever(), name="lease-ticker")

    async def stop(self) -> None:
        if self._ticker:
            self._ticker.cancel()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            self._deliver(self.manager.tick())

    def _deliver(self, events: list[Event], request_id: str = "") -> None:
        policy = self.manager.policy
        for event in events:
            lease = getattr(event, "lease", None)
            holder = lease.request.holder if lease else ""
            if isinstance(event, Granted):
                metrics.LEASE_EVENTS.labels("granted", holder).inc()
                reply = gpu_pb2.LeaseResponse(
                    request_id=request_id,
                    granted=gpu_pb2.LeaseGranted(
                        epoch=lease.epoch,
                        bytes=lease.bytes,
                        ttl_ms=int(policy.ttl_s * 1000),
                        renew_deadline_ms=int(policy.renew_deadline_s * 1000),
                    ),
                )
                log.info("granted %s %d bytes, epoch %d", holder, lease.bytes, lease.epoch)
            elif isinstance(event, Revoke):
                metrics.LEASE_EVENTS.labels("revoked", holder).inc()
                reply = gpu_pb2.LeaseResponse(
                    revoke=gpu_pb2.LeaseRevoke(
                        epoch=lease.epoch, reason=event.reason, deadline_ms=int(policy.revoke_deadline_s * 1000)
                    )
                )
                log.info("revoking %s epoch %d: %s", holder, lease.epoch, event.reason)
            elif isinstance(event, Ended):
                metrics.LEASE_EVENTS.labels(event.reason, holder).inc()
                reply = gpu_pb2.LeaseResponse(
                    request_id=request_id if event.reason == "released" else "",
                    ended=gpu_pb2.LeaseEnded(epoch=lease.epoch, reason=event.reason),
                )
                log.info("lease %d of %s ended: %s", lease.epoch, holder, event.reason)
            elif isinstance(event, Queued):
                reply = gpu_pb2.LeaseResponse(
                    request_id=request_id, queued=gpu_pb2.LeaseQueued(position=event.position, reason=event.reason)
                )
            else:  # pragma: no cover - the manager makes no other events
                continue
            outbox = self._outboxes.get(event.stream)
            if outbox is not None:
                outbox.put_nowait(reply)
        self._export_table()

    def _export_table(self) -> None:
        """The card's table as gauges: granted bytes in all and per holder, waiters."""
        metrics.LEASE_GRANTED_BYTES.set(self.manager.granted_bytes)
        per_holder = dict.fromkeys(self.manager.holders_seen, 0)
        for lease in self.manager.leases.values():
            per_holder[lease.request.holder] = per_holder.get(lease.request.holder, 0) + lease.bytes
        for holder, granted in per_holder.items():
            metrics.LEASE_HOLDER_BYTES.labels(holder).set(granted)
        metrics.LEASE_WAITERS.set(len(self.manager.waiters))

    async def Lease(self, requests, context):
        stream = uuid.uuid4().hex
        outbox: asyncio.Queue = asyncio.Queue()
        self._outboxes[stream] = outbox
        failure: list[BaseException] = []

        async def read() -> None:
            try:
                async for message in requests:
                    self._handle(stream, message, outbox)
            except VoiceError as e:
                failure.append(e)
            finally:
                self._deliver(self.manager.disconnect(stream))
                outbox.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while True:
                reply = await outbox.get()
                if reply is None:
                    break
                yield reply
            if failure:
                raise failure[0]
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            self._outboxes.pop(stream, None)

    def _handle(self, stream: str, message: gpu_pb2.LeaseRequest, outbox: asyncio.Queue) -> None:
        rid = message.request_id
        kind = message.WhichOneof("payload")
        if kind == "acquire":
            a = message.acquire
            if not a.holder:
                raise InvalidArgument("acquire.holder", "is required (the service name, e.g. moss_sts)")
            request = LeaseRequest(
                a.holder, a.model, a.bytes, a.priority or gpu_pb2.LEASE_PRIORITY_BATCH, a.swap_in_ms, a.swap_out_ms
            )
            self._deliver(self.manager.acquire(stream, request), rid)
        elif kind == "renew":
            try:
                lease = self.manager.renew(stream, message.renew.epoch, message.renew.busy)
            except VoiceError as e:
                # Expired or revoked: tell the holder the lease is over; it must stop GPU work.
                outbox.put_nowait(
                    gpu_pb2.LeaseResponse(
                        request_id=rid, ended=gpu_pb2.LeaseEnded(epoch=message.renew.epoch, reason=e.message)
                    )
                )
                return
            remaining = self.manager.expires_at(lease) - self.manager.clock()
            outbox.put_nowait(
                gpu_pb2.LeaseResponse(
                    request_id=rid, renewed=gpu_pb2.LeaseRenewed(epoch=lease.epoch, ttl_ms=int(remaining * 1000))
                )
            )
        elif kind == "release":
            self._deliver(self.manager.release(stream, message.release.epoch), rid)
        else:
            raise InvalidArgument("payload", "set one of acquire, renew, release")

    async def ListLeases(self, request, context):
        now = self.manager.clock()
        return gpu_pb2.ListLeasesResponse(
            request_id=request_id(),
            capacity_bytes=self.manager.policy.capacity_bytes,
            granted_bytes=self.manager.granted_bytes,
            leases=[
                gpu_pb2.LeaseInfo(
                    holder=lease.request.holder,
                    model=lease.request.model,
                    bytes=lease.bytes,
                    epoch=lease.epoch,
                    priority=lease.request.priority,
                    expires_in_ms=max(0, int((self.manager.expires_at(lease) - now) * 1000)),
                    busy=lease.busy,
                    revoking=lease.revoking,
                    swap_in_ms=lease.request.swap_in_ms,
                )
                for lease in self.manager.leases.values()
            ],
            waiting=[
                gpu_pb2.LeaseAcquire(
                    holder=w.request.holder,
                    model=w.request.model,
                    bytes=w.request.bytes,
                    priority=w.request.priority,
                    swap_in_ms=w.request.swap_in_ms,
                )
                for w in self.manager._ordered_waiters()
            ],
        )


def card_leases(config: Config) -> GpuLeasesServicer:
    """The GpuLeases servicer for one card, with router.leases' policy (shared by the router's one-card mode)."""
    lc = config.router.leases
    return GpuLeasesServicer(
        LeaseManager(
            LeasePolicy(
                capacity_bytes=card_capacity_bytes(lc.capacity_gb, lc.reserve_gb),
                ttl_s=lc.ttl_seconds,
                renew_deadline_s=lc.renew_deadline_seconds,
                min_residency_s=lc.min_residency_seconds,
                revoke_deadline_s=lc.revoke_deadline_seconds,
                max_waiters=lc.max_waiters,
            )
        )
    )


class LeasesElsewhereServicer(gpu_pb2_grpc.GpuLeasesServicer):
    """The router's GpuLeases when every card has its own lease authority (router.leases.authorities): it grants
    nothing, since two routers granting the same card would over-grant it; holders are told where to ask."""

    def __init__(self, authorities: list[str]):
        self.why = (
            "this router grants no GPU leases: each card's lease authority does ("
            + ", ".join(authorities)
            + "); set residency.lease_authority to the one on the holder's node, and read tables there"
        )

    async def Lease(self, requests, context):
        raise FailedPrecondition(self.why)
        yield  # an async generator, like the real Lease

    async def ListLeases(self, request, context):
        raise FailedPrecondition(self.why)
