"""What every remote engine shares: the backend it calls, the deadline it gives that call, which failures count
against the backend's health, and the bidirectional stream a recognition or a conversation rides on.

Deadlines: a call to a backend gets the caller's remaining time minus the router's margin, so the router can still
answer DEADLINE_EXCEEDED itself. Cancel: when the caller goes away, the backend call is cancelled at once, which
cancels the backend's handler and stops its engine.

Health: a failed call is evidence against the backend (outlier detection, services/router/backends.py) only when
the backend is at fault. A caller's own deadline running out, or a caller cancelling, says nothing about the
backend; a deadline the route itself set to find a hung backend (``route_deadline``) does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

import grpc

from services.common.errors import DeadlineExceeded, Unavailable, from_rpc_error
from services.common.rpc import was_taken

# Statuses that say the backend failed: it is down or restarting (UNAVAILABLE) or broke (INTERNAL, UNKNOWN). Not
# FAILED_PRECONDITION ("still loading": a warming backend is no outlier), RESOURCE_EXHAUSTED (full, it refused at
# once), the caller's own errors (INVALID_ARGUMENT, ...), CANCELLED, or DEADLINE_EXCEEDED (below).
BACKEND_FAULTS = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
# A streaming call the backend has neither taken nor refused after this long: the backend is stuck (RemoteStream
# accepted). Opening a session or a recognition takes milliseconds; a cold model is not opened on (the router sends
# a conversation to its cascade while MOSS loads).
ACCEPT_TIMEOUT_S = 10.0


class Backend(Protocol):
    """What a remote engine needs of the backend it calls (the router's ``backends.Backend``)."""

    name: str
    channel: grpc.aio.Channel | None

    def usable(self) -> bool: ...
    def describe(self) -> str: ...
    def record_success(self) -> None: ...
    def record_failure(self, reason: str = "failures") -> None: ...


def fault(code: grpc.StatusCode, route_deadline: bool = False) -> str | None:
    """Why a call that ended with ``code`` counts against its backend (the reason ``record_failure`` takes), or None
    when it does not. DEADLINE_EXCEEDED counts only when the deadline was the route's own bound for a hung backend
    (``route_deadline``, e.g. a voice lookup bounded by the first-audio timeout): a caller's deadline never does."""
    if code in BACKEND_FAULTS:
        return "failures"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and route_deadline:
        return "no_audio"
    return None


def failed(backend: Backend, error: grpc.aio.AioRpcError, route_deadline: bool = False) -> Exception:
    """Counts ``error`` against ``backend`` when it is at fault (``fault``); the VoiceError to raise to the caller."""
    reason = fault(error.code(), route_deadline)
    if reason is not None:
        backend.record_failure(reason)
    return from_rpc_error(error, backend.name)


def backend_timeout(time_remaining: float | None, margin_s: float, backend: str) -> float | None:
    """The deadline for a call to ``backend``: the caller's remaining time less the router's margin, so the router
    can still answer DEADLINE_EXCEEDED itself. None when the caller set no deadline."""
    if time_remaining is None:
        return None
    timeout = time_remaining - margin_s
    if timeout <= 0:
        raise DeadlineExceeded(f"deadline too short to call {backend}; allow more time")
    return timeout


class RemoteEngine:
    """An engine whose model runs in ``backend`` (None: not configured; ``open`` then says so)."""

    name = "remote"
    service = ""

    def __init__(self, backend: Backend | None, deadline_margin_s: float):
        self.backend = backend
        self.margin = deadline_margin_s

    @property
    def native_sample_rate(self) -> int:
        return 0  # the backend resamples; audio crosses the network once, as the caller sent it

    @property
    def served_by(self) -> str:
        return f"{self.backend.name if self.backend else self.service}/remote"

    def _timeout(self, time_remaining: float | None) -> float | None:
        return backend_timeout(time_remaining, self.margin, self.backend.name)

    def _check_usable(self, missing: str) -> None:
        if self.backend is None:
            raise Unavailable(missing)
        if not self.backend.usable():
            raise Unavailable(f"{self.backend.describe()}; retry shortly")


class RemoteStream:
    """One bidirectional backend call (StreamingRecognize, Converse): requests written at the backend's pace,
    replies read until the call ends; ``close`` cancels it. Subclasses turn replies into engine events."""

    def __init__(self, backend: Backend, call):
        self.backend = backend
        self.call = call
        self._finished = False
        self._closed = False

    async def _write(self, request) -> None:
        try:
            await self.call.write(request)  # waits for flow control: the backend's pace is the caller's
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
            pass  # the call has ended; _replies() raises its status

    async def accepted(self, timeout_s: float = ACCEPT_TIMEOUT_S) -> None:
        """Wait until the backend has taken the call: its servicer sends initial metadata once it admitted and opened
        it (services/common/asr_servicer.py, sts_servicer.py). A refusal (RESOURCE_EXHAUSTED at capacity, a bad
        config) is raised here, at open, with its status and retry hint. Without the wait, the first audio written
        races the refusal: gRPC then fails the write and sets the call's status to INTERNAL "Internal error from
        Core" on our side, which counted a full backend as a broken one (2026-11-29: asr's capacity refusals under
        moss_sts ejected moss_sts from the router). Bounded by ``timeout_s``: a backend that neither takes nor
        refuses the call in that time (hung, its event loop stuck) counts against its health and the open fails
        UNAVAILABLE, so the router's conversation goes to its cascade instead of waiting on it with the caller."""
        try:
            await self._taken(timeout_s)
        except BaseException:
            await self.close()  # refused, hung or our caller gone: the call ends here
            raise

    async def _taken(self, timeout_s: float) -> None:
        answer = asyncio.ensure_future(self.call.initial_metadata())
        done, _ = await asyncio.wait([answer], timeout=timeout_s)
        if not done:
            answer.cancel()
            self.backend.record_failure("failures")
            raise Unavailable(f"{self.backend.name} did not take the call within {timeout_s:g} s")
        if not was_taken(answer.result()):
            # Refused before it was taken: gRPC hands over the (empty) metadata of a trailers-only answer, sometimes
            # before the call counts as done, so the marker, not done(), tells a refusal from a taken call.
            code = await self.call.code()
            if code not in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED):
                error = grpc.aio.AioRpcError(
                    code,
                    await self.call.initial_metadata(),
                    await self.call.trailing_metadata(),
                    details=await self.call.details(),
                )
                raise failed(self.backend, error)

    async def finish(self) -> None:
        if not self._finished:
            self._finished = True
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
                await self.call.done_writing()

    async def _replies(self) -> AsyncIterator:
        """The backend's replies; the call's failure raised as a VoiceError (counted against the backend when it is
        at fault); nothing more once we closed it."""
        try:
            while True:
                reply = await self.call.read()
                if reply is grpc.aio.EOF:
                    break
                yield reply
            code = await self.call.code()
            if code == grpc.StatusCode.CANCELLED and self.call.cancelled():
                return  # we cancelled it (close)
            if code != grpc.StatusCode.OK:
                raise failed(self.backend, _status_error(code, await self.call.details()))
            self.backend.record_success()
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED and self._closed:
                return
            raise failed(self.backend, e) from None
        except asyncio.CancelledError:
            # A read pending when we cancelled the call ourselves (close(): the caller went away or sent a bad
            # message) raises CancelledError; that ends the replies, it is not this task being cancelled.
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                return
            raise

    async def close(self) -> None:
        self._closed = True
        self.call.cancel()  # no-op when finished; cancels the backend's handler when our caller went away


class _Status(grpc.aio.AioRpcError):
    pass


def _status_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return _Status(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)
