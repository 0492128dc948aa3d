"""Domain errors and their one mapping to gRPC status codes.

Engines and servicers raise these; ``rpc`` (services.common.rpc) turns them into a status with the message
unchanged. Every message names the field or thing to fix.
"""

from __future__ import annotations

import grpc


class VoiceError(Exception):
    """An error a caller can act on. ``code`` is the gRPC status it becomes."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, *, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


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


class Unavailable(VoiceError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(VoiceError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


def from_rpc_error(err: grpc.aio.AioRpcError, backend: str) -> VoiceError:
    """A backend's status, passed on to our caller with the backend named (codes are kept as they are)."""
    code = err.code()
    details = err.details() or code.name
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(f"{backend} is unavailable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"{backend} did not answer within the deadline: {details}")
    return VoiceError(details, code=code)
