"""The one wrapper around every RPC handler: status mapping, request counting, active streams, request ids.

Handlers raise ``VoiceError``s; this turns them into the matching gRPC status with the message as is.
Anything else becomes INTERNAL with the request id, and the traceback goes to the log, not the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import uuid

import grpc

from services.common import metrics
from services.common.errors import VoiceError

log = logging.getLogger("voicefleet.rpc")


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


def rpc(service: str, method: str):
    """Decorate a servicer method (coroutine or async generator) with voicefleet's error and metric handling."""

    def decorate(fn):
        active = metrics.ACTIVE_STREAMS.labels(service, method)

        def finish(code: grpc.StatusCode) -> None:
            active.dec()
            metrics.REQUESTS.labels(service, method, code.name).inc()

        async def fail(context, exc: BaseException) -> grpc.StatusCode:
            if isinstance(exc, VoiceError):
                log.info("%s.%s -> %s: %s", service, method, exc.code.name, exc.message)
                await context.abort(exc.code, exc.message)
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
                active.inc()
                code = grpc.StatusCode.OK
                try:
                    async with contextlib.aclosing(fn(self, request, context)) as items:
                        async for item in items:
                            await context.write(item)
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
