"""GpuLeases over real gRPC on loopback: time-sharing, revocation with offload, a killed holder's bytes coming back."""

from __future__ import annotations

import asyncio
import signal
import sys

import grpc
import pytest

from services.cli.fleet import free_port
from services.common.server import Servicer, add_servicers
from services.residency.lease_client import GpuLease
from services.residency.lease_servicer import GpuLeasesServicer
from services.residency.lease_table import LeaseManager, LeasePolicy
from voice.v1 import gpu_pb2, gpu_pb2_grpc

GB = 1 << 30
REALTIME, INTERACTIVE, BATCH = (
    gpu_pb2.LEASE_PRIORITY_REALTIME,
    gpu_pb2.LEASE_PRIORITY_INTERACTIVE,
    gpu_pb2.LEASE_PRIORITY_BATCH,
)


@pytest.fixture
async def lease_router():
    policy = LeasePolicy(24 * GB, ttl_s=1.5, renew_deadline_s=1.0, min_residency_s=0.2, revoke_deadline_s=2.0)
    servicer = GpuLeasesServicer(LeaseManager(policy), tick_s=0.05)
    server = grpc.aio.server()
    add_servicers(
        server, "router", [Servicer(gpu_pb2_grpc.add_GpuLeasesServicer_to_server, servicer, "voice.v1.GpuLeases")]
    )
    address = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(address)
    await server.start()
    await servicer.start()
    channel = grpc.aio.insecure_channel(address)
    yield address, channel, gpu_pb2_grpc.GpuLeasesStub(channel)
    await channel.close()
    await servicer.stop()
    await server.stop(0)


async def table(stub):
    return await stub.ListLeases(gpu_pb2.ListLeasesRequest(), timeout=5)


async def test_models_that_do_not_fit_take_turns(lease_router):
    _, channel, stub = lease_router
    offloaded = []

    async def offload(reason):
        offloaded.append(reason)

    cosy = GpuLease(channel, "cosyvoice_tts", "cv3", 8 * GB, BATCH, swap_in_ms=3000, on_revoke=offload)
    epoch_cosy = await cosy.acquire(wait_s=5)
    assert cosy.may_use_gpu()
    moss = GpuLease(channel, "moss_sts", "MOSS-Speech", 20 * GB, REALTIME)
    epoch_moss = await moss.acquire(wait_s=5)  # cosy is revoked, offloads, releases; then moss is granted
    assert epoch_moss > epoch_cosy
    assert offloaded and "moss_sts" in offloaded[0]
    assert not cosy.may_use_gpu()
    t = await table(stub)
    assert [(lease.holder, lease.bytes) for lease in t.leases] == [("moss_sts", 20 * GB)]
    assert t.granted_bytes <= t.capacity_bytes
    # Renewals keep moss alive past several TTLs.
    await asyncio.sleep(2.0)
    assert moss.may_use_gpu() and moss.epoch == epoch_moss
    await moss.close()
    # cosy gets its turn again.
    again = GpuLease(channel, "cosyvoice_tts", "cv3", 8 * GB, BATCH)
    assert await again.acquire(wait_s=5) > epoch_moss
    await again.close()
    await cosy.close()


async def test_a_closed_lease_is_released_at_once_not_left_to_expire(lease_router):
    """close() makes sure the release reaches the router before the stream goes: the bytes come back at once, not a
    TTL later as after a crash (an offloaded model's card space was held on for the TTL)."""
    _, channel, stub = lease_router
    for _ in range(5):
        lease = GpuLease(channel, "cosyvoice_tts", "cv3", 8 * GB, BATCH)
        await lease.acquire(wait_s=5)
        assert [x.holder for x in (await table(stub)).leases] == ["cosyvoice_tts"]
        await lease.close()
        assert (await table(stub)).granted_bytes == 0


async def test_busy_holder_keeps_its_lease_and_the_waiter_is_told(lease_router):
    _, channel, stub = lease_router
    busy = GpuLease(channel, "qwen_tts", "q", 20 * GB, INTERACTIVE, busy=lambda: True)
    await busy.acquire(wait_s=5)
    progress = []
    waiter = GpuLease(channel, "moss_sts", "m", 20 * GB, REALTIME)
    with pytest.raises(Exception, match="no GPU lease was granted in time"):
        await waiter.acquire(progress=progress.append, wait_s=1.5)
    assert progress and "queue position 0" in progress[0]
    assert busy.may_use_gpu()
    await waiter.close()
    await busy.close()


async def test_too_big_is_resource_exhausted(lease_router):
    _, channel, _ = lease_router
    lease = GpuLease(channel, "moss_sts", "m", 30 * GB, REALTIME)
    with pytest.raises(Exception, match="more than the card's capacity"):
        await lease.acquire(wait_s=5)
    await lease.close()


async def test_killed_holder_bytes_come_back_within_ttl(lease_router):
    address, channel, stub = lease_router
    holder = await asyncio.create_subprocess_exec(
        *[
            sys.executable,
            "-m",
            "services.residency.lease_client",
            "--router",
            address,
            "--holder",
            "victim",
            "--gb",
            "20",
        ],
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        line = (await asyncio.wait_for(holder.stdout.readline(), 20)).decode()
        assert line.startswith("GRANTED"), line
        holder.send_signal(signal.SIGKILL)
        await asyncio.wait_for(holder.wait(), 5)
        # Right after the crash its bytes are still counted (it may still be on the card until the TTL)...
        assert (await table(stub)).granted_bytes == 20 * GB
        # ...and a new holder is granted once the lease expires.
        nxt = GpuLease(channel, "cosyvoice_tts", "cv3", 8 * GB, BATCH)
        epoch = await nxt.acquire(wait_s=5)
        t = await table(stub)
        assert [lease.holder for lease in t.leases] == ["cosyvoice_tts"] and t.leases[0].epoch == epoch
        await nxt.close()
    finally:
        if holder.returncode is None:
            holder.kill()


def test_router_of_the_fleet_grants_leases(cpu_fleet):
    """The fleet's router serves GpuLeases on its port, with the configured card (24 GiB by default)."""
    import subprocess

    holder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.residency.lease_client",
            "--router",
            cpu_fleet.address("router"),
            "--holder",
            "ops-check",
            "--gb",
            "2",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().startswith("GRANTED")
        with cpu_fleet.channel("router") as channel:
            t = gpu_pb2_grpc.GpuLeasesStub(channel).ListLeases(gpu_pb2.ListLeasesRequest(), timeout=5)
        assert t.capacity_bytes == 24 * GB
        assert [(lease.holder, lease.bytes) for lease in t.leases] == [("ops-check", 2 * GB)]
    finally:
        holder.kill()
        holder.wait()
