from voice.v1 import audio_pb2 as _audio_pb2
from voice.v1 import routing_pb2 as _routing_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VoiceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VOICE_KIND_UNSPECIFIED: _ClassVar[VoiceKind]
    VOICE_KIND_PRESET: _ClassVar[VoiceKind]
    VOICE_KIND_CLONED: _ClassVar[VoiceKind]
VOICE_KIND_UNSPECIFIED: VoiceKind
VOICE_KIND_PRESET: VoiceKind
VOICE_KIND_CLONED: VoiceKind

class SynthesisConfig(_message.Message):
    __slots__ = ("voice", "language", "output_format", "speaking_rate", "seed", "routing")
    VOICE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SPEAKING_RATE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FIELD_NUMBER: _ClassVar[int]
    voice: str
    language: str
    output_format: _audio_pb2.AudioFormat
    speaking_rate: float
    seed: int
    routing: _routing_pb2.Routing
    def __init__(self, voice: _Optional[str] = ..., language: _Optional[str] = ..., output_format: _Optional[_Union[_audio_pb2.AudioFormat, _Mapping]] = ..., speaking_rate: _Optional[float] = ..., seed: _Optional[int] = ..., routing: _Optional[_Union[_routing_pb2.Routing, _Mapping]] = ...) -> None: ...

class SynthesizeRequest(_message.Message):
    __slots__ = ("request_id", "text", "config")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    config: SynthesisConfig
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., config: _Optional[_Union[SynthesisConfig, _Mapping]] = ...) -> None: ...

class SynthesizeResponse(_message.Message):
    __slots__ = ("request_id", "audio", "text_span", "served_by")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    TEXT_SPAN_FIELD_NUMBER: _ClassVar[int]
    SERVED_BY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    audio: _audio_pb2.AudioChunk
    text_span: _audio_pb2.TextSpan
    served_by: str
    def __init__(self, request_id: _Optional[str] = ..., audio: _Optional[_Union[_audio_pb2.AudioChunk, _Mapping]] = ..., text_span: _Optional[_Union[_audio_pb2.TextSpan, _Mapping]] = ..., served_by: _Optional[str] = ...) -> None: ...

class TextBufferPolicy(_message.Message):
    __slots__ = ("min_chars", "max_wait_ms")
    MIN_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    min_chars: int
    max_wait_ms: int
    def __init__(self, min_chars: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class StreamingSynthesisConfig(_message.Message):
    __slots__ = ("synthesis", "buffering")
    SYNTHESIS_FIELD_NUMBER: _ClassVar[int]
    BUFFERING_FIELD_NUMBER: _ClassVar[int]
    synthesis: SynthesisConfig
    buffering: TextBufferPolicy
    def __init__(self, synthesis: _Optional[_Union[SynthesisConfig, _Mapping]] = ..., buffering: _Optional[_Union[TextBufferPolicy, _Mapping]] = ...) -> None: ...

class StreamingSynthesizeRequest(_message.Message):
    __slots__ = ("request_id", "config", "text_delta", "flush", "end_of_text")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FIELD_NUMBER: _ClassVar[int]
    END_OF_TEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    config: StreamingSynthesisConfig
    text_delta: str
    flush: bool
    end_of_text: bool
    def __init__(self, request_id: _Optional[str] = ..., config: _Optional[_Union[StreamingSynthesisConfig, _Mapping]] = ..., text_delta: _Optional[str] = ..., flush: _Optional[bool] = ..., end_of_text: _Optional[bool] = ...) -> None: ...

class StreamingSynthesizeResponse(_message.Message):
    __slots__ = ("request_id", "audio", "text_span", "served_by")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    TEXT_SPAN_FIELD_NUMBER: _ClassVar[int]
    SERVED_BY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    audio: _audio_pb2.AudioChunk
    text_span: _audio_pb2.TextSpan
    served_by: str
    def __init__(self, request_id: _Optional[str] = ..., audio: _Optional[_Union[_audio_pb2.AudioChunk, _Mapping]] = ..., text_span: _Optional[_Union[_audio_pb2.TextSpan, _Mapping]] = ..., served_by: _Optional[str] = ...) -> None: ...

class Voice(_message.Message):
    __slots__ = ("id", "display_name", "languages", "native_sample_rate_hz", "service", "engine", "kind", "description")
    ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    NATIVE_SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    id: str
    display_name: str
    languages: _containers.RepeatedScalarFieldContainer[str]
    native_sample_rate_hz: int
    service: str
    engine: str
    kind: VoiceKind
    description: str
    def __init__(self, id: _Optional[str] = ..., display_name: _Optional[str] = ..., languages: _Optional[_Iterable[str]] = ..., native_sample_rate_hz: _Optional[int] = ..., service: _Optional[str] = ..., engine: _Optional[str] = ..., kind: _Optional[_Union[VoiceKind, str]] = ..., description: _Optional[str] = ...) -> None: ...

class ListVoicesRequest(_message.Message):
    __slots__ = ("request_id", "language", "service")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    language: str
    service: str
    def __init__(self, request_id: _Optional[str] = ..., language: _Optional[str] = ..., service: _Optional[str] = ...) -> None: ...

class ListVoicesResponse(_message.Message):
    __slots__ = ("request_id", "voices")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VOICES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    voices: _containers.RepeatedCompositeFieldContainer[Voice]
    def __init__(self, request_id: _Optional[str] = ..., voices: _Optional[_Iterable[_Union[Voice, _Mapping]]] = ...) -> None: ...

class RegisterVoiceRequest(_message.Message):
    __slots__ = ("request_id", "voice_id", "prompt_audio", "prompt_format", "prompt_transcript", "language", "routing")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VOICE_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_AUDIO_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    voice_id: str
    prompt_audio: bytes
    prompt_format: _audio_pb2.AudioFormat
    prompt_transcript: str
    language: str
    routing: _routing_pb2.Routing
    def __init__(self, request_id: _Optional[str] = ..., voice_id: _Optional[str] = ..., prompt_audio: _Optional[bytes] = ..., prompt_format: _Optional[_Union[_audio_pb2.AudioFormat, _Mapping]] = ..., prompt_transcript: _Optional[str] = ..., language: _Optional[str] = ..., routing: _Optional[_Union[_routing_pb2.Routing, _Mapping]] = ...) -> None: ...

class RegisterVoiceResponse(_message.Message):
    __slots__ = ("request_id", "voice")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    voice: Voice
    def __init__(self, request_id: _Optional[str] = ..., voice: _Optional[_Union[Voice, _Mapping]] = ...) -> None: ...
