"""One conversation WebSocket <-> one Converse stream on the router (docs/gateway.md#the-conversation-websocket)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid

import grpc
from aiohttp import WSCloseCode, WSMsgType, web

from services.common.config.gateway import GatewayConfig
from services.common.metrics import (
    GATEWAY_ADDED,
    GATEWAY_BYTES,
    GATEWAY_DROPPED,
    GATEWAY_MESSAGES,
    GATEWAY_REFUSALS,
)
from services.common.rpc import was_taken
from services.gateway import protocol
from services.gateway.protocol import ProtocolError
from voice.v1 import conversation_pb2, conversation_pb2_grpc

# Longest wait for the router to take a call before audio is written anyway (a router that says nothing this long
# still gets the audio, as before the wait).
ACCEPT_WAIT_S = 5.0


async def router_took(call) -> bool:
    """Wait until the router took ``call`` (it sends initial metadata once it has admitted and opened the session:
    services/remote/base.py ``accepted``) or ended it, at most ACCEPT_WAIT_S. False when the call ended first: the
    router refused it, and the call's reader reports its status (RESOURCE_EXHAUSTED with its retry hint, NOT_FOUND
    for a voice ...), not INTERNAL from a write that raced the refusal. Both the conversation WebSocket and the
    Realtime route wait here before sending audio."""
    answer = asyncio.ensure_future(call.initial_metadata())
    answer.add_done_callback(lambda f: f.cancelled() or f.exception())  # its outcome is the reader's to report
    await asyncio.wait([answer], timeout=ACCEPT_WAIT_S)
    if answer.done() and not answer.cancelled() and answer.exception() is None:
        return was_taken(answer.result())
    return not call.done()


async def close_socket(ws: web.WebSocketResponse, code: int, reason: str) -> int:
    """Close with ``code`` and ``reason`` (cut to what a close frame carries); the code, for counting."""
    if not ws.closed:
        await ws.close(code=code, message=protocol.close_reason(reason).encode())
    return code


class Session:
    """One conversation WebSocket <-> one Converse stream on the router. Three tasks: the socket's reader (client
    frames and controls written to the call as flow control allows), the router's reader (events to a bounded send queue) and the
    writer (send queue to the socket)."""

    def __init__(self, section: GatewayConfig, channel: grpc.aio.Channel, metadata: tuple, ws: web.WebSocketResponse):
        self.section = section
        self.channel = channel
        self.metadata = metadata  # the client's bearer token, forwarded
        self.ws = ws
        self.outbound: asyncio.Queue = asyncio.Queue(self.section.send_queue_messages)
        self.close_code = 1000
        self.close_reason = ""
        self.rate = 16_000

    def fail(self, code: int, reason: str) -> None:
        if self.close_code == 1000:
            self.close_code, self.close_reason = code, reason

    async def run(self) -> int:
        try:
            request_id, config = await self._configure()
        except ProtocolError as e:
            GATEWAY_REFUSALS.labels("idle" if e.code == protocol.IDLE else "bad_input").inc()
            return await close_socket(self.ws, e.code, e.reason)
        except ClientGone:
            return 1000
        request_id = request_id or f"gw-{uuid.uuid4().hex[:12]}"
        self.rate = config.input_format.sample_rate_hz
        stub = conversation_pb2_grpc.ConversationStub(self.channel)
        # The write/read API (not request iterators): a write waits for HTTP/2 flow control, so a router that falls
        # behind stops the socket being read and TCP pushes back on the client; nothing piles up here.
        call = stub.Converse(metadata=self.metadata)
        with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            # A router that cannot be reached fails this write; the read below then says why (UNAVAILABLE).
            await call.write(conversation_pb2.ConverseRequest(request_id=request_id, config=config))
        # The router checks the config (voice, rates, capacity) before it takes the call; audio waits for that.
        refused = not await router_took(call)
        if not refused:
            ready = {
                "type": "ready",
                "request_id": request_id,
                "output_sample_rate": config.output_format.sample_rate_hz,
            }
            await self.ws.send_json(ready)
        router = asyncio.create_task(self._read_router(call), name="gw-router")
        writer = asyncio.create_task(self._write_socket(), name="gw-writer")
        socket = None if refused else asyncio.create_task(self._read_socket(call), name="gw-socket")
        tasks = [t for t in (socket, router, writer) if t is not None]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if socket in done and self.close_code == 1000 and not self.ws.closed:
                # A write found the call over: the router's reader is about to say why.
                await asyncio.wait([router], timeout=5)
            # The router's stream ended (or failed): let the writer send what is queued, the error event included.
            if router.done() and not writer.done():
                await asyncio.wait([asyncio.create_task(self.outbound.put(None)), writer], timeout=2)
        finally:
            call.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.close_code in (protocol.IDLE,):
            GATEWAY_REFUSALS.labels("idle").inc()
        elif self.close_code == protocol.SLOW_CLIENT:
            GATEWAY_REFUSALS.labels("slow_client").inc()
        elif 4000 <= self.close_code < 4100:
            GATEWAY_REFUSALS.labels("bad_input").inc()
        return await close_socket(self.ws, self.close_code, self.close_reason)

    async def _receive(self):
        try:
            message = await self.ws.receive(timeout=self.section.idle_timeout_seconds)
        except TimeoutError:
            raise ProtocolError(
                protocol.IDLE, f"idle: nothing received for {self.section.idle_timeout_seconds:g} s"
            ) from None
        return still_open(self.ws, message)

    async def _configure(self) -> tuple[str, conversation_pb2.ConversationConfig]:
        message = await self._receive()
        if message.type == WSMsgType.BINARY:
            raise ProtocolError(
                protocol.NOT_CONFIGURED, 'audio before config: send {"type": "config", "sample_rate": ...} first'
            )
        parsed = protocol.parse_json(message.data)
        if parsed["type"] != "config":
            raise ProtocolError(protocol.NOT_CONFIGURED, f"{parsed['type'][:30]} before config: send the config first")
        GATEWAY_MESSAGES.labels("in", "config").inc()
        return protocol.conversation_config(parsed, self.section.max_text_chars)

    async def _read_socket(self, call) -> None:
        try:
            while True:
                message = await self._receive()
                if message.type == WSMsgType.BINARY:
                    protocol.check_frame(message.data, self.rate, self.section.max_frame_ms)
                    GATEWAY_MESSAGES.labels("in", "audio").inc()
                    GATEWAY_BYTES.labels("in", "conversation").inc(len(message.data))
                    request = conversation_pb2.ConverseRequest(audio=message.data)
                elif message.type == WSMsgType.TEXT:
                    request = protocol.control(protocol.parse_json(message.data))
                    GATEWAY_MESSAGES.labels("in", "control").inc()
                else:
                    continue
                try:
                    await call.write(request)
                except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                    return  # the call is over; the router's reader reports why
        except ProtocolError as e:
            self.fail(e.code, e.reason)
        except ClientGone:
            with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                await call.done_writing()  # half-close: the router ends the session

    async def _read_router(self, call) -> None:
        try:
            response = await call.read()
            while response is not grpc.aio.EOF:
                if not self._queue(response, time.perf_counter()):
                    return
                response = await call.read()
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                return
            error = {"type": "error", "code": e.code().name, "message": e.details() or ""}
            if not self.outbound.full():
                self.outbound.put_nowait((error, time.perf_counter()))
            self.fail(protocol.ROUTER_CLOSE_CODES.get(e.code(), 1011), f"router: {e.code().name}: {e.details()}")

    def _queue(self, response, received: float) -> bool:
        """Queue one router event for the client; False when the client is too slow and the session must close."""
        item = protocol.event(response)
        if item is None:
            return True
        try:
            self.outbound.put_nowait((item, received))
        except asyncio.QueueFull:
            if isinstance(item, dict) and item["type"] == "transcript" and not item["final"]:
                GATEWAY_DROPPED.labels("interim_transcript").inc()
                return True
            self.fail(protocol.SLOW_CLIENT, f"client too slow: {self.outbound.maxsize} messages unsent")
            return False
        return True

    async def _write_socket(self) -> None:
        while (entry := await self.outbound.get()) is not None:
            item, received = entry
            try:
                if isinstance(item, bytes):
                    await self.ws.send_bytes(item)
                    GATEWAY_ADDED.labels("conversation").observe(time.perf_counter() - received)
                    GATEWAY_MESSAGES.labels("out", "audio").inc()
                    GATEWAY_BYTES.labels("out", "conversation").inc(len(item))
                else:
                    await self.ws.send_str(json.dumps(item))
                    GATEWAY_MESSAGES.labels("out", "event").inc()
            except ConnectionResetError:
                return


class ClientGone(Exception):
    """The client closed the socket (or aiohttp closed it on a protocol violation)."""


def still_open(ws, message):
    """``message`` as received on ``ws``; ClientGone when the client closed the socket or aiohttp closed it itself
    (1009 for a message over max_message_bytes, 1002 for a broken frame: counted as a refusal)."""
    if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
        raise ClientGone
    if message.type == WSMsgType.ERROR:
        too_big = getattr(ws.exception(), "code", None) == WSCloseCode.MESSAGE_TOO_BIG
        GATEWAY_REFUSALS.labels("too_big" if too_big else "bad_input").inc()
        raise ClientGone
    return message
