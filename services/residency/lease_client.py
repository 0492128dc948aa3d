"""Holding a GPU lease (the holder side of voice.v1.GpuLeases: the router's, or the card's lease authority).

A model service acquires before its weights go on the card, renews every ``renew_deadline / 3`` while it holds
them, and checks ``may_use_gpu()`` (monotonic clock) before GPU work: once ``renew_deadline`` passes without a
successful renew it stops by itself — the router's TTL is longer, so the next holder never overlaps it. A revoke
calls ``on_revoke`` (offload, then ``release()``); a lease that ends without release (expired, router restarted)
calls ``on_lost``.

Also a command for operators and fault tests:
    python -m services.residency.lease_client --router 127.0.0.1:50051 --holder demo --gb 8 [--priority REALTIME]
holds a lease until killed (prints GRANTED epoch=N when it has it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import grpc

from services.common import security
from services.common.errors import FailedPrecondition, Unavailable
from services.common.rpc import new_request_id
from voice.v1 import gpu_pb2, gpu_pb2_grpc

log = logging.getLogger("voicefleet.lease")


def authority_addresses(authorities: list[str]) -> tuple[list[str], list[str]]:
    """Every card's lease authority as host:port, and the problems: an authority whose host resolves to several
    addresses (a Kubernetes headless Service) names each of them; one that does not resolve is a problem. Blocking
    (DNS): the router runs it on a thread, the CLI as is."""
    import socket

    cards: list[str] = []
    problems: list[str] = []
    for authority in authorities:
        host, _, port = authority.rpartition(":")
        try:
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except OSError as e:
            problems.append(f"lease authority {authority} does not resolve ({e})")
            continue
        cards += [f"[{i[4][0]}]:{port}" if ":" in i[4][0] else f"{i[4][0]}:{port}" for i in infos]
    return list(dict.fromkeys(cards)), problems


class GpuLease:
    def __init__(
        self,
        channel: grpc.aio.Channel,
        holder: str,
        model: str,
        nbytes: int,
        priority: int = gpu_pb2.LEASE_PRIORITY_INTERACTIVE,
        swap_in_ms: int = 0,
        swap_out_ms: int = 0,
        on_revoke: Callable[[str], Awaitable[None]] | None = None,
        on_lost: Callable[[str], Awaitable[None]] | None = None,
        busy: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stub = gpu_pb2_grpc.GpuLeasesStub(channel)
        self.acquire_message = gpu_pb2.LeaseAcquire(
            holder=holder, model=model, bytes=nbytes, priority=priority, swap_in_ms=swap_in_ms, swap_out_ms=swap_out_ms
        )
        self.on_revoke = on_revoke
        self.on_lost = on_lost
        self.busy = busy
        self.clock = clock
        self.epoch: int | None = None
        self.renew_deadline_s = 0.0
        self.last_renewed = float("-inf")
        self.queue_position: int | None = None
        self.revoked = False
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._granted = asyncio.Event()
        self._ended = asyncio.Event()
        self._call = None
        self._tasks: list[asyncio.Task] = []
        self._closed_error: BaseException | None = None
        self.lost = asyncio.Event()  # set when a held lease ends without our release
        self.released = asyncio.Event()  # set when we release (after a revoke, or on close)

    def may_use_gpu(self) -> bool:
        """True while the lease is held and renewed within its renew deadline (monotonic clock)."""
        return self.epoch is not None and self.clock() - self.last_renewed < self.renew_deadline_s

    async def _requests(self):
        while True:
            message = await self._outbox.get()
            if message is None:
                return
            yield message

    async def acquire(self, progress: Callable[[str], None] | None = None, wait_s: float | None = None) -> int:
        """Open the stream and wait for a grant (progress gets 'queued at N: reason' lines)."""
        self._progress = progress
        self._call = self.stub.Lease(self._requests(), wait_for_ready=True)  # the router may still be starting
        self._outbox.put_nowait(gpu_pb2.LeaseRequest(request_id=new_request_id(), acquire=self.acquire_message))
        self._tasks.append(asyncio.create_task(self._read(), name="lease-read"))
        waiter = asyncio.create_task(self._granted.wait())
        ended = asyncio.create_task(self._ended.wait())
        try:
            done, _ = await asyncio.wait({waiter, ended}, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            ended.cancel()
        if self.epoch is None:
            if self._closed_error is not None:
                raise self._closed_error
            raise Unavailable("no GPU lease was granted in time; the card is busy with higher-priority models")
        self._tasks.append(asyncio.create_task(self._renew_forever(), name="lease-renew"))
        self._tasks.append(asyncio.create_task(self._watchdog(), name="lease-watchdog"))
        return self.epoch

    async def _read(self) -> None:
        try:
            async for reply in self._call:
                kind = reply.WhichOneof("event")
                if kind == "granted":
                    self.epoch = reply.granted.epoch
                    self.renew_deadline_s = reply.granted.renew_deadline_ms / 1000
                    self.last_renewed = self.clock()
                    self.revoked = False
                    self._granted.set()
                elif kind == "renewed" and reply.renewed.epoch == self.epoch:
                    self.last_renewed = self.clock()
                elif kind == "queued":
                    self.queue_position = reply.queued.position
                    if self._progress:
                        self._progress(
                            f"waiting for GPU memory (queue position {reply.queued.position}): {reply.queued.reason}"
                        )
                elif kind == "revoke" and reply.revoke.epoch == self.epoch and not self.revoked:
                    self.revoked = True
                    self._tasks.append(asyncio.create_task(self._handle_revoke(reply.revoke.reason)))
                elif kind == "ended" and reply.ended.epoch == self.epoch:
                    self._lose(f"lease {self.epoch} ended: {reply.ended.reason}")
        except grpc.aio.AioRpcError as e:
            self._closed_error = (
                FailedPrecondition(e.details())
                if e.code() != grpc.StatusCode.UNAVAILABLE
                else Unavailable(f"router lease stream broke: {e.details()}")
            )
            if self.epoch is not None:
                self._lose(f"lease stream broke: {e.code().name}")
        finally:
            self._ended.set()

    def _lose(self, reason: str) -> None:
        epoch, self.epoch = self.epoch, None
        if epoch is not None:
            self.lost.set()
            log.warning("%s; stopping GPU work", reason)
            if self.on_lost:
                self._tasks.append(asyncio.create_task(self.on_lost(reason)))

    async def _handle_revoke(self, reason: str) -> None:
        log.info("lease %s revoked (%s): offloading", self.epoch, reason)
        if self.on_revoke:
            await self.on_revoke(reason)
        await self.release()

    async def _renew_forever(self) -> None:
        # The first renew goes out at once: it tells the router whether we are busy (busy holders are not revoked).
        while self.epoch is not None:
            if not self.revoked:
                self._outbox.put_nowait(
                    gpu_pb2.LeaseRequest(
                        request_id=new_request_id(), renew=gpu_pb2.LeaseRenew(epoch=self.epoch, busy=self.busy())
                    )
                )
            await asyncio.sleep(self.renew_deadline_s / 3)

    async def _watchdog(self) -> None:
        """Stop GPU work by ourselves when the renew deadline passes (e.g. the router is unreachable)."""
        while self.epoch is not None:
            await asyncio.sleep(self.renew_deadline_s / 10)
            if self.epoch is not None and not self.may_use_gpu():
                self._lose(f"lease {self.epoch}: renew deadline passed")

    async def release(self) -> None:
        if self.epoch is None:
            return
        epoch, self.epoch = self.epoch, None
        self._outbox.put_nowait(
            gpu_pb2.LeaseRequest(request_id=new_request_id(), release=gpu_pb2.LeaseRelease(epoch=epoch))
        )
        self.released.set()

    async def close(self, wait_s: float = 2.0) -> None:
        """Release and end the stream. Waits (bounded) for the router to end it: the release must reach the router,
        or the bytes stay granted until the lease's TTL runs out, as after a crash."""
        await self.release()
        self._outbox.put_nowait(None)  # half-close: the router handles what was sent, then ends the stream
        if self._call is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ended.wait(), wait_s)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._call is not None:
            self._call.cancel()


async def _hold(args) -> None:
    if args.config:
        from services.common.config import load_config

        security.configure(load_config(args.config).security)
    async with security.fleet_channel(args.router) as channel:
        lease = GpuLease(
            channel,
            args.holder,
            args.model,
            int(args.gb * (1 << 30)),
            gpu_pb2.LeasePriority.Value(f"LEASE_PRIORITY_{args.priority}"),
        )
        epoch = await lease.acquire(progress=lambda line: print(line, flush=True))
        print(f"GRANTED epoch={epoch}", flush=True)
        lost, released = asyncio.create_task(lease.lost.wait()), asyncio.create_task(lease.released.wait())
        await asyncio.wait({lost, released}, return_when=asyncio.FIRST_COMPLETED)
        print("RELEASED (revoked)" if lease.released.is_set() else "LEASE LOST", flush=True)
        await lease.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="hold a GPU lease from the router until killed")
    parser.add_argument("--router", default="127.0.0.1:50051")
    parser.add_argument("--config", help="fleet config (for TLS and the fleet token)")
    parser.add_argument("--holder", required=True)
    parser.add_argument("--model", default="manual")
    parser.add_argument("--gb", type=float, required=True)
    parser.add_argument("--priority", default="INTERACTIVE", choices=["BATCH", "INTERACTIVE", "REALTIME"])
    asyncio.run(_hold(parser.parse_args()))


if __name__ == "__main__":
    main()
