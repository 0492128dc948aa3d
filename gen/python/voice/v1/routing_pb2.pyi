from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RouteMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROUTE_MODE_UNSPECIFIED: _ClassVar[RouteMode]
    ROUTE_MODE_REALTIME: _ClassVar[RouteMode]
    ROUTE_MODE_BROADCAST: _ClassVar[RouteMode]
ROUTE_MODE_UNSPECIFIED: RouteMode
ROUTE_MODE_REALTIME: RouteMode
ROUTE_MODE_BROADCAST: RouteMode

class Routing(_message.Message):
    __slots__ = ("mode", "engine", "latency_budget_ms")
    MODE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_BUDGET_MS_FIELD_NUMBER: _ClassVar[int]
    mode: RouteMode
    engine: str
    latency_budget_ms: int
    def __init__(self, mode: _Optional[_Union[RouteMode, str]] = ..., engine: _Optional[str] = ..., latency_budget_ms: _Optional[int] = ...) -> None: ...
