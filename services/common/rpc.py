"""The one wrapper around every RPC handler: status mapping, request counting, active streams, request ids.

The bootstrap (services/common/server.py) wraps every RPC a servicer implements, read from the generated service
descriptors. Handlers raise ``VoiceError``s; this turns them into the matching gRPC status with the message as is.
Anything else becomes INTERNAL with the request id, and the traceback goes to the log, not the client. The request id
is set here, once per call (``request_id()``), and every log line written while serving the call carries it.

``ParseRequests`` (a server interceptor the bootstrap installs on every port) does the same for request messages
that do not parse: INVALID_ARGUMENT naming the message type, one rate-limited log line, no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import time
import types
import uuid

import grpc
from google.protobuf import descriptor_pool

from services.common import metrics
from services.common.errors import MalformedMessage, VoiceError, retry_metadata

log = logging.getLogger("voicefleet.rpc")
# A streaming servicer's initial metadata once it has admitted and opened the call (Converse, StreamingRecognize):
# the caller waits for it before sending audio (services/remote/base.py accepted, services/gateway/session.py). Its
# own key, because a call refused before that ends as a trailers-only answer whose (empty) initial metadata gRPC
# also hands over, at times before the call counts as done.
TAKEN_METADATA = (("voicefleet-taken", "1"),)


def was_taken(initial_metadata) -> bool:
    """``initial_metadata`` (of a finished initial_metadata() wait) says the servicer took the call."""
    return TAKEN_METADATA[0] in tuple(initial_metadata or ())


_last_output = float("-inf")


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


class _Request:
    """The request a task serves; mutable so that tasks started inside the call (which copy the context) see the id
    of a stream's first message when it arrives after them."""

    __slots__ = ("id",)

    def __init__(self, request_id: str):
        self.id = request_id


_current: contextvars.ContextVar[_Request | None] = contextvars.ContextVar("voicefleet_request", default=None)


def request_id() -> str:
    """The id of the request this code serves: the caller's ``request_id`` (a stream's: its first message's), or one
    made by the wrapper when the caller sent none; "" outside an RPC."""
    current = _current.get()
    return current.id if current is not None else ""


class RequestIdFilter(logging.Filter):
    """Gives every log record ``request`` (" request_id=<id>" inside an RPC, else ""), for the log format."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_id()
        record.request = f" request_id={rid}" if rid else ""
        return True


def last_output() -> float:
    """When (monotonic) a streaming RPC of this process last sent a message: traffic that makes progress, which the
    deep probe (services.common.health) takes as proof enough that the engine answers."""
    return _last_output


def generated_base(implementation: object) -> type | None:
    """The generated ``voice.v1.*_pb2_grpc.<Name>Servicer`` class the implementation derives from."""
    for cls in type(implementation).__mro__:
        if cls.__module__.startswith("voice.v1.") and cls.__module__.endswith("_pb2_grpc"):
            return cls
    return None


def wrap_servicer(service: str, implementation: object, full_name: str) -> object:
    """What the bootstrap registers in place of ``implementation``: every RPC of the gRPC service ``full_name`` (read
    from its descriptor, so a new RPC is covered by itself) that the implementation defines, wrapped by ``rpc``;
    RPCs it leaves to the generated base keep the base's UNIMPLEMENTED."""
    base = generated_base(implementation)
    methods = {}
    for method in descriptor_pool.Default().FindServiceByName(full_name).methods:
        handler = getattr(implementation, method.name)
        implemented = base is None or getattr(type(implementation), method.name) is not getattr(base, method.name)
        methods[method.name] = rpc(service, method.name, handler, method.client_streaming) if implemented else handler
    return types.SimpleNamespace(**methods)


def _cancelled_code(context) -> grpc.StatusCode:
    """How a cancelled call ended: DEADLINE_EXCEEDED when its deadline has passed (grpc cancels the handler the same
    way for both; ``time_remaining()`` is 0 once the deadline is spent), else CANCELLED (the caller went away)."""
    remaining = context.time_remaining()
    return grpc.StatusCode.DEADLINE_EXCEEDED if remaining is not None and remaining <= 0 else grpc.StatusCode.CANCELLED


def rpc(service: str, method: str, handler, request_streaming: bool):
    """``handler`` (a bound servicer method: a coroutine or an async generator) with voicefleet's error and metric
    handling and its request id (``request_id()``)."""
    active = metrics.ACTIVE_STREAMS.labels(service, method)

    def finish(code: grpc.StatusCode) -> None:
        active.dec()
        metrics.REQUESTS.labels(service, method, code.name).inc()

    def begin(request) -> tuple[_Request, object]:
        """The call's request id, in the context: a unary request's own, a stream's from its first message (taken
        when the handler reads it), made here when the caller sent none."""
        if request_streaming:
            current = _Request(new_request_id())
            request = _TakingRequestId(request, current)
        else:
            current = _Request(getattr(request, "request_id", "") or new_request_id())
        _current.set(current)
        return current, request

    async def fail(context, exc: BaseException, current: _Request) -> grpc.StatusCode:
        if isinstance(exc, MalformedMessage):
            await context.abort(exc.code, exc.message)  # logged where it was parsed, rate-limited
        if isinstance(exc, VoiceError):
            log.info("%s.%s -> %s: %s", service, method, exc.code.name, exc.message)
            await context.abort(exc.code, exc.message, trailing_metadata=retry_metadata(exc))
        log.exception("%s.%s failed", service, method, exc_info=exc)
        await context.abort(
            grpc.StatusCode.INTERNAL,
            f"internal error in {service}.{method}: {type(exc).__name__}; see the server log, request_id={current.id}",
        )

    if inspect.isasyncgenfunction(handler):
        # Streaming handlers are written as async generators but served as coroutines that write each item:
        # a client cancel then lands inside our code (at the write or at an engine await), so the generator
        # chain is closed at once and engines stop. grpc iterating the generator itself would leave it
        # suspended at a yield until garbage collection, with its engine still running.
        @functools.wraps(handler)
        async def stream_handler(request, context):
            global _last_output
            current, request = begin(request)
            active.inc()
            code, counted = grpc.StatusCode.OK, False
            try:
                async with contextlib.aclosing(handler(request, context)) as items:
                    async for item in items:
                        await context.write(item)
                        _last_output = time.monotonic()
            except asyncio.CancelledError:
                code = _cancelled_code(context)
                raise
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as exc:  # noqa: BLE001 - mapped to a status here, once
                code = exc.code if isinstance(exc, VoiceError) else grpc.StatusCode.INTERNAL
                finish(code)  # before the status goes out: a scrape after the caller's error shows it
                counted = True
                await fail(context, exc, current)
            finally:
                if not counted:
                    finish(code)

        return stream_handler

    @functools.wraps(handler)
    async def unary_handler(request, context):
        current, request = begin(request)
        active.inc()
        code, counted = grpc.StatusCode.OK, False
        try:
            return await handler(request, context)
        except asyncio.CancelledError:
            code = _cancelled_code(context)
            raise
        except grpc.aio.AbortError:
            code = context.code() or grpc.StatusCode.UNKNOWN
            raise
        except Exception as exc:  # noqa: BLE001
            code = exc.code if isinstance(exc, VoiceError) else grpc.StatusCode.INTERNAL
            finish(code)  # before the status goes out (as above)
            counted = True
            await fail(context, exc, current)
        finally:
            if not counted:
                finish(code)

    return unary_handler


class _TakingRequestId:
    """A client stream that, when its first message is read, makes that message's ``request_id`` (when set) the
    call's."""

    def __init__(self, requests, current: _Request):
        self._requests = requests
        self._messages = None
        self._current = current

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._messages is None:
            self._messages = aiter(self._requests)
            message = await anext(self._messages)
            self._current.id = getattr(message, "request_id", "") or self._current.id
            return message
        return await anext(self._messages)


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
