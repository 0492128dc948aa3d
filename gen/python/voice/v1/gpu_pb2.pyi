from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeasePriority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_PRIORITY_UNSPECIFIED: _ClassVar[LeasePriority]
    LEASE_PRIORITY_BATCH: _ClassVar[LeasePriority]
    LEASE_PRIORITY_INTERACTIVE: _ClassVar[LeasePriority]
    LEASE_PRIORITY_REALTIME: _ClassVar[LeasePriority]

class Residency(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESIDENCY_UNSPECIFIED: _ClassVar[Residency]
    RESIDENCY_COLD: _ClassVar[Residency]
    RESIDENCY_LOADING: _ClassVar[Residency]
    RESIDENCY_RESIDENT: _ClassVar[Residency]
    RESIDENCY_OFFLOADING: _ClassVar[Residency]
LEASE_PRIORITY_UNSPECIFIED: LeasePriority
LEASE_PRIORITY_BATCH: LeasePriority
LEASE_PRIORITY_INTERACTIVE: LeasePriority
LEASE_PRIORITY_REALTIME: LeasePriority
RESIDENCY_UNSPECIFIED: Residency
RESIDENCY_COLD: Residency
RESIDENCY_LOADING: Residency
RESIDENCY_RESIDENT: Residency
RESIDENCY_OFFLOADING: Residency

class LeaseAcquire(_message.Message):
    __slots__ = ("holder", "model", "bytes", "priority", "swap_in_ms", "swap_out_ms")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SWAP_IN_MS_FIELD_NUMBER: _ClassVar[int]
    SWAP_OUT_MS_FIELD_NUMBER: _ClassVar[int]
    holder: str
    model: str
    bytes: int
    priority: LeasePriority
    swap_in_ms: int
    swap_out_ms: int
    def __init__(self, holder: _Optional[str] = ..., model: _Optional[str] = ..., bytes: _Optional[int] = ..., priority: _Optional[_Union[LeasePriority, str]] = ..., swap_in_ms: _Optional[int] = ..., swap_out_ms: _Optional[int] = ...) -> None: ...

class LeaseRenew(_message.Message):
    __slots__ = ("epoch", "busy")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    busy: bool
    def __init__(self, epoch: _Optional[int] = ..., busy: _Optional[bool] = ...) -> None: ...

class LeaseRelease(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("request_id", "acquire", "renew", "release")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    RENEW_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    acquire: LeaseAcquire
    renew: LeaseRenew
    release: LeaseRelease
    def __init__(self, request_id: _Optional[str] = ..., acquire: _Optional[_Union[LeaseAcquire, _Mapping]] = ..., renew: _Optional[_Union[LeaseRenew, _Mapping]] = ..., release: _Optional[_Union[LeaseRelease, _Mapping]] = ...) -> None: ...

class LeaseGranted(_message.Message):
    __slots__ = ("epoch", "bytes", "ttl_ms", "renew_deadline_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    RENEW_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    bytes: int
    ttl_ms: int
    renew_deadline_ms: int
    def __init__(self, epoch: _Optional[int] = ..., bytes: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., renew_deadline_ms: _Optional[int] = ...) -> None: ...

class LeaseRenewed(_message.Message):
    __slots__ = ("epoch", "ttl_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    ttl_ms: int
    def __init__(self, epoch: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class LeaseRevoke(_message.Message):
    __slots__ = ("epoch", "reason", "deadline_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    reason: str
    deadline_ms: int
    def __init__(self, epoch: _Optional[int] = ..., reason: _Optional[str] = ..., deadline_ms: _Optional[int] = ...) -> None: ...

class LeaseQueued(_message.Message):
    __slots__ = ("position", "reason")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    position: int
    reason: str
    def __init__(self, position: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class LeaseEnded(_message.Message):
    __slots__ = ("epoch", "reason")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    reason: str
    def __init__(self, epoch: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("request_id", "granted", "renewed", "revoke", "queued", "ended")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    REVOKE_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    granted: LeaseGranted
    renewed: LeaseRenewed
    revoke: LeaseRevoke
    queued: LeaseQueued
    ended: LeaseEnded
    def __init__(self, request_id: _Optional[str] = ..., granted: _Optional[_Union[LeaseGranted, _Mapping]] = ..., renewed: _Optional[_Union[LeaseRenewed, _Mapping]] = ..., revoke: _Optional[_Union[LeaseRevoke, _Mapping]] = ..., queued: _Optional[_Union[LeaseQueued, _Mapping]] = ..., ended: _Optional[_Union[LeaseEnded, _Mapping]] = ...) -> None: ...

class ListLeasesRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class LeaseInfo(_message.Message):
    __slots__ = ("holder", "model", "bytes", "epoch", "priority", "expires_in_ms", "busy", "revoking", "swap_in_ms")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_MS_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    REVOKING_FIELD_NUMBER: _ClassVar[int]
    SWAP_IN_MS_FIELD_NUMBER: _ClassVar[int]
    holder: str
    model: str
    bytes: int
    epoch: int
    priority: LeasePriority
    expires_in_ms: int
    busy: bool
    revoking: bool
    swap_in_ms: int
    def __init__(self, holder: _Optional[str] = ..., model: _Optional[str] = ..., bytes: _Optional[int] = ..., epoch: _Optional[int] = ..., priority: _Optional[_Union[LeasePriority, str]] = ..., expires_in_ms: _Optional[int] = ..., busy: _Optional[bool] = ..., revoking: _Optional[bool] = ..., swap_in_ms: _Optional[int] = ...) -> None: ...

class ListLeasesResponse(_message.Message):
    __slots__ = ("request_id", "capacity_bytes", "granted_bytes", "leases", "waiting")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    GRANTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    capacity_bytes: int
    granted_bytes: int
    leases: _containers.RepeatedCompositeFieldContainer[LeaseInfo]
    waiting: _containers.RepeatedCompositeFieldContainer[LeaseAcquire]
    def __init__(self, request_id: _Optional[str] = ..., capacity_bytes: _Optional[int] = ..., granted_bytes: _Optional[int] = ..., leases: _Optional[_Iterable[_Union[LeaseInfo, _Mapping]]] = ..., waiting: _Optional[_Iterable[_Union[LeaseAcquire, _Mapping]]] = ...) -> None: ...

class ModelStatus(_message.Message):
    __slots__ = ("service", "engine", "model", "device", "residency", "resident_bytes", "declared_bytes", "lease_epoch", "active_streams", "swap_in_ms", "swap_out_ms", "swap_ins")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    RESIDENCY_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    DECLARED_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_STREAMS_FIELD_NUMBER: _ClassVar[int]
    SWAP_IN_MS_FIELD_NUMBER: _ClassVar[int]
    SWAP_OUT_MS_FIELD_NUMBER: _ClassVar[int]
    SWAP_INS_FIELD_NUMBER: _ClassVar[int]
    service: str
    engine: str
    model: str
    device: str
    residency: Residency
    resident_bytes: int
    declared_bytes: int
    lease_epoch: int
    active_streams: int
    swap_in_ms: int
    swap_out_ms: int
    swap_ins: int
    def __init__(self, service: _Optional[str] = ..., engine: _Optional[str] = ..., model: _Optional[str] = ..., device: _Optional[str] = ..., residency: _Optional[_Union[Residency, str]] = ..., resident_bytes: _Optional[int] = ..., declared_bytes: _Optional[int] = ..., lease_epoch: _Optional[int] = ..., active_streams: _Optional[int] = ..., swap_in_ms: _Optional[int] = ..., swap_out_ms: _Optional[int] = ..., swap_ins: _Optional[int] = ...) -> None: ...

class LoadRequest(_message.Message):
    __slots__ = ("request_id", "priority")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    priority: LeasePriority
    def __init__(self, request_id: _Optional[str] = ..., priority: _Optional[_Union[LeasePriority, str]] = ...) -> None: ...

class LoadResponse(_message.Message):
    __slots__ = ("request_id", "stage", "progress", "status")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    stage: str
    progress: float
    status: ModelStatus
    def __init__(self, request_id: _Optional[str] = ..., stage: _Optional[str] = ..., progress: _Optional[float] = ..., status: _Optional[_Union[ModelStatus, _Mapping]] = ...) -> None: ...

class OffloadRequest(_message.Message):
    __slots__ = ("request_id", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class OffloadResponse(_message.Message):
    __slots__ = ("request_id", "status")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    status: ModelStatus
    def __init__(self, request_id: _Optional[str] = ..., status: _Optional[_Union[ModelStatus, _Mapping]] = ...) -> None: ...

class GetModelStatusRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class GetModelStatusResponse(_message.Message):
    __slots__ = ("request_id", "status")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    status: ModelStatus
    def __init__(self, request_id: _Optional[str] = ..., status: _Optional[_Union[ModelStatus, _Mapping]] = ...) -> None: ...
