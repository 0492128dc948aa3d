"""GPU time-sharing: the router's lease table for one card. Pure logic with an injected clock.

Rules (docs/leases.md):
- A lease is granted only if its bytes fit: granted bytes never exceed capacity. Every grant gets an epoch
  strictly greater than every epoch before it (a fencing token).
- A holder renews within ``renew_deadline`` and stops GPU work by itself when that passes unrenewed; the lease
  expires ``ttl`` after its last renew (ttl > renew_deadline), so an expired holder has stopped before its bytes are
  granted again. A crashed holder's bytes come back at expiry; a holder whose stream closed is treated the same.
- To make room for a waiter, idle holders of lower or equal priority, past their minimum residency, are revoked
  (equal priority lets two models that do not fit together take turns; minimum residency keeps them from thrashing):
  lowest priority first, then cheapest to bring back (swap-in cost), then least recently busy. A revoked lease is
  not renewed any more: the holder offloads and releases, or its bytes return at expiry.
- Waiters are served in priority order, first come first served within a priority; no waiter is overtaken by a
  lower-priority one.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from services.common.errors import FailedPrecondition, InvalidArgument, ResourceExhausted


@dataclass
class LeaseRequest:
    holder: str
    model: str
    bytes: int
    priority: int  # 1 BATCH, 2 INTERACTIVE, 3 REALTIME (voice.v1.LeasePriority)
    swap_in_ms: int = 0
    swap_out_ms: int = 0


@dataclass
class Lease:
    epoch: int
    stream: str  # the Lease stream that holds it
    request: LeaseRequest
    granted_at: float
    renewed_at: float
    busy: bool = False
    last_busy_at: float = 0.0
    revoking: bool = False
    revoke_reason: str = ""
    orphaned: bool = False  # its stream closed; bytes return at expiry

    @property
    def bytes(self) -> int:
        return self.request.bytes


@dataclass
class Waiter:
    stream: str
    request: LeaseRequest
    since: float
    seq: int


# Events the manager asks the servicer to deliver to a stream.
@dataclass
class Granted:
    stream: str
    lease: Lease


@dataclass
class Revoke:
    stream: str
    lease: Lease
    reason: str


@dataclass
class Ended:
    stream: str
    lease: Lease
    reason: str  # released, expired


@dataclass
class Queued:
    stream: str
    position: int
    reason: str


Event = Granted | Revoke | Ended | Queued


@dataclass
class LeasePolicy:
    capacity_bytes: int
    ttl_s: float = 6.0
    renew_deadline_s: float = 4.0
    min_residency_s: float = 10.0
    revoke_deadline_s: float = 10.0
    max_waiters: int = 16

    def __post_init__(self):
        if not 0 < self.renew_deadline_s < self.ttl_s:
            raise ValueError("leases: renew_deadline_s must be > 0 and < ttl_s")


@dataclass
class LeaseManager:
    policy: LeasePolicy
    clock: Callable[[], float] = time.monotonic
    leases: dict[int, Lease] = field(default_factory=dict)
    waiters: list[Waiter] = field(default_factory=list)
    _epochs: itertools.count = field(default_factory=lambda: itertools.count(1))
    _seq: itertools.count = field(default_factory=itertools.count)
    last_epoch: int = 0
    # Every holder name that ever asked: their models time-share the card (residency-aware routing reads it).
    holders_seen: set[str] = field(default_factory=set)
    # Each holder's swap-in cost as its latest acquire gave it (measured by the holder once it has loaded).
    swap_in_ms_seen: dict[str, int] = field(default_factory=dict)

    # --- queries ----------------------------------------------------------------------------------------------
    @property
    def granted_bytes(self) -> int:
        return sum(lease.bytes for lease in self.leases.values())

    @property
    def free_bytes(self) -> int:
        return self.policy.capacity_bytes - self.granted_bytes

    def expires_at(self, lease: Lease) -> float:
        return lease.renewed_at + self.policy.ttl_s

    def _ordered_waiters(self) -> list[Waiter]:
        return sorted(self.waiters, key=lambda w: (-w.request.priority, w.seq))

    # --- holder actions -----------------------------------------------------------------------------------------
    def acquire(self, stream: str, request: LeaseRequest) -> list[Event]:
        if request.bytes <= 0:
            raise InvalidArgument("acquire.bytes", "must be > 0")
        if request.bytes > self.policy.capacity_bytes:
            raise ResourceExhausted(
                f"acquire.bytes: {request.bytes} bytes is more than the card's capacity of"
                f" {self.policy.capacity_bytes} bytes; this model cannot fit on this card"
            )
        if any(lease.stream == stream for lease in self.leases.values()) or any(
            w.stream == stream for w in self.waiters
        ):
            raise FailedPrecondition("acquire: this stream already holds or waits for a lease; release it first")
        if len(self.waiters) >= self.policy.max_waiters:
            raise ResourceExhausted(f"acquire: {len(self.waiters)} requests already wait for GPU memory; retry later")
        self.waiters.append(Waiter(stream, request, self.clock(), next(self._seq)))
        self.holders_seen.add(request.holder)
        self.swap_in_ms_seen[request.holder] = request.swap_in_ms
        events = self.tick()
        if not any(isinstance(e, Granted) and e.stream == stream for e in events):
            position = [w.stream for w in self._ordered_waiters()].index(stream)
            events.append(Queued(stream, position, self._wait_reason(request)))
        return events

    def renew(self, stream: str, epoch: int, busy: bool) -> Lease:
        lease = self.leases.get(epoch)
        if lease is None or lease.stream != stream:
            raise FailedPrecondition(f"renew.epoch: lease {epoch} is not held by this stream (expired or released)")
        if lease.revoking:
            raise FailedPrecondition(
                f"renew.epoch: lease {epoch} is revoked ({lease.revoke_reason}); offload and release"
            )
        now = self.clock()
        if now >= self.expires_at(lease):
            raise FailedPrecondition(f"renew.epoch: lease {epoch} expired; stop GPU work and acquire again")
        lease.renewed_at = now
        lease.busy = busy
        if busy:
            lease.last_busy_at = now
        return lease

    def release(self, stream: str, epoch: int) -> list[Event]:
        lease = self.leases.get(epoch)
        if lease is None or lease.stream != stream:
            raise FailedPrecondition(f"release.epoch: lease {epoch} is not held by this stream")
        del self.leases[epoch]
        return [Ended(stream, lease, "released"), *self.tick()]

    def disconnect(self, stream: str) -> list[Event]:
        """The holder's stream closed: its waits end; its lease stays counted until it expires."""
        self.waiters = [w for w in self.waiters if w.stream != stream]
        for lease in self.leases.values():
            if lease.stream == stream:
                lease.orphaned = True
        return self.tick()

    # --- time -------------------------------------------------------------------------------------------------
    def tick(self) -> list[Event]:
        """Expire, grant what fits (in order), revoke to make room. Call on every action and periodically."""
        now = self.clock()
        events: list[Event] = []
        for epoch, lease in list(self.leases.items()):
            if now >= self.expires_at(lease):
                del self.leases[epoch]
                events.append(Ended(lease.stream, lease, "expired"))
        for waiter in self._ordered_waiters():
            if waiter.request.bytes <= self.free_bytes:
                events.append(self._grant(waiter, now))
                continue
            events += self._make_room(waiter, now)
            break  # strict order: nobody overtakes a waiter that does not fit yet
        return events

    def _grant(self, waiter: Waiter, now: float) -> Granted:
        self.waiters.remove(waiter)
        epoch = next(self._epochs)
        assert epoch > self.last_epoch
        self.last_epoch = epoch
        lease = Lease(epoch, waiter.stream, waiter.request, granted_at=now, renewed_at=now, last_busy_at=now)
        self.leases[epoch] = lease
        return Granted(waiter.stream, lease)

    def _make_room(self, waiter: Waiter, now: float) -> list[Event]:
        need = (
            waiter.request.bytes
            - self.free_bytes
            - sum(lease.bytes for lease in self.leases.values() if lease.revoking)
        )
        if need <= 0:
            return []  # revocations already under way free enough
        candidates = sorted(
            (
                lease
                for lease in self.leases.values()
                if not lease.revoking
                and not lease.busy
                and lease.request.priority <= waiter.request.priority
                and now - lease.granted_at >= self.policy.min_residency_s
            ),
            key=lambda lease: (lease.request.priority, lease.request.swap_in_ms, lease.last_busy_at),
        )
        chosen, freed = [], 0
        for lease in candidates:
            if freed >= need:
                break
            chosen.append(lease)
            freed += lease.bytes
        if freed < need:
            return []  # cannot make room now; wait for releases, expiries or holders going idle
        events = []
        for lease in chosen:
            lease.revoking = True
            lease.revoke_reason = f"room for {waiter.request.holder} ({waiter.request.bytes} bytes)"
            events.append(Revoke(lease.stream, lease, lease.revoke_reason))
        return events

    def _wait_reason(self, request: LeaseRequest) -> str:
        return (
            f"{request.bytes} bytes needed, {self.free_bytes} free of {self.policy.capacity_bytes};"
            f" {sum(1 for lease in self.leases.values() if lease.revoking)} revocation(s) under way"
        )
