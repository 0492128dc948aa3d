"""The brain's front: one port, ``brain.workers`` model processes behind it, each serving one request at a time.

llama-cpp-python's server serves one request at a time (its model lock), so with one model process a conversation's
reply waited for every other session's reply to finish: 4 sessions on 2 cores waited 5.6-6.9 s (issue 49). Here
the brain runs ``workers`` such processes (services/brain/llama_server.py, one thread each; the GGUF is mapped, so
its weights are in memory once) and this front hands each model request to a free one:

* in order of kind when all are busy (services/common/brain_requests.py: a committed turn's reply first, then
  readings and held replies, read-aheads last; oldest first within a kind), across every process that asks;
* to the worker that served the same conversation last when it is free (``X-Voicefleet-Request-Id``: the session's
  id), so its prompt cache holds that conversation's context; else to the free worker idle longest;
* a caller that hangs up while waiting leaves the queue; one that hangs up mid-reply closes the worker's connection,
  which stops its generation (the server checks for the disconnect between tokens).

The front speaks just enough HTTP/1.1 to read a request's head and body and forwards both with ``Connection:
close``; the worker's response goes back byte for byte (its streamed events included). ``GET /v1/queue`` is the
front's own answer (its workers, how many are busy, who waits by kind); other requests (``GET /v1/models``, health
probes) go to a worker without taking a place. A worker that exits ends the front (exit 1), so
the fleet's supervisor restarts the brain whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from services.common.brain_requests import KIND_HEADER, QUEUE_PATH, TURN, queue_report, rank

log = logging.getLogger("voicefleet.brain")

# POSTs to these use the model: they take a worker's place.
MODEL_ROUTES = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/end_of_turn", "/v1/embeddings", "/v1/tools/prepare"}
)
AFFINITY_HEADER = "x-voicefleet-request-id"
MAX_HEAD_BYTES = 64 << 10
MAX_BODY_BYTES = 8 << 20
AFFINITIES_KEPT = 4096  # conversations whose last worker is remembered
WORKER_START_S = 300.0  # a worker loads and warms the model within this (a 2-core CI host under load: ~10 s)
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "te", "upgrade"})


@dataclass(order=True)
class _Waiter:
    rank: int
    order: int
    key: str = field(compare=False)
    kind: str = field(compare=False)
    granted: asyncio.Future = field(compare=False)


class WorkerPool:
    """``workers`` places, one request each; a freed one goes to the waiter of lowest rank, oldest first."""

    def __init__(self, workers: int):
        self.workers = workers
        self._free: OrderedDict[int, None] = OrderedDict((w, None) for w in range(workers))  # idle longest first
        self._waiting: list[_Waiter] = []
        self._order = itertools.count()
        self._last_worker: OrderedDict[str, int] = OrderedDict()

    @property
    def busy(self) -> int:
        return self.workers - len(self._free)

    def waiting(self) -> int:
        return len(self._waiting)

    def report(self) -> dict:
        """What ``GET /v1/queue`` answers (brain_requests.queue_report): the workers, how many are busy, who waits."""
        return queue_report(self.workers, self.busy, [w.kind for w in self._waiting])

    async def acquire(self, kind: str, key: str = "") -> int:
        """A worker for a request of ``kind`` from conversation ``key``. Cancelled while waiting: it leaves the queue
        (or hands on a worker granted as it was cancelled)."""
        if self._free and not self._waiting:
            return self._take(key)
        waiter = _Waiter(rank(kind), next(self._order), key, kind, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        try:
            return await waiter.granted
        except BaseException:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.granted.done() and not waiter.granted.cancelled():
                self.release(waiter.granted.result())
            raise

    def release(self, worker: int) -> None:
        self._free[worker] = None
        while self._free and self._waiting:
            waiter = min(self._waiting)
            self._waiting.remove(waiter)
            waiter.granted.set_result(self._take(waiter.key))

    def _take(self, key: str) -> int:
        worker = self._last_worker.get(key) if key else None
        if worker is None or worker not in self._free:
            worker = next(iter(self._free))  # the one idle longest: the others keep their recent conversations
        del self._free[worker]
        if key:
            self._last_worker[key] = worker
            self._last_worker.move_to_end(key)
            while len(self._last_worker) > AFFINITIES_KEPT:
                self._last_worker.popitem(last=False)
        return worker


class BadRequest(Exception):
    def __init__(self, status: int, reason: str, detail: str):
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


@dataclass
class Request:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str, default: str = "") -> str:
        return next((v for k, v in self.headers if k.lower() == name), default)

    def forwarded(self) -> bytes:
        """The request for a worker: its own head without hop-by-hop headers, ``Connection: close``, the body."""
        lines = [f"{self.method} {self.path} HTTP/1.1"]
        lines += [f"{k}: {v}" for k, v in self.headers if k.lower() not in HOP_HEADERS]
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


async def read_request(reader: asyncio.StreamReader) -> Request:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(
            431, "Request Header Fields Too Large", f"the request head is over {MAX_HEAD_BYTES} bytes"
        ) from None
    request_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, "Bad Request", f"not an HTTP/1.x request line: {request_line[:80]!r}")
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise BadRequest(400, "Bad Request", f"a header line without a colon: {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    request = Request(parts[0], parts[1], headers, b"")
    if "chunked" in request.header("transfer-encoding").lower():
        raise BadRequest(411, "Length Required", "send the body with a Content-Length (chunked bodies are refused)")
    try:
        length = int(request.header("content-length", "0") or 0)
    except ValueError:
        raise BadRequest(400, "Bad Request", "Content-Length is not a number") from None
    if length < 0 or length > MAX_BODY_BYTES:
        raise BadRequest(413, "Content Too Large", f"the body is over {MAX_BODY_BYTES} bytes")
    request.body = await reader.readexactly(length) if length else b""
    return request


def json_response(status: int, reason: str, payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def error_response(status: int, reason: str, detail: str) -> bytes:
    return json_response(status, reason, {"error": {"message": detail, "type": "brain_front"}})


class Front:
    """Serves ``host:port``, forwarding to workers listening on 127.0.0.1 at ``ports``."""

    def __init__(self, ports: list[int]):
        self.ports = ports
        self.pool = WorkerPool(len(ports))
        self._other = itertools.cycle(range(len(ports)))  # requests that take no place

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        worker = None
        try:
            try:
                request = await read_request(reader)
            except BadRequest as e:
                writer.write(error_response(e.status, e.reason, e.detail))
                return
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            path = request.path.split("?", 1)[0]
            if request.method == "GET" and path == QUEUE_PATH:  # the front's queue, not a worker's (one each)
                writer.write(json_response(200, "OK", self.pool.report()))
                return
            hung_up = asyncio.ensure_future(reader.read(1))  # b"" when the caller closes: nothing else is sent
            try:
                if request.method == "POST" and path in MODEL_ROUTES:
                    kind = request.header(KIND_HEADER.lower(), TURN)
                    acquire = asyncio.ensure_future(self.pool.acquire(kind, request.header(AFFINITY_HEADER)))
                    await asyncio.wait({acquire, hung_up}, return_when=asyncio.FIRST_COMPLETED)
                    if not acquire.done():
                        acquire.cancel()  # the caller left while waiting: its request never reaches a worker
                        with contextlib.suppress(asyncio.CancelledError):
                            await acquire
                        return
                    worker = acquire.result()
                    port = self.ports[worker]
                else:
                    port = self.ports[next(self._other)]
                await self._forward(request, port, writer, hung_up)
            finally:
                hung_up.cancel()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if worker is not None:
                self.pool.release(worker)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _forward(request: Request, port: int, writer: asyncio.StreamWriter, hung_up: asyncio.Future) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as e:
            writer.write(error_response(503, "Service Unavailable", f"brain worker on port {port}: {e}"))
            return
        try:
            upstream_writer.write(request.forwarded())
            await upstream_writer.drain()

            async def pipe() -> None:
                while data := await upstream_reader.read(1 << 16):
                    writer.write(data)
                    await writer.drain()

            piping = asyncio.ensure_future(pipe())
            await asyncio.wait({piping, hung_up}, return_when=asyncio.FIRST_COMPLETED)
            if not piping.done():
                piping.cancel()  # the caller hung up mid-reply: closing the worker's connection stops its generation
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await piping
        finally:
            upstream_writer.close()
            with contextlib.suppress(Exception):
                await upstream_writer.wait_closed()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _answers(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: brain\r\nConnection: close\r\n\r\n")
        await writer.drain()
        status = await reader.readline()
        return status.startswith(b"HTTP/1.1 200")
    except (OSError, asyncio.IncompleteReadError):
        return False
    finally:
        writer.close()


async def _warm(port: int, model: str) -> None:
    """One token from the worker: its first request pays for allocations and thread start-up (1.3 s against 0.06 s
    for the first token of the next, 2-core AMD EPYC, 2026-11-29), which a caller should not."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: brain\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        status = await reader.readline()
        await reader.read()
        if not status.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"brain worker on port {port} answered its warm-up with {status.decode().strip()!r}")
    finally:
        writer.close()


async def serve(commands: list[list[str]], ports: list[int], host: str, port: int, model: str) -> int:
    """Start the workers (``commands``, listening on ``ports``), serve ``host:port`` once all answer and are warm;
    the exit code (0 after SIGTERM or SIGINT, 1 when a worker exits or does not start)."""
    env = {**os.environ, "VOICEFLEET_SUPERVISOR_PID": str(os.getpid())}  # workers die with the front
    procs = [await asyncio.create_subprocess_exec(*command, env=env) for command in commands]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    exited = [asyncio.ensure_future(p.wait()) for p in procs]
    server = None
    try:
        deadline = time.monotonic() + WORKER_START_S
        for i, worker_port in enumerate(ports):
            while not await _answers(worker_port):
                if exited[i].done():
                    print(f"brain: worker {i} exited with {procs[i].returncode} while starting", file=sys.stderr)
                    return 1
                if stop.is_set():
                    return 0
                if time.monotonic() > deadline:
                    print(f"brain: worker {i} did not answer within {WORKER_START_S:.0f} s", file=sys.stderr)
                    return 1
                await asyncio.sleep(0.2)
        try:
            await asyncio.gather(*(_warm(p, model) for p in ports))
        except (OSError, RuntimeError) as e:
            print(f"brain: {e}", file=sys.stderr)
            return 1
        front = Front(ports)
        server = await asyncio.start_server(front.handle, host, port, limit=MAX_HEAD_BYTES)
        print(f"brain: {len(ports)} workers behind {host}:{port}", file=sys.stderr, flush=True)
        stopping = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait({stopping, *exited}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if stop.is_set():
            return 0
        dead = next(i for i, e in enumerate(exited) if e.done())
        print(f"brain: worker {dead} exited with {procs[dead].returncode}; stopping", file=sys.stderr, flush=True)
        return 1
    finally:
        if server is not None:
            server.close()
        for p in procs:
            if p.returncode is None:
                p.terminate()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*exited, return_exceptions=True), 10)
        for p in procs:
            if p.returncode is None:
                p.kill()
