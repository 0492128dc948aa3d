"""The one wrapper around every RPC handler: status mapping, request counting, active streams, request ids.

Handlers raise ``VoiceError``s; this turns them into the matching gRPC status with the message as is.
Anything else becomes INTERNAL with the request id, and the traceback goes to the log, not the client.

``ParseRequests`` (a server interceptor the bootstrap installs on every port) does the same for request messages
that do not parse: INVALID_ARGUMENT naming the message type, one rate-limited log line, no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
import uuid

import grpc

from services.common import metrics
from services.common.errors import MalformedMessage, VoiceError, retry_metadata

log = logging.getLogger("voicefleet.rpc")


_last_output = float("-inf")


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


def last_output() -> float:
    """When (monotonic) a streaming RPC of this process last sent a message: traffic that makes progress, which the
    deep probe (services.common.health) takes as proof enough that the engine answers."""
    return _last_output


def rpc(service: str, method: str):
    """Decorate a servicer method (coroutine or async generator) with voicefleet's error and metric handling."""

    def decorate(fn):
        active = metrics.ACTIVE_STREAMS.labels(service, method)

        def finish(code: grpc.StatusCode) -> None:
            active.dec()
            metrics.REQUESTS.labels(service, method, code.name).inc()

        async def fail(context, exc: BaseException) -> grpc.StatusCode:
            if isinstance(exc, MalformedMessage):
                await context.abort(exc.code, exc.message)  # logged where it was parsed, rate-limited
            if isinstance(exc, VoiceError):
                log.info("%s.%s -> %s: %s", service, method, exc.code.name, exc.message)
                await context.abort(exc.code, exc.message, trailing_metadata=retry_metadata(exc))
            log.exception("%s.%s failed", service, method, exc_info=exc)
            await context.abort(
                grpc.StatusCode.INTERNAL, f"internal error in {service}.{method}: {type(exc).__name__}; see server log"
            )

        if inspect.isasyncgenfunction(fn):
            # Streaming handlers are written as async generators but served as coroutines that write each item:
            # a client cancel then lands inside our code (at the write or at an engine await), so the generator
            # chain is closed at once and engines stop. grpc iterating the generator itself would leave it
            # suspended at a yield until garbage collection, with its engine still running.
            @functools.wraps(fn)
            async def stream_handler(self, request, context):
                global _last_output
                active.inc()
                code = grpc.StatusCode.OK
                try:
                    async with contextlib.aclosing(fn(self, request, context)) as items:
                        async for item in items:
                            await context.write(item)
                            _last_output = time.monotonic()
                except asyncio.CancelledError:
                    code = grpc.StatusCode.CANCELLED
                    raise
                except grpc.aio.AbortError:
                    code = context.code() or grpc.StatusCode.UNKNOWN
                    raise
                except Exception as exc:  # noqa: BLE001 - mapped to a status here, once
                    code = exc.code if isinstance(exc, VoiceError) else grpc.StatusCode.INTERNAL
                    await fail(context, exc)
                finally:
                    finish(code)

            return stream_handler

        @functools.wraps(fn)
        async def unary_handler(self, request, context):
            active.inc()
            code = grpc.StatusCode.OK
            try:
                return await fn(self, request, context)
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as exc:  # noqa: BLE001
                code = exc.code if isinstance(exc, VoiceError) else grpc.StatusCode.INTERNAL
                await fail(context, exc)
            finally:
                finish(code)

        return unary_handler

    return decorate


# --- request messages that do not parse ---------------------------------------------------------------------------
class ThrottledLog:
    """At most one log line per ``every_s``; the next line says how many were left out."""

    def __init__(self, logger: logging.Logger, every_s: float = 10.0):
        self.logger = logger
        self.every_s = every_s
        self._next_at = float("-inf")
        self._left_out = 0

    def warning(self, message: str, *args) -> None:
        now = time.monotonic()
        if now < self._next_at:
            self._left_out += 1
            return
        if self._left_out:
            message += " (and %d more like it in the last %.0fs)"
            args = (*args, self._left_out, self.every_s)
        self.logger.warning(message, *args)
        self._left_out = 0
        self._next_at = now + self.every_s


def _message_type(deserializer) -> str:
    """voice.v1.SynthesizeRequest for ``SynthesizeRequest.FromString`` (the generated stubs' deserializers)."""
    descriptor = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", "") or "request message"


class ParseRequests(grpc.aio.ServerInterceptor):
    """Request messages that do not parse are INVALID_ARGUMENT ("request is not a valid voice.v1.X: ..."), on every
    RPC of the server (ours, health, reflection), logged in one rate-limited line.

    grpc.aio parses a unary request before the handler runs and answers a parse error with UNKNOWN and a logged
    traceback; a streamed request is parsed when the handler reads it, so the error surfaces inside the handler
    (INTERNAL from ``rpc``). So: a unary request reaches the wrapped handler as bytes and is parsed there (abort with
    INVALID_ARGUMENT when it does not parse); a streamed one is parsed by a deserializer that raises
    ``MalformedMessage``, which ``rpc`` maps like any VoiceError (handlers outside ``rpc`` are caught here). The
    stream ends with that status; other calls are untouched.

    grpc.aio parses with ``deserialize(deserializer, raw)`` and passes the bytes on unchanged when the deserializer is
    None (grpc/_cython/_cygrpc/aio/server.pyx.pxi, ``_handle_unary_unary_rpc`` / ``_ServicerContext.read``).
    """

    def __init__(self, service: str):
        self.service = service
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._log = ThrottledLog(log)

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        known = self._wrapped.get(details.method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self._wrap(handler, details.method)
        self._wrapped[details.method] = (handler, wrapped)
        return wrapped

    def _parser(self, deserializer, method: str):
        message_type = _message_type(deserializer)
        short = method.rsplit("/", 1)[-1]
        malformed = metrics.MALFORMED_MESSAGES.labels(self.service, short)

        def parse(raw: bytes):
            try:
                return deserializer(raw)
            except Exception as e:  # noqa: BLE001 - DecodeError, or whatever a custom deserializer raises
                problem = str(e).rpartition("': ")[2] or type(e).__name__
                malformed.inc()
                self._log.warning("%s %s: request is not a valid %s: %s", self.service, method, message_type, problem)
                raise MalformedMessage(message_type, problem) from None

        return parse

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        parse = self._parser(handler.request_deserializer, method)
        if handler.request_streaming:
            behavior = handler.stream_stream if handler.response_streaming else handler.stream_unary
            wrapped, deserializer = _refusing_malformed(behavior), parse
        else:
            behavior = handler.unary_stream if handler.response_streaming else handler.unary_unary
            wrapped, deserializer = _parsing_first(behavior, parse), None  # None: the handler gets the bytes
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[handler.request_streaming, handler.response_streaming]
        return make(wrapped, deserializer, handler.response_serializer)


# Wrappers keep the handler's kind (coroutine, async generator, or a sync function / generator, which grpc.aio runs in
# its thread pool), because grpc.aio serves each kind differently.
def _parsing_first(behavior, parse):
    """A unary-request handler that gets the request's bytes, parses them, then runs ``behavior``."""

    async def parsed(raw, context):
        try:
            return parse(raw)
        except MalformedMessage as e:
            await context.abort(e.code, e.message)

    def parsed_sync(raw, context):
        try:
            return parse(raw)
        except MalformedMessage as e:
            context.abort(e.code, e.message)

    if inspect.isasyncgenfunction(behavior):

        async def async_gen(raw, context):
            request = await parsed(raw, context)
            async with contextlib.aclosing(behavior(request, context)) as items:
                async for item in items:
                    yield item

        return async_gen
    if inspect.iscoroutinefunction(behavior):

        async def coroutine(raw, context):
            return await behavior(await parsed(raw, context), context)

        return coroutine
    if inspect.isgeneratorfunction(behavior):

        def gen(raw, context):
            yield from behavior(parsed_sync(raw, context), context)

        return gen

    def function(raw, context):
        return behavior(parsed_sync(raw, context), context)

    return function


def _refusing_malformed(behavior):
    """A streaming-request handler: a message that does not parse (MalformedMessage from the deserializer, raised where
    the handler reads) ends the call with INVALID_ARGUMENT, also when the handler is not one of ours (``rpc``)."""
    if inspect.isasyncgenfunction(behavior):

        async def async_gen(requests, context):
            try:
                async with contextlib.aclosing(behavior(requests, context)) as items:
                    async for item in items:
                        yield item
            except MalformedMessage as e:
                await context.abort(e.code, e.message)

        return async_gen
    if inspect.iscoroutinefunction(behavior):

        async def coroutine(requests, context):
            try:
                return await behavior(requests, context)
            except MalformedMessage as e:
                await context.abort(e.code, e.message)

        return coroutine
    if inspect.isgeneratorfunction(behavior):

        def gen(requests, context):
            try:
                yield from behavior(requests, context)
            except MalformedMessage as e:
                context.abort(e.code, e.message)

        return gen

    def function(requests, context):
        try:
            return behavior(requests, context)
        except MalformedMessage as e:
            context.abort(e.code, e.message)

    return function
