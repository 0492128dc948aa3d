from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AudioEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIO_ENCODING_UNSPECIFIED: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_LINEAR_PCM_S16LE: _ClassVar[AudioEncoding]
AUDIO_ENCODING_UNSPECIFIED: AudioEncoding
AUDIO_ENCODING_LINEAR_PCM_S16LE: AudioEncoding

class AudioFormat(_message.Message):
    __slots__ = ("encoding", "sample_rate_hz", "channels")
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    encoding: AudioEncoding
    sample_rate_hz: int
    channels: int
    def __init__(self, encoding: _Optional[_Union[AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ..., channels: _Optional[int] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("format", "data", "offset_samples", "sequence")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    format: AudioFormat
    data: bytes
    offset_samples: int
    sequence: int
    def __init__(self, format: _Optional[_Union[AudioFormat, _Mapping]] = ..., data: _Optional[bytes] = ..., offset_samples: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...

class TextSpan(_message.Message):
    __slots__ = ("start_char", "end_char")
    START_CHAR_FIELD_NUMBER: _ClassVar[int]
    END_CHAR_FIELD_NUMBER: _ClassVar[int]
    start_char: int
    end_char: int
    def __init__(self, start_char: _Optional[int] = ..., end_char: _Optional[int] = ...) -> None: ...
