"""Domain errors and their one mapping to gRPC status codes.

Engines and servicers raise these; ``rpc`` (services.common.rpc) turns them into a status with the message
unchanged. Every message names the field or thing to fix.
"""

from __future__ import annotations

import grpc


class VoiceError(Exception):
    """An error a caller can act on. ``code`` is the gRPC status it becomes."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, *, code: grpc.StatusCode | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        # When the caller may try again (sent as gRPC's retry pushback trailer; see retry_metadata).
        self.retry_after_s = retry_after_s


class InvalidArgument(VoiceError):
    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field


class MalformedMessage(VoiceError):
    """A request message that does not parse as its protobuf type (services.common.rpc.ParseRequests)."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, message_type: str, problem: str):
        super().__init__(f"request is not a valid {message_type}: {problem}")
        self.message_type = message_type


class NotFound(VoiceError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(VoiceError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(VoiceError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(VoiceError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


# gRPC's server pushback trailer (gRFC A6): clients with a retry policy wait this many ms before retrying.
RETRY_PUSHBACK_KEY = "grpc-retry-pushback-ms"


def retry_metadata(error: VoiceError) -> tuple[tuple[str, str], ...]:
    """Trailing metadata carrying an error's retry hint (none when it has none)."""
    if error.retry_after_s is None:
        return ()
    return ((RETRY_PUSHBACK_KEY, str(round(error.retry_after_s * 1000))),)


class Unavailable(VoiceError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(VoiceError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


def from_rpc_error(err: grpc.aio.AioRpcError, backend: str) -> VoiceError:
    """A backend's status, passed on to our caller with the backend named (codes are kept as they are)."""
    code = err.code()
    details = err.details() or code.name
    retry_after_s = None
    for key, value in err.trailing_metadata() or ():
        if key == RETRY_PUSHBACK_KEY and value.isdigit():
            retry_after_s = int(value) / 1000
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(f"{backend} is unavailable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"{backend} did not answer within the deadline: {details}")
    return VoiceError(details, code=code, retry_after_s=retry_after_s)
