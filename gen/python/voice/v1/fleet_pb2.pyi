from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BackendHealth(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKEND_HEALTH_UNSPECIFIED: _ClassVar[BackendHealth]
    BACKEND_HEALTH_SERVING: _ClassVar[BackendHealth]
    BACKEND_HEALTH_NOT_SERVING: _ClassVar[BackendHealth]
    BACKEND_HEALTH_UNREACHABLE: _ClassVar[BackendHealth]
    BACKEND_HEALTH_EJECTED: _ClassVar[BackendHealth]
BACKEND_HEALTH_UNSPECIFIED: BackendHealth
BACKEND_HEALTH_SERVING: BackendHealth
BACKEND_HEALTH_NOT_SERVING: BackendHealth
BACKEND_HEALTH_UNREACHABLE: BackendHealth
BACKEND_HEALTH_EJECTED: BackendHealth

class GetFleetStatusRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class BackendStatus(_message.Message):
    __slots__ = ("name", "address", "health", "ejected_for_ms", "consecutive_failures", "services", "routable", "ejections", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    EJECTED_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    ROUTABLE_FIELD_NUMBER: _ClassVar[int]
    EJECTIONS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    health: BackendHealth
    ejected_for_ms: int
    consecutive_failures: int
    services: _containers.RepeatedScalarFieldContainer[str]
    routable: bool
    ejections: int
    detail: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., health: _Optional[_Union[BackendHealth, str]] = ..., ejected_for_ms: _Optional[int] = ..., consecutive_failures: _Optional[int] = ..., services: _Optional[_Iterable[str]] = ..., routable: _Optional[bool] = ..., ejections: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class FailoverRecord(_message.Message):
    __slots__ = ("from_backend", "to_backend", "reason", "at_unix_ms", "request_id")
    FROM_BACKEND_FIELD_NUMBER: _ClassVar[int]
    TO_BACKEND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    from_backend: str
    to_backend: str
    reason: str
    at_unix_ms: int
    request_id: str
    def __init__(self, from_backend: _Optional[str] = ..., to_backend: _Optional[str] = ..., reason: _Optional[str] = ..., at_unix_ms: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class GetFleetStatusResponse(_message.Message):
    __slots__ = ("request_id", "backends", "recent_failovers")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    RECENT_FAILOVERS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    backends: _containers.RepeatedCompositeFieldContainer[BackendStatus]
    recent_failovers: _containers.RepeatedCompositeFieldContainer[FailoverRecord]
    def __init__(self, request_id: _Optional[str] = ..., backends: _Optional[_Iterable[_Union[BackendStatus, _Mapping]]] = ..., recent_failovers: _Optional[_Iterable[_Union[FailoverRecord, _Mapping]]] = ...) -> None: ...
