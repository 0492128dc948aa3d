from voice.v1 import audio_pb2 as _audio_pb2
from voice.v1 import recognizer_pb2 as _recognizer_pb2
from voice.v1 import routing_pb2 as _routing_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConversationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONVERSATION_STATE_UNSPECIFIED: _ClassVar[ConversationState]
    CONVERSATION_STATE_LISTENING: _ClassVar[ConversationState]
    CONVERSATION_STATE_THINKING: _ClassVar[ConversationState]
    CONVERSATION_STATE_SPEAKING: _ClassVar[ConversationState]
CONVERSATION_STATE_UNSPECIFIED: ConversationState
CONVERSATION_STATE_LISTENING: ConversationState
CONVERSATION_STATE_THINKING: ConversationState
CONVERSATION_STATE_SPEAKING: ConversationState

class SamplingConfig(_message.Message):
    __slots__ = ("temperature", "top_p", "max_tokens", "seed")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., max_tokens: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...

class BargeInConfig(_message.Message):
    __slots__ = ("disabled", "min_speech_ms", "stop_words", "min_words", "backchannels")
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    MIN_SPEECH_MS_FIELD_NUMBER: _ClassVar[int]
    STOP_WORDS_FIELD_NUMBER: _ClassVar[int]
    MIN_WORDS_FIELD_NUMBER: _ClassVar[int]
    BACKCHANNELS_FIELD_NUMBER: _ClassVar[int]
    disabled: bool
    min_speech_ms: int
    stop_words: _containers.RepeatedScalarFieldContainer[str]
    min_words: int
    backchannels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, disabled: _Optional[bool] = ..., min_speech_ms: _Optional[int] = ..., stop_words: _Optional[_Iterable[str]] = ..., min_words: _Optional[int] = ..., backchannels: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolDeclaration(_message.Message):
    __slots__ = ("name", "description", "parameters_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "function_name")
    class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MODE_UNSPECIFIED: _ClassVar[ToolChoice.Mode]
        MODE_AUTO: _ClassVar[ToolChoice.Mode]
        MODE_NONE: _ClassVar[ToolChoice.Mode]
        MODE_REQUIRED: _ClassVar[ToolChoice.Mode]
        MODE_FUNCTION: _ClassVar[ToolChoice.Mode]
    MODE_UNSPECIFIED: ToolChoice.Mode
    MODE_AUTO: ToolChoice.Mode
    MODE_NONE: ToolChoice.Mode
    MODE_REQUIRED: ToolChoice.Mode
    MODE_FUNCTION: ToolChoice.Mode
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoice.Mode
    function_name: str
    def __init__(self, mode: _Optional[_Union[ToolChoice.Mode, str]] = ..., function_name: _Optional[str] = ...) -> None: ...

class ConversationConfig(_message.Message):
    __slots__ = ("input_format", "output_format", "voice", "system_prompt", "sampling", "language", "endpointing", "barge_in", "routing", "client_cancels_echo", "tools", "tool_choice", "tool_timeout_ms", "tool_filler_ms")
    INPUT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTING_FIELD_NUMBER: _ClassVar[int]
    BARGE_IN_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FIELD_NUMBER: _ClassVar[int]
    CLIENT_CANCELS_ECHO_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    TOOL_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TOOL_FILLER_MS_FIELD_NUMBER: _ClassVar[int]
    input_format: _audio_pb2.AudioFormat
    output_format: _audio_pb2.AudioFormat
    voice: str
    system_prompt: str
    sampling: SamplingConfig
    language: str
    endpointing: _recognizer_pb2.EndpointingConfig
    barge_in: BargeInConfig
    routing: _routing_pb2.Routing
    client_cancels_echo: bool
    tools: _containers.RepeatedCompositeFieldContainer[ToolDeclaration]
    tool_choice: ToolChoice
    tool_timeout_ms: int
    tool_filler_ms: int
    def __init__(self, input_format: _Optional[_Union[_audio_pb2.AudioFormat, _Mapping]] = ..., output_format: _Optional[_Union[_audio_pb2.AudioFormat, _Mapping]] = ..., voice: _Optional[str] = ..., system_prompt: _Optional[str] = ..., sampling: _Optional[_Union[SamplingConfig, _Mapping]] = ..., language: _Optional[str] = ..., endpointing: _Optional[_Union[_recognizer_pb2.EndpointingConfig, _Mapping]] = ..., barge_in: _Optional[_Union[BargeInConfig, _Mapping]] = ..., routing: _Optional[_Union[_routing_pb2.Routing, _Mapping]] = ..., client_cancels_echo: _Optional[bool] = ..., tools: _Optional[_Iterable[_Union[ToolDeclaration, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., tool_timeout_ms: _Optional[int] = ..., tool_filler_ms: _Optional[int] = ...) -> None: ...

class FunctionCallOutput(_message.Message):
    __slots__ = ("call_id", "output")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    output: str
    def __init__(self, call_id: _Optional[str] = ..., output: _Optional[str] = ...) -> None: ...

class ConversationControl(_message.Message):
    __slots__ = ("action", "played_ms")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACTION_UNSPECIFIED: _ClassVar[ConversationControl.Action]
        ACTION_INTERRUPT: _ClassVar[ConversationControl.Action]
        ACTION_END_OF_TURN: _ClassVar[ConversationControl.Action]
        ACTION_MUTE: _ClassVar[ConversationControl.Action]
        ACTION_UNMUTE: _ClassVar[ConversationControl.Action]
        ACTION_RESPOND: _ClassVar[ConversationControl.Action]
    ACTION_UNSPECIFIED: ConversationControl.Action
    ACTION_INTERRUPT: ConversationControl.Action
    ACTION_END_OF_TURN: ConversationControl.Action
    ACTION_MUTE: ConversationControl.Action
    ACTION_UNMUTE: ConversationControl.Action
    ACTION_RESPOND: ConversationControl.Action
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PLAYED_MS_FIELD_NUMBER: _ClassVar[int]
    action: ConversationControl.Action
    played_ms: int
    def __init__(self, action: _Optional[_Union[ConversationControl.Action, str]] = ..., played_ms: _Optional[int] = ...) -> None: ...

class ConverseRequest(_message.Message):
    __slots__ = ("request_id", "config", "audio", "control", "function_call_output")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    config: ConversationConfig
    audio: bytes
    control: ConversationControl
    function_call_output: FunctionCallOutput
    def __init__(self, request_id: _Optional[str] = ..., config: _Optional[_Union[ConversationConfig, _Mapping]] = ..., audio: _Optional[bytes] = ..., control: _Optional[_Union[ConversationControl, _Mapping]] = ..., function_call_output: _Optional[_Union[FunctionCallOutput, _Mapping]] = ...) -> None: ...

class StateChange(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: ConversationState
    def __init__(self, state: _Optional[_Union[ConversationState, str]] = ...) -> None: ...

class ReplyText(_message.Message):
    __slots__ = ("delta",)
    DELTA_FIELD_NUMBER: _ClassVar[int]
    delta: str
    def __init__(self, delta: _Optional[str] = ...) -> None: ...

class Interrupted(_message.Message):
    __slots__ = ("reason", "audio_sent_ms", "heard_text")
    REASON_FIELD_NUMBER: _ClassVar[int]
    AUDIO_SENT_MS_FIELD_NUMBER: _ClassVar[int]
    HEARD_TEXT_FIELD_NUMBER: _ClassVar[int]
    reason: str
    audio_sent_ms: int
    heard_text: str
    def __init__(self, reason: _Optional[str] = ..., audio_sent_ms: _Optional[int] = ..., heard_text: _Optional[str] = ...) -> None: ...

class TurnTimings(_message.Message):
    __slots__ = ("speech_end_to_first_audio_ms", "speech_end_to_transcript_ms", "transcript_to_first_text_ms", "reply_audio_ms", "speech_end_to_commit_ms", "discarded_replies", "preemptive")
    SPEECH_END_TO_FIRST_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    SPEECH_END_TO_TRANSCRIPT_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_TO_FIRST_TEXT_MS_FIELD_NUMBER: _ClassVar[int]
    REPLY_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    SPEECH_END_TO_COMMIT_MS_FIELD_NUMBER: _ClassVar[int]
    DISCARDED_REPLIES_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIVE_FIELD_NUMBER: _ClassVar[int]
    speech_end_to_first_audio_ms: int
    speech_end_to_transcript_ms: int
    transcript_to_first_text_ms: int
    reply_audio_ms: int
    speech_end_to_commit_ms: int
    discarded_replies: int
    preemptive: bool
    def __init__(self, speech_end_to_first_audio_ms: _Optional[int] = ..., speech_end_to_transcript_ms: _Optional[int] = ..., transcript_to_first_text_ms: _Optional[int] = ..., reply_audio_ms: _Optional[int] = ..., speech_end_to_commit_ms: _Optional[int] = ..., discarded_replies: _Optional[int] = ..., preemptive: _Optional[bool] = ...) -> None: ...

class TurnComplete(_message.Message):
    __slots__ = ("user_text", "reply_text", "interrupted", "timings", "served_by")
    USER_TEXT_FIELD_NUMBER: _ClassVar[int]
    REPLY_TEXT_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    SERVED_BY_FIELD_NUMBER: _ClassVar[int]
    user_text: str
    reply_text: str
    interrupted: bool
    timings: TurnTimings
    served_by: str
    def __init__(self, user_text: _Optional[str] = ..., reply_text: _Optional[str] = ..., interrupted: _Optional[bool] = ..., timings: _Optional[_Union[TurnTimings, _Mapping]] = ..., served_by: _Optional[str] = ...) -> None: ...

class FunctionCall(_message.Message):
    __slots__ = ("call_id", "name", "arguments_delta", "done", "arguments")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_DELTA_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    arguments_delta: str
    done: bool
    arguments: str
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_delta: _Optional[str] = ..., done: _Optional[bool] = ..., arguments: _Optional[str] = ...) -> None: ...

class FunctionCallCancelled(_message.Message):
    __slots__ = ("call_id", "reason")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    reason: str
    def __init__(self, call_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class TurnError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ConverseResponse(_message.Message):
    __slots__ = ("request_id", "turn_index", "state", "user_transcript", "reply_text", "reply_audio", "interrupted", "turn_complete", "turn_error", "end_of_turn", "function_call", "function_call_cancelled")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    USER_TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    REPLY_TEXT_FIELD_NUMBER: _ClassVar[int]
    REPLY_AUDIO_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    TURN_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    TURN_ERROR_FIELD_NUMBER: _ClassVar[int]
    END_OF_TURN_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    turn_index: int
    state: StateChange
    user_transcript: _recognizer_pb2.RecognitionResult
    reply_text: ReplyText
    reply_audio: _audio_pb2.AudioChunk
    interrupted: Interrupted
    turn_complete: TurnComplete
    turn_error: TurnError
    end_of_turn: _recognizer_pb2.EndOfTurn
    function_call: FunctionCall
    function_call_cancelled: FunctionCallCancelled
    def __init__(self, request_id: _Optional[str] = ..., turn_index: _Optional[int] = ..., state: _Optional[_Union[StateChange, _Mapping]] = ..., user_transcript: _Optional[_Union[_recognizer_pb2.RecognitionResult, _Mapping]] = ..., reply_text: _Optional[_Union[ReplyText, _Mapping]] = ..., reply_audio: _Optional[_Union[_audio_pb2.AudioChunk, _Mapping]] = ..., interrupted: _Optional[_Union[Interrupted, _Mapping]] = ..., turn_complete: _Optional[_Union[TurnComplete, _Mapping]] = ..., turn_error: _Optional[_Union[TurnError, _Mapping]] = ..., end_of_turn: _Optional[_Union[_recognizer_pb2.EndOfTurn, _Mapping]] = ..., function_call: _Optional[_Union[FunctionCall, _Mapping]] = ..., function_call_cancelled: _Optional[_Union[FunctionCallCancelled, _Mapping]] = ...) -> None: ...
