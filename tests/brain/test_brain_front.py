"""The brain's front (services/brain/front.py): its places in order of kind, a conversation back to its worker, and
requests it refuses before any worker sees them. The front with real workers: tests/brain/test_brain_queue.py."""

from __future__ import annotations

import asyncio

import pytest

from services.brain.front import Front, WorkerPool
from services.common.brain_requests import HELD, JUDGEMENT, READ_AHEAD, TURN


async def test_a_freed_worker_goes_to_the_best_ranked_waiter_oldest_first():
    pool = WorkerPool(1)
    assert await pool.acquire(TURN) == 0
    order = []

    async def wait(kind: str, label: str):
        worker = await pool.acquire(kind)
        order.append(label)
        pool.release(worker)

    waiters = [
        asyncio.create_task(wait(kind, label))
        for kind, label in ((READ_AHEAD, "read-ahead"), (HELD, "held"), (JUDGEMENT, "judgement"), (TURN, "turn"))
    ]
    await asyncio.sleep(0)
    assert pool.waiting() == 4
    pool.release(0)
    await asyncio.gather(*waiters)
    assert order == ["turn", "held", "judgement", "read-ahead"]


async def test_a_conversation_goes_back_to_its_worker_when_that_one_is_free():
    pool = WorkerPool(2)
    a = await pool.acquire(TURN, "call-a")
    b = await pool.acquire(TURN, "call-b")
    assert {a, b} == {0, 1}
    pool.release(a)
    pool.release(b)  # now b's worker is the one idle the shortest
    assert await pool.acquire(TURN, "call-b") == b
    assert await pool.acquire(TURN, "call-a") == a


async def test_a_caller_that_stops_waiting_leaves_the_queue_and_the_worker_goes_on():
    pool = WorkerPool(1)
    taken = await pool.acquire(TURN)
    gone = asyncio.create_task(pool.acquire(TURN, "gone"))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert pool.waiting() == 0
    pool.release(taken)
    assert pool.busy == 0 and await pool.acquire(HELD) == 0


@pytest.mark.parametrize(
    ("request_bytes", "status", "says"),
    [
        (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"411", b"Content-Length"),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: ten\r\n\r\n", b"400", b"Content-Length"),
        (b"HELLO\r\n\r\n", b"400", b"request line"),
        (b"POST /v1/completions HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", b"431", b"head"),
    ],
)
async def test_a_bad_request_gets_a_status_naming_what_is_wrong(request_bytes, status, says):
    front = Front([1])  # port 1: nothing listens there, and a bad request never reaches a worker
    server = await asyncio.start_server(front.handle, "127.0.0.1", 0, limit=64 << 10)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes)
        await writer.drain()
        answer = await reader.read()
        writer.close()
    finally:
        server.close()
    assert answer.split(b" ")[1] == status and says in answer, answer[:300]
    assert front.pool.busy == 0
