"""Beyond one card: two routers, two "nodes", leases held per card (docs/scale.md). Real processes on loopback.

Each node is a set of model services (here cosyvoice_tts, its CPU engine accounting 8 GiB on a 10 GiB virtual card)
with its own lease authority (services/residency/__main__.py). Both routers name both nodes' replicas in one
gRPC target (as a Kubernetes headless Service would) and read both cards' lease tables. The test shows:

* both routers send work to both nodes (each node's own request counter, scraped from its /metrics);
* no card is over-granted: each card's table holds its own node's model, a further holder on a full card waits, and
  the routers grant nothing (two routers granting one card is what per-card authorities are for);
* a node killed (SIGKILL of its model service and its authority, as when a machine dies) is dropped by both routers:
  every request afterwards succeeds, served by the other node, and both routers drop the dead card's table.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from services.cli.fleet import free_port
from services.residency.lease_client import GpuLease
from tests.conftest import start_fleet, wait_until
from voice.v1 import fleet_pb2, fleet_pb2_grpc, gpu_pb2, gpu_pb2_grpc, synthesizer_pb2, synthesizer_pb2_grpc

GB = 1 << 30
CARD_GB = 10
REQUESTS_PER_ROUTER = 6
CARD_POLICY = {"capacity_gb": CARD_GB, "min_residency_seconds": 1, "ttl_seconds": 3, "renew_deadline_seconds": 2}


def start_node(directory, card: str):
    authority_port = free_port()
    return start_fleet(
        directory,
        services=("lease_authority", "cosyvoice_tts"),
        lease_authority={"port": authority_port, "card": card},
        router={"leases": CARD_POLICY},  # the card policy the authority grants with
        residency={
            "enabled": True,
            "lease_authority": f"127.0.0.1:{authority_port}",
            "services": {"cosyvoice_tts": {"declared_gb": 8, "priority": "INTERACTIVE", "swap_in_ms": 1000}},
        },
    )


def start_router(directory, nodes):
    replicas = ",".join(node.address("cosyvoice_tts") for node in nodes)
    return start_fleet(
        directory,
        services=("router",),
        router={
            "backends": {"cosyvoice_tts": f"ipv4:{replicas}"},
            "leases": {
                **CARD_POLICY,
                "authorities": [node.address("lease_authority") for node in nodes],
                "authorities_poll_seconds": 0.5,
            },
        },
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = [start_node(tmp_path_factory.mktemp(f"node-{card}"), card) for card in ("a", "b")]
    routers = [start_router(tmp_path_factory.mktemp(f"router-{i}"), nodes) for i in (1, 2)]
    yield nodes, routers
    for running in (*routers, *nodes):
        running.fleet.stop()


def served(node) -> float:
    return node.metric("cosyvoice_tts", "voicefleet_requests_total", method="Synthesize", code="OK")


def speak_through(router, text: str = "Hello there.") -> bytes:
    with router.channel("router") as channel:
        replies = list(
            synthesizer_pb2_grpc.SynthesizerStub(channel).Synthesize(
                synthesizer_pb2.SynthesizeRequest(text=text), timeout=60
            )
        )
    return b"".join(r.audio.data for r in replies)


def table(node) -> gpu_pb2.ListLeasesResponse:
    with node.channel("lease_authority") as channel:
        return gpu_pb2_grpc.GpuLeasesStub(channel).ListLeases(gpu_pb2.ListLeasesRequest(), timeout=10)


def test_both_routers_send_work_to_both_nodes(cluster):
    nodes, routers = cluster
    for router in routers:
        before = [served(node) for node in nodes]
        for _ in range(REQUESTS_PER_ROUTER):
            assert len(speak_through(router)) > 8000  # > 0.25 s of 16 kHz audio
        gained = [served(node) - b for node, b in zip(nodes, before, strict=True)]
        assert sum(gained) == REQUESTS_PER_ROUTER
        assert all(g >= 1 for g in gained), f"{router.config_path}: per node {gained}"


def test_liveness_is_its_own_health_name(cluster):
    """Kubernetes' livenessProbe asks voicefleet.liveness; readiness ("") is what the routers' health checks ask."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    nodes, routers = cluster
    for running, name in ((nodes[0], "cosyvoice_tts"), (nodes[0], "lease_authority"), (routers[0], "router")):
        with running.channel(name) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in ("voicefleet.liveness", ""):
                answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING, (name, service)


def test_each_card_is_granted_by_its_own_authority_and_never_over_granted(cluster):
    nodes, routers = cluster
    for node in nodes:
        t = table(node)
        assert t.capacity_bytes == CARD_GB * GB and t.granted_bytes <= t.capacity_bytes
        assert [(lease.holder, lease.bytes) for lease in t.leases] == [("cosyvoice_tts", 8 * GB)]

    async def a_second_holder_on_a_full_card() -> tuple[str, gpu_pb2.ListLeasesResponse]:
        async with grpc.aio.insecure_channel(nodes[0].address("lease_authority")) as channel:
            lease = GpuLease(channel, "qwen_tts", "q", 8 * GB, gpu_pb2.LEASE_PRIORITY_BATCH)
            try:
                await lease.acquire(wait_s=1.5)
                outcome = f"granted epoch {lease.epoch}"
            except Exception as e:  # noqa: BLE001 - the outcome is what is asserted
                outcome = getattr(e, "message", str(e))
            waiting = table(nodes[0])
            await lease.close()
            return outcome, waiting

    outcome, during = asyncio.run(a_second_holder_on_a_full_card())
    assert "no GPU lease was granted in time" in outcome  # 8 + 8 GiB do not fit on a 10 GiB card
    assert [w.holder for w in during.waiting] == ["qwen_tts"] and during.granted_bytes == 8 * GB
    # The other card is untouched, and the routers grant nothing themselves.
    assert table(nodes[1]).granted_bytes == 8 * GB
    for router in routers:
        with router.channel("router") as channel:
            with pytest.raises(grpc.RpcError) as refused:
                gpu_pb2_grpc.GpuLeasesStub(channel).ListLeases(gpu_pb2.ListLeasesRequest(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "lease authority" in refused.value.details()


def test_status_shows_every_cards_table(cluster):
    import subprocess
    import sys

    nodes, routers = cluster
    result = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "--config", str(routers[0].config_path), "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    for node in nodes:
        assert f"GPU card {node.address('lease_authority')}: 10.0 GiB, 8.0 GiB granted" in result.stdout, (
            result.stdout + result.stderr
        )


@pytest.mark.resilience
def test_a_dead_node_is_dropped_by_both_routers(cluster):
    nodes, routers = cluster
    alive, dead = nodes
    for member in ("cosyvoice_tts", "lease_authority"):
        dead.fleet.members[member].process.kill()  # the machine is gone: no drain, no goodbye
    for member in dead.fleet.members.values():
        member.process.wait(timeout=10)
    before = served(alive)
    t0 = time.monotonic()
    for router in routers:
        for _ in range(REQUESTS_PER_ROUTER):
            assert len(speak_through(router)) > 8000
    # Every request after the kill was served, by the live node (recovery probes, if any, would add to it).
    assert served(alive) - before >= 2 * REQUESTS_PER_ROUTER, f"took {time.monotonic() - t0:.1f}s"
    for router in routers:
        with router.channel("router") as channel:
            status = fleet_pb2_grpc.FleetStub(channel).GetFleetStatus(fleet_pb2.GetFleetStatusRequest(), timeout=10)
        backend = next(b for b in status.backends if b.name == "cosyvoice_tts")
        assert backend.health == fleet_pb2.BACKEND_HEALTH_SERVING, backend
        log = router.fleet.members["router"].log_path
        # The router says which lease authority went silent, by its address.
        assert wait_until(lambda log=log: "does not answer" in log.read_text(), timeout=10), log.read_text()[-2000:]
        assert dead.address("lease_authority") in log.read_text()
