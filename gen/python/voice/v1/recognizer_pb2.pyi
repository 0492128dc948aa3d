from voice.v1 import audio_pb2 as _audio_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EndpointingConfig(_message.Message):
    __slots__ = ("threshold", "min_speech_ms", "hangover_ms", "max_utterance_ms", "mode", "turn_threshold", "min_silence_ms", "max_silence_ms", "text_check", "non_final_words", "sentence_end_silence_ms", "early_silence_ms", "early_turn_threshold")
    class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MODE_UNSPECIFIED: _ClassVar[EndpointingConfig.Mode]
        MODE_SILENCE: _ClassVar[EndpointingConfig.Mode]
        MODE_SEMANTIC: _ClassVar[EndpointingConfig.Mode]
    MODE_UNSPECIFIED: EndpointingConfig.Mode
    MODE_SILENCE: EndpointingConfig.Mode
    MODE_SEMANTIC: EndpointingConfig.Mode
    class TextCheck(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TEXT_CHECK_UNSPECIFIED: _ClassVar[EndpointingConfig.TextCheck]
        TEXT_CHECK_ON: _ClassVar[EndpointingConfig.TextCheck]
        TEXT_CHECK_OFF: _ClassVar[EndpointingConfig.TextCheck]
    TEXT_CHECK_UNSPECIFIED: EndpointingConfig.TextCheck
    TEXT_CHECK_ON: EndpointingConfig.TextCheck
    TEXT_CHECK_OFF: EndpointingConfig.TextCheck
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    MIN_SPEECH_MS_FIELD_NUMBER: _ClassVar[int]
    HANGOVER_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_UTTERANCE_MS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TURN_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    MIN_SILENCE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_SILENCE_MS_FIELD_NUMBER: _ClassVar[int]
    TEXT_CHECK_FIELD_NUMBER: _ClassVar[int]
    NON_FINAL_WORDS_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_END_SILENCE_MS_FIELD_NUMBER: _ClassVar[int]
    EARLY_SILENCE_MS_FIELD_NUMBER: _ClassVar[int]
    EARLY_TURN_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    threshold: float
    min_speech_ms: int
    hangover_ms: int
    max_utterance_ms: int
    mode: EndpointingConfig.Mode
    turn_threshold: float
    min_silence_ms: int
    max_silence_ms: int
    text_check: EndpointingConfig.TextCheck
    non_final_words: _containers.RepeatedScalarFieldContainer[str]
    sentence_end_silence_ms: int
    early_silence_ms: int
    early_turn_threshold: float
    def __init__(self, threshold: _Optional[float] = ..., min_speech_ms: _Optional[int] = ..., hangover_ms: _Optional[int] = ..., max_utterance_ms: _Optional[int] = ..., mode: _Optional[_Union[EndpointingConfig.Mode, str]] = ..., turn_threshold: _Optional[float] = ..., min_silence_ms: _Optional[int] = ..., max_silence_ms: _Optional[int] = ..., text_check: _Optional[_Union[EndpointingConfig.TextCheck, str]] = ..., non_final_words: _Optional[_Iterable[str]] = ..., sentence_end_silence_ms: _Optional[int] = ..., early_silence_ms: _Optional[int] = ..., early_turn_threshold: _Optional[float] = ...) -> None: ...

class EndOfTurn(_message.Message):
    __slots__ = ("probability", "complete", "silence_ms", "offset_ms", "utterance_index", "vetoed_by_word", "sentence_end", "transcript")
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    SILENCE_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    VETOED_BY_WORD_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_END_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    probability: float
    complete: bool
    silence_ms: int
    offset_ms: int
    utterance_index: int
    vetoed_by_word: str
    sentence_end: bool
    transcript: str
    def __init__(self, probability: _Optional[float] = ..., complete: _Optional[bool] = ..., silence_ms: _Optional[int] = ..., offset_ms: _Optional[int] = ..., utterance_index: _Optional[int] = ..., vetoed_by_word: _Optional[str] = ..., sentence_end: _Optional[bool] = ..., transcript: _Optional[str] = ...) -> None: ...

class PhraseSpotted(_message.Message):
    __slots__ = ("phrase", "transcript", "utterance_index", "utterance_start_ms", "offset_ms")
    PHRASE_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_START_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    phrase: str
    transcript: str
    utterance_index: int
    utterance_start_ms: int
    offset_ms: int
    def __init__(self, phrase: _Optional[str] = ..., transcript: _Optional[str] = ..., utterance_index: _Optional[int] = ..., utterance_start_ms: _Optional[int] = ..., offset_ms: _Optional[int] = ...) -> None: ...

class Draft(_message.Message):
    __slots__ = ("transcript", "utterance_index", "utterance_start_ms", "offset_ms")
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_START_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    transcript: str
    utterance_index: int
    utterance_start_ms: int
    offset_ms: int
    def __init__(self, transcript: _Optional[str] = ..., utterance_index: _Optional[int] = ..., utterance_start_ms: _Optional[int] = ..., offset_ms: _Optional[int] = ...) -> None: ...

class RecognitionConfig(_message.Message):
    __slots__ = ("input_format", "language", "interim_results", "endpointing", "phrase_hints", "spot_phrases", "draft_interval_ms")
    INPUT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    INTERIM_RESULTS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTING_FIELD_NUMBER: _ClassVar[int]
    PHRASE_HINTS_FIELD_NUMBER: _ClassVar[int]
    SPOT_PHRASES_FIELD_NUMBER: _ClassVar[int]
    DRAFT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    input_format: _audio_pb2.AudioFormat
    language: str
    interim_results: bool
    endpointing: EndpointingConfig
    phrase_hints: _containers.RepeatedScalarFieldContainer[str]
    spot_phrases: _containers.RepeatedScalarFieldContainer[str]
    draft_interval_ms: int
    def __init__(self, input_format: _Optional[_Union[_audio_pb2.AudioFormat, _Mapping]] = ..., language: _Optional[str] = ..., interim_results: _Optional[bool] = ..., endpointing: _Optional[_Union[EndpointingConfig, _Mapping]] = ..., phrase_hints: _Optional[_Iterable[str]] = ..., spot_phrases: _Optional[_Iterable[str]] = ..., draft_interval_ms: _Optional[int] = ...) -> None: ...

class StreamingRecognizeRequest(_message.Message):
    __slots__ = ("request_id", "config", "audio", "spotting")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SPOTTING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    config: RecognitionConfig
    audio: bytes
    spotting: SpottingControl
    def __init__(self, request_id: _Optional[str] = ..., config: _Optional[_Union[RecognitionConfig, _Mapping]] = ..., audio: _Optional[bytes] = ..., spotting: _Optional[_Union[SpottingControl, _Mapping]] = ...) -> None: ...

class SpottingControl(_message.Message):
    __slots__ = ("paused",)
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    paused: bool
    def __init__(self, paused: _Optional[bool] = ...) -> None: ...

class VadEvent(_message.Message):
    __slots__ = ("kind", "offset_ms")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[VadEvent.Kind]
        KIND_SPEECH_START: _ClassVar[VadEvent.Kind]
        KIND_SPEECH_END: _ClassVar[VadEvent.Kind]
    KIND_UNSPECIFIED: VadEvent.Kind
    KIND_SPEECH_START: VadEvent.Kind
    KIND_SPEECH_END: VadEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    kind: VadEvent.Kind
    offset_ms: int
    def __init__(self, kind: _Optional[_Union[VadEvent.Kind, str]] = ..., offset_ms: _Optional[int] = ...) -> None: ...

class WordInfo(_message.Message):
    __slots__ = ("word", "start_ms", "end_ms", "confidence")
    WORD_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    word: str
    start_ms: int
    end_ms: int
    confidence: float
    def __init__(self, word: _Optional[str] = ..., start_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., confidence: _Optional[float] = ...) -> None: ...

class RecognitionResult(_message.Message):
    __slots__ = ("transcript", "is_final", "stability", "confidence", "utterance_index", "utterance_start_ms", "utterance_end_ms", "audio_processed_ms", "language", "words")
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    IS_FINAL_FIELD_NUMBER: _ClassVar[int]
    STABILITY_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_START_MS_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_END_MS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_PROCESSED_MS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    transcript: str
    is_final: bool
    stability: float
    confidence: float
    utterance_index: int
    utterance_start_ms: int
    utterance_end_ms: int
    audio_processed_ms: int
    language: str
    words: _containers.RepeatedCompositeFieldContainer[WordInfo]
    def __init__(self, transcript: _Optional[str] = ..., is_final: _Optional[bool] = ..., stability: _Optional[float] = ..., confidence: _Optional[float] = ..., utterance_index: _Optional[int] = ..., utterance_start_ms: _Optional[int] = ..., utterance_end_ms: _Optional[int] = ..., audio_processed_ms: _Optional[int] = ..., language: _Optional[str] = ..., words: _Optional[_Iterable[_Union[WordInfo, _Mapping]]] = ...) -> None: ...

class StreamingRecognizeResponse(_message.Message):
    __slots__ = ("request_id", "vad", "result", "end_of_turn", "phrase_spotted", "draft")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VAD_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    END_OF_TURN_FIELD_NUMBER: _ClassVar[int]
    PHRASE_SPOTTED_FIELD_NUMBER: _ClassVar[int]
    DRAFT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    vad: VadEvent
    result: RecognitionResult
    end_of_turn: EndOfTurn
    phrase_spotted: PhraseSpotted
    draft: Draft
    def __init__(self, request_id: _Optional[str] = ..., vad: _Optional[_Union[VadEvent, _Mapping]] = ..., result: _Optional[_Union[RecognitionResult, _Mapping]] = ..., end_of_turn: _Optional[_Union[EndOfTurn, _Mapping]] = ..., phrase_spotted: _Optional[_Union[PhraseSpotted, _Mapping]] = ..., draft: _Optional[_Union[Draft, _Mapping]] = ...) -> None: ...

class RecognizeRequest(_message.Message):
    __slots__ = ("request_id", "config", "audio")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    config: RecognitionConfig
    audio: bytes
    def __init__(self, request_id: _Optional[str] = ..., config: _Optional[_Union[RecognitionConfig, _Mapping]] = ..., audio: _Optional[bytes] = ...) -> None: ...

class RecognizeResponse(_message.Message):
    __slots__ = ("request_id", "vad", "result", "end_of_turn", "phrase_spotted", "draft")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VAD_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    END_OF_TURN_FIELD_NUMBER: _ClassVar[int]
    PHRASE_SPOTTED_FIELD_NUMBER: _ClassVar[int]
    DRAFT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    vad: VadEvent
    result: RecognitionResult
    end_of_turn: EndOfTurn
    phrase_spotted: PhraseSpotted
    draft: Draft
    def __init__(self, request_id: _Optional[str] = ..., vad: _Optional[_Union[VadEvent, _Mapping]] = ..., result: _Optional[_Union[RecognitionResult, _Mapping]] = ..., end_of_turn: _Optional[_Union[EndOfTurn, _Mapping]] = ..., phrase_spotted: _Optional[_Union[PhraseSpotted, _Mapping]] = ..., draft: _Optional[_Union[Draft, _Mapping]] = ...) -> None: ...
