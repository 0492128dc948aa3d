"""GPU leases: grant latency, revoke -> release -> grant handover, and the lease table's decision time."""

from __future__ import annotations

import asyncio
import time

import grpc

from bench.harness import Row
from services.cli.fleet import free_port
from services.common.server import Servicer, add_servicers
from services.residency.lease_client import GpuLease
from services.residency.lease_servicer import GpuLeasesServicer
from services.residency.lease_table import LeaseManager, LeasePolicy, LeaseRequest

GB = 1 << 30
RUNS = 40


async def _over_grpc() -> tuple[list[float], list[float]]:
    policy = LeasePolicy(24 * GB, ttl_s=6, renew_deadline_s=4, min_residency_s=0, revoke_deadline_s=5)
    servicer = GpuLeasesServicer(LeaseManager(policy), tick_s=0.05)
    server = grpc.aio.server()
    from voice.v1 import gpu_pb2_grpc

    add_servicers(
        server, "router", [Servicer(gpu_pb2_grpc.add_GpuLeasesServicer_to_server, servicer, "voice.v1.GpuLeases")]
    )
    address = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(address)
    await server.start()
    await servicer.start()
    grants, handovers = [], []
    async with grpc.aio.insecure_channel(address) as channel:
        for _ in range(RUNS):
            lease = GpuLease(channel, "bench", "m", 8 * GB, 2)
            t0 = time.perf_counter()
            await lease.acquire(wait_s=5)
            grants.append(time.perf_counter() - t0)
            await lease.close()
        for _ in range(RUNS // 2):
            holder = GpuLease(channel, "batch", "m", 20 * GB, 1)
            await holder.acquire(wait_s=5)
            await asyncio.sleep(0.02)  # its first renew says idle
            waiter = GpuLease(channel, "live", "m", 20 * GB, 3)
            t0 = time.perf_counter()
            await waiter.acquire(wait_s=5)  # revoke sent, holder releases, waiter granted
            handovers.append(time.perf_counter() - t0)
            await waiter.close()
            await holder.close()
    await servicer.stop()
    await server.stop(0)
    return grants, handovers


def _decision_time() -> list[float]:
    """One tick with 8 holders and a waiter that needs revocations (pure table work, no I/O)."""
    samples = []
    for _ in range(200):
        now = [0.0]
        m = LeaseManager(LeasePolicy(48 * GB, min_residency_s=0), clock=lambda now=now: now[0])
        for i in range(8):
            m.acquire(f"s{i}", LeaseRequest(f"h{i}", "m", 5 * GB, 1 + i % 2, swap_in_ms=100 * i))
        now[0] = 1.0
        t0 = time.perf_counter()
        m.acquire("w", LeaseRequest("w", "m", 20 * GB, 3))
        samples.append(time.perf_counter() - t0)
    return samples


def run():
    grants, handovers = asyncio.run(_over_grpc())
    rows = [
        Row("lease acquire -> granted (free card, loopback gRPC)", "s", grants),
        Row("revoke handover: REALTIME acquire -> BATCH released -> granted", "s", handovers, "ticker 50 ms"),
        Row("lease table decision (8 holders, revocation needed)", "s", _decision_time()),
    ]
    return rows, {}
