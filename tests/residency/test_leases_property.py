"""The lease table's invariants under random sequences of acquire / renew / release / crash / time passing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from services.common.errors import VoiceError
from services.residency.lease_table import Ended, Granted, LeaseManager, LeasePolicy, LeaseRequest, Revoke

# CPU work with no clock in it: `make test` runs it in its background lane (scripts/test-lanes.sh).
pytestmark = pytest.mark.background

GB = 1 << 30
CAPACITY = 24 * GB
STREAMS = [f"s{i}" for i in range(6)]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class LeaseTable(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.clock = Clock()
        self.manager = LeaseManager(
            LeasePolicy(CAPACITY, ttl_s=6, renew_deadline_s=4, min_residency_s=3, max_waiters=8), clock=self.clock
        )
        self.epochs_seen: list[int] = []
        self.revoked: set[int] = set()
        self.crashed: set[str] = set()

    def record(self, events):
        for e in events:
            if isinstance(e, Granted):
                self.epochs_seen.append(e.lease.epoch)
                assert e.stream not in self.crashed, "granted to a stream that closed"
            if isinstance(e, Revoke):
                self.revoked.add(e.lease.epoch)
            if isinstance(e, Ended) and e.reason == "expired":
                assert self.clock.now >= e.lease.renewed_at + 6

    @rule(
        stream=st.sampled_from(STREAMS),
        gb=st.integers(min_value=1, max_value=26),
        priority=st.integers(min_value=1, max_value=3),
        swap=st.integers(min_value=0, max_value=5000),
    )
    def acquire(self, stream, gb, priority, swap):
        self.crashed.discard(stream)
        try:
            self.record(self.manager.acquire(stream, LeaseRequest(stream, "m", gb * GB, priority, swap)))
        except VoiceError:
            pass

    @rule(stream=st.sampled_from(STREAMS), busy=st.booleans())
    def renew(self, stream, busy):
        for lease in list(self.manager.leases.values()):
            if lease.stream == stream and stream not in self.crashed:
                try:
                    renewed = self.manager.renew(stream, lease.epoch, busy)
                except VoiceError:
                    assert lease.revoking or self.clock.now >= lease.renewed_at + 6
                else:
                    assert not renewed.revoking, "a revoked lease was renewed"

    @rule(stream=st.sampled_from(STREAMS))
    def release(self, stream):
        for lease in list(self.manager.leases.values()):
            if lease.stream == stream and stream not in self.crashed:
                self.record(self.manager.release(stream, lease.epoch))

    @rule(stream=st.sampled_from(STREAMS))
    def crash(self, stream):
        self.crashed.add(stream)
        self.record(self.manager.disconnect(stream))

    @rule(seconds=st.floats(min_value=0.1, max_value=8))
    def time_passes(self, seconds):
        self.clock.now += seconds
        self.record(self.manager.tick())

    @precondition(lambda self: bool(self.manager.waiters))
    @rule()
    def holders_release_when_revoked(self):
        for lease in list(self.manager.leases.values()):
            if lease.revoking and lease.stream not in self.crashed:
                self.record(self.manager.release(lease.stream, lease.epoch))

    @invariant()
    def granted_bytes_never_exceed_capacity(self):
        assert self.manager.granted_bytes <= CAPACITY

    @invariant()
    def epochs_strictly_increase(self):
        assert self.epochs_seen == sorted(set(self.epochs_seen))

    @invariant()
    def one_lease_per_stream(self):
        streams = [lease.stream for lease in self.manager.leases.values()]
        assert len(streams) == len(set(streams))

    @invariant()
    def no_lease_outlives_its_ttl(self):
        self.record(self.manager.tick())  # expired leases go at the next tick
        assert all(self.clock.now < lease.renewed_at + 6 for lease in self.manager.leases.values())

    @invariant()
    def a_waiter_that_fits_is_not_left_waiting(self):
        waiters = self.manager._ordered_waiters()
        if waiters:
            assert waiters[0].request.bytes > self.manager.free_bytes


TestLeaseTable = LeaseTable.TestCase
TestLeaseTable.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def make(capacity=CAPACITY, **kw):
    clock = Clock()
    return LeaseManager(LeasePolicy(capacity, ttl_s=6, renew_deadline_s=4, min_residency_s=3, **kw), clock=clock), clock


def test_two_models_that_do_not_fit_take_turns():
    m, clock = make()
    moss, cosy = (
        LeaseRequest("moss_sts", "MOSS", 18 * GB, 3, 8000),
        LeaseRequest("cosyvoice_tts", "cv3", 8 * GB, 1, 3000),
    )
    (granted,) = m.acquire("cosy", cosy)
    assert isinstance(granted, Granted)
    clock.now += 1
    events = m.acquire("moss", moss)
    assert [type(e).__name__ for e in events] == ["Queued"], "cosy is inside its minimum residency"
    clock.now += 3
    events = m.tick()
    assert [type(e).__name__ for e in events] == ["Revoke"] and events[0].stream == "cosy"
    with pytest.raises(VoiceError, match="revoked"):
        m.renew("cosy", granted.lease.epoch, busy=False)
    events = m.release("cosy", granted.lease.epoch)
    assert [type(e).__name__ for e in events] == ["Ended", "Granted"]
    assert events[1].stream == "moss" and events[1].lease.epoch > granted.lease.epoch


def test_busy_and_higher_priority_holders_are_not_revoked():
    m, clock = make()
    (a,) = m.acquire("a", LeaseRequest("a", "m", 20 * GB, 2))
    clock.now += 5
    m.renew("a", a.lease.epoch, busy=True)
    assert [type(e).__name__ for e in m.acquire("b", LeaseRequest("b", "m", 10 * GB, 3))] == ["Queued"]
    m.renew("a", a.lease.epoch, busy=False)
    assert any(isinstance(e, Revoke) for e in m.tick())
    m2, clock2 = make()
    m2.acquire("a", LeaseRequest("a", "m", 20 * GB, 3))
    clock2.now += 5
    assert [type(e).__name__ for e in m2.acquire("b", LeaseRequest("b", "m", 10 * GB, 2))] == ["Queued"]
    assert not m2.tick()


def test_crashed_holder_bytes_return_at_expiry_not_before():
    m, clock = make()
    (a,) = m.acquire("a", LeaseRequest("a", "m", 20 * GB, 1))
    m.disconnect("a")
    assert m.acquire("b", LeaseRequest("b", "m", 10 * GB, 1))[0].__class__.__name__ == "Queued"
    clock.now += 5.9
    assert not any(isinstance(e, Granted) for e in m.tick())
    clock.now += 0.2
    events = m.tick()
    assert [type(e).__name__ for e in events] == ["Ended", "Granted"]


def test_bad_acquires_are_refused_with_reasons():
    m, _ = make()
    with pytest.raises(VoiceError, match="more than the card's capacity"):
        m.acquire("a", LeaseRequest("a", "m", 25 * GB, 1))
    with pytest.raises(VoiceError, match="must be > 0"):
        m.acquire("a", LeaseRequest("a", "m", 0, 1))
    m.acquire("a", LeaseRequest("a", "m", 1 * GB, 1))
    with pytest.raises(VoiceError, match="already holds"):
        m.acquire("a", LeaseRequest("a", "m", 1 * GB, 1))


def test_residency_aware_routing_reads_the_holders_latest_swap_in():
    """A holder's lease asks with its measured swap-in once it has loaded: the router's cold/warm decision follows
    that figure, not the configured first guess."""
    from services.common.config.residency import HolderConfig, ResidencyConfig
    from services.router.placement import LocalLeaseTables, PlacementView

    m, _clock = make()
    view = PlacementView(
        LocalLeaseTables(m), ResidencyConfig(services={"moss_sts": HolderConfig(swap_in_ms=8000)}), {}, 1000
    )
    for swap_in_ms, cold in ((8000, True), (400, False)):
        stream = f"s{swap_in_ms}"
        epoch = next(
            e.lease.epoch
            for e in m.acquire(stream, LeaseRequest("moss_sts", "m", 1, 2, swap_in_ms))
            if isinstance(e, Granted)
        )
        assert view.warm("moss_sts")
        m.release(stream, epoch)
        assert view.too_cold("moss_sts", 1000) is cold
