"""The OpenAI Realtime route's session config and event tables (docs/gateway.md#the-openai-realtime-websocket).

The session is the GA ``session`` object as the official SDK types it (``openai.types.realtime``): ``RealtimeSession``
keeps the effective settings, checks a ``session.update`` (all or nothing; a ``RealtimeError`` names the ``param``),
and maps what reaches the fleet onto the conversation WebSocket's own config message (services/gateway/protocol.py:
one set of checks of barge-in and the rest; endpointing's are services/common/endpointing.py's), which
``protocol.conversation_config`` turns into the ConversationConfig of the Converse stream.

``CLIENT_EVENTS`` and ``SERVER_EVENTS`` say, for every event type of the SDK's unions, whether this route supports it,
maps it onto something of ours, or refuses it (and why). docs/gateway.md's compatibility table is checked against them
(tests/gateway/test_realtime_table.py), and the session's handlers and emitted events are checked against them too.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field

from services.common.endpointing import BY_NAME as ENDPOINTING
from services.common.endpointing import INT, Setting
from services.gateway import protocol

# The fleet side of a Realtime session: user audio goes to the Converse stream at 16 kHz (the recognizers' rate) and
# reply audio comes back at 24 kHz (OpenAI's pcm rate, resampled once by the service from its voice's own rate); the
# gateway converts to and from the client's format (services/common/audio).
FLEET_INPUT_RATE = 16_000
FLEET_OUTPUT_RATE = 24_000
PCM_RATE = 24_000  # audio/pcm: s16le mono at 24 kHz, the only rate the GA protocol has
G711_RATE = 8_000  # audio/pcmu, audio/pcma: 8-bit G.711 at 8 kHz (phone lines)
FORMAT_RATES = {"audio/pcm": PCM_RATE, "audio/pcmu": G711_RATE, "audio/pcma": G711_RATE}
# turn_detection onto the endpointing settings (services/common/endpointing.py, their bounds too): server_vad's
# threshold is ``threshold``, its silence_duration_ms ``hangover_ms``; semantic_vad's eagerness sets ``max_silence_ms``.
THRESHOLD, HANGOVER = ENDPOINTING["threshold"], ENDPOINTING["hangover_ms"]
# semantic_vad eagerness -> the longest silence the turn model may wait for an unfinished turn (OpenAI documents 8 s /
# 4 s / 2 s for low / medium / high; protocol.conversation_config holds them to max_silence_ms's bounds). "auto" keeps
# the fleet's tuned default (moss_sts.endpointing.max_silence_ms).
EAGERNESS_MAX_SILENCE_MS = {"low": 8000, "medium": 4000, "high": 2000, "auto": 0}
# turn_detection null: the client commits each turn; the gateway holds the audio and feeds it at response.create, so
# the recognizer's silence endpointing only needs to be long enough never to split a committed turn (its maximum).
MANUAL_HANGOVER_MS = HANGOVER.high
IDLE_TIMEOUT_MS = (5000, 30000)  # server_vad.idle_timeout_ms: the shortest and longest silence before the agent speaks
# server_vad's documented defaults (the session shows them; silence_duration_ms becomes our hangover).
SERVER_VAD_DEFAULTS = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "idle_timeout_ms": None,
    "create_response": True,
    "interrupt_response": True,
}
SEMANTIC_VAD_DEFAULTS = {
    "type": "semantic_vad",
    "eagerness": "auto",
    "create_response": True,
    "interrupt_response": True,
}
# The model names that pin a fleet backend for the Converse stream; any other model (gpt-realtime, ...) takes the
# router's default route (moss_sts first, the router's cascade as its fallback).
ENGINE_MODELS = ("moss_sts",)


class RealtimeError(Exception):
    """A client event the route cannot take: an ``error`` event (the session goes on)."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_value", kind: str = ""):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind or "invalid_request_error"


# --- the compatibility table ----------------------------------------------------------------------------------------
SUPPORTED, MAPPED, REFUSED, NOT_SENT = "supported", "mapped", "refused", "not sent"

CLIENT_EVENTS: dict[str, tuple[str, str]] = {
    "session.update": (
        MAPPED,
        "realtime sessions: formats, voice, instructions, turn detection, transcription, output modalities, max output"
        " tokens, function tools and tool_choice become the Converse config; transcription sessions (type transcription, or intent=transcription in"
        " the URL): format, language, turn detection become a Recognizer stream; what the fleet cannot honour is"
        " refused by name",
    ),
    "input_audio_buffer.append": (
        SUPPORTED,
        "decoded (pcm 24 kHz, pcmu/pcma 8 kHz), resampled to 16 kHz; streamed to the Converse stream (VAD) or held"
        " until response.create (turn_detection null); over WebRTC the microphone track is the input (Opus at 48 kHz,"
        " resampled to 16 kHz, taken the same way) and append is refused",
    ),
    "input_audio_buffer.commit": (
        MAPPED,
        "turn_detection null: the held audio becomes a user item; with VAD: ends the user's turn now (ACTION_END_OF_TURN)",
    ),
    "input_audio_buffer.clear": (
        MAPPED,
        "turn_detection null: drops the held audio; with VAD the audio already reached the recognizer: refused",
    ),
    "conversation.item.create": (
        MAPPED,
        "user messages, answered at response.create: input_text is said into the stream by the route's default voice"
        " (the contract carries no text turn; the context keeps what the recognizer hears), input_audio is held like"
        " committed audio; a function_call_output item answers the call waiting for it (sent to the stream at the"
        " next response.create); assistant and system items and images refused",
    ),
    "conversation.item.retrieve": (SUPPORTED, "from the gateway's record of the session's items (no audio bytes)"),
    "conversation.item.delete": (REFUSED, "the dialogue's context cannot be edited through the Converse contract"),
    "conversation.item.truncate": (
        MAPPED,
        "the reply in progress is interrupted; the last reply, ended whole, is cut after the fact (ACTION_INTERRUPT"
        " with played_ms): the item and the context keep the text of audio_end_ms of audio; an older item only where"
        " audio_end_ms covers all the audio sent",
    ),
    "response.create": (
        MAPPED,
        "turn_detection null: feeds the committed audio and ends the turn; with VAD: ends a turn in progress;"
        " with no user input: ACTION_RESPOND, the agent speaks from the conversation so far (a greeting);"
        " output_modalities and metadata are honoured, other per-response overrides refused",
    ),
    "response.cancel": (MAPPED, "ACTION_INTERRUPT: the reply stops, response.done says cancelled"),
    "output_audio_buffer.clear": (
        SUPPORTED,
        "WebRTC: drops the reply audio the track still holds (output_audio_buffer.cleared; response.cancel stops the"
        " reply itself); refused on the WebSocket, where the client holds the audio it was sent",
    ),
}

SERVER_EVENTS: dict[str, tuple[str, str]] = {
    "session.created": (SUPPORTED, "first event, the effective defaults"),
    "session.updated": (SUPPORTED, "after each accepted session.update"),
    "input_audio_buffer.speech_started": (
        MAPPED,
        "the Converse stream's first transcript of a user turn; in transcription sessions the recognizer's speech start"
        " (VAD only)",
    ),
    "input_audio_buffer.speech_stopped": (
        MAPPED,
        "the Converse turn's commit; in transcription sessions the recognizer's speech end (VAD only)",
    ),
    "input_audio_buffer.committed": (MAPPED, "the Converse turn's commit (VAD), or input_audio_buffer.commit (null)"),
    "input_audio_buffer.cleared": (SUPPORTED, "turn_detection null"),
    "input_audio_buffer.timeout_triggered": (
        SUPPORTED,
        "server_vad.idle_timeout_ms after the last reply's audio has played: an empty user item, then a response",
    ),
    "input_audio_buffer.dtmf_event_received": (NOT_SENT, "SIP only"),
    "conversation.item.added": (SUPPORTED, "user items at commit, assistant items when the reply starts"),
    "conversation.item.done": (SUPPORTED, "user items with their transcript, assistant items at the turn's end"),
    "conversation.item.created": (NOT_SENT, "the beta name; the GA protocol sends conversation.item.added"),
    "conversation.item.retrieved": (SUPPORTED, "answer to conversation.item.retrieve"),
    "conversation.item.truncated": (MAPPED, "answer to conversation.item.truncate"),
    "conversation.item.deleted": (NOT_SENT, "conversation.item.delete is refused"),
    "conversation.created": (NOT_SENT, "the beta event; GA sessions start with session.created"),
    "conversation.item.input_audio_transcription.delta": (
        MAPPED,
        "each final of the recognizer within the user's turn, when audio.input.transcription is set",
    ),
    "conversation.item.input_audio_transcription.completed": (
        MAPPED,
        "the Converse turn's user transcript, when audio.input.transcription is set; in transcription sessions each"
        " utterance's final",
    ),
    "conversation.item.input_audio_transcription.failed": (
        SUPPORTED,
        "a transcription session's recognition of a committed buffer that fails (in conversations: a failed"
        " response.done)",
    ),
    "conversation.item.input_audio_transcription.segment": (NOT_SENT, "diarization is not served"),
    "response.created": (SUPPORTED, "at the Converse turn's commit (VAD) or at response.create (null)"),
    "response.done": (
        SUPPORTED,
        "completed; cancelled (barge-in: turn_detected, response.cancel: client_cancelled); failed (the Converse"
        " turn's error); no usage (the fleet does not count tokens per turn)",
    ),
    "response.output_item.added": (
        SUPPORTED,
        "the assistant message, at the reply's first text or audio; a function_call item at the Converse FunctionCall",
    ),
    "response.output_item.done": (
        SUPPORTED,
        "the assistant message as the context keeps it; the function_call item with its arguments",
    ),
    "response.content_part.added": (SUPPORTED, "one audio (or text) part per reply"),
    "response.content_part.done": (SUPPORTED, "with the reply's transcript (what was heard, when interrupted)"),
    "response.output_audio.delta": (
        SUPPORTED,
        "the Converse reply audio, paced at playback, in the output format (WebSocket; over WebRTC it plays on the"
        " audio track instead)",
    ),
    "response.output_audio.done": (SUPPORTED, "at the Converse turn's end"),
    "response.output_audio_transcript.delta": (SUPPORTED, "the Converse reply text"),
    "response.output_audio_transcript.done": (SUPPORTED, "the reply text the context keeps"),
    "response.output_text.delta": (SUPPORTED, "output_modalities [text]: the reply text (its audio is dropped)"),
    "response.output_text.done": (SUPPORTED, "output_modalities [text]"),
    "response.function_call_arguments.delta": (
        MAPPED,
        "the Converse FunctionCall's arguments (validated against the tool's schema before any is sent)",
    ),
    "response.function_call_arguments.done": (MAPPED, "the Converse FunctionCall done: name, call_id, arguments"),
    "response.mcp_call_arguments.delta": (NOT_SENT, "MCP tools are refused"),
    "response.mcp_call_arguments.done": (NOT_SENT, "MCP tools are refused"),
    "response.mcp_call.in_progress": (NOT_SENT, "MCP tools are refused"),
    "response.mcp_call.completed": (NOT_SENT, "MCP tools are refused"),
    "response.mcp_call.failed": (NOT_SENT, "MCP tools are refused"),
    "mcp_list_tools.in_progress": (NOT_SENT, "MCP tools are refused"),
    "mcp_list_tools.completed": (NOT_SENT, "MCP tools are refused"),
    "mcp_list_tools.failed": (NOT_SENT, "MCP tools are refused"),
    "rate_limits.updated": (NOT_SENT, "the fleet has no token rate limits; admission refuses with an error"),
    "output_audio_buffer.started": (SUPPORTED, "WebRTC: the audio track began playing a response's audio"),
    "output_audio_buffer.stopped": (
        SUPPORTED,
        "WebRTC: the audio track played the last of a finished response's audio",
    ),
    "output_audio_buffer.cleared": (
        SUPPORTED,
        "WebRTC: the track's queued reply audio was dropped (output_audio_buffer.clear, a barge-in, response.cancel)",
    ),
    "error": (SUPPORTED, "type, code, message, param naming the field, event_id of the client event"),
}


# --- the session ------------------------------------------------------------------------------------------------------
def _fmt(kind: str) -> dict:
    return {"type": kind, "rate": PCM_RATE} if kind == "audio/pcm" else {"type": kind}


@dataclass
class RealtimeSession:
    """The effective settings of one Realtime session (what session.created / .updated show)."""

    model: str
    session_id: str
    instructions: str = ""
    output_modalities: list = field(default_factory=lambda: ["audio"])
    max_output_tokens: int | str = "inf"
    input_format: str = "audio/pcm"
    output_format: str = "audio/pcm"
    voice: str | None = None  # None: the route's default voice
    speed: float = 1.0
    transcription: dict | None = None
    turn_detection: dict | None = field(default_factory=lambda: dict(SERVER_VAD_DEFAULTS))
    tools: list = field(default_factory=list)  # OpenAI function tools, as the client sent them (checked)
    tool_choice: str | dict = "auto"
    truncation: str = "auto"
    kind: str = "realtime"  # "transcription": a transcription-only session on the Recognizer stream

    def as_event(self) -> dict:
        if self.kind == "transcription":
            return {
                "type": "transcription",
                "object": "realtime.transcription_session",
                "id": self.session_id,
                "audio": {
                    "input": {
                        "format": _fmt(self.input_format),
                        "transcription": copy.deepcopy(self.transcription),
                        "noise_reduction": None,
                        "turn_detection": copy.deepcopy(self.turn_detection),
                    }
                },
                "include": None,
            }
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": self.session_id,
            "model": self.model,
            "output_modalities": list(self.output_modalities),
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "audio": {
                "input": {
                    "format": _fmt(self.input_format),
                    "transcription": copy.deepcopy(self.transcription),
                    "noise_reduction": None,
                    "turn_detection": copy.deepcopy(self.turn_detection),
                },
                "output": {"format": _fmt(self.output_format), "voice": self.voice, "speed": self.speed},
            },
            "tools": copy.deepcopy(self.tools),
            "tool_choice": copy.deepcopy(self.tool_choice),
            "tracing": None,
            "truncation": self.truncation,
            "prompt": None,
            "include": None,
        }

    @property
    def vad(self) -> bool:
        return self.turn_detection is not None

    @property
    def idle_timeout_s(self) -> float | None:
        """server_vad's idle_timeout_ms, in seconds (None: off)."""
        td = self.turn_detection
        ms = td.get("idle_timeout_ms") if td is not None and td["type"] == "server_vad" else None
        return ms / 1000 if ms else None

    @property
    def text_only(self) -> bool:
        return self.output_modalities == ["text"]

    def converse_config(self, max_text_chars: int) -> dict:
        """The conversation WebSocket's config message for these settings (protocol.conversation_config checks it)."""
        td = self.turn_detection
        if td is None:
            endpointing = {"mode": "silence", "hangover_ms": MANUAL_HANGOVER_MS}
            barge_in = {}
        elif td["type"] == "server_vad":
            endpointing = {"mode": "silence", "hangover_ms": td["silence_duration_ms"], "threshold": td["threshold"]}
            barge_in = {"disabled": not td["interrupt_response"]}
        else:
            endpointing = {"mode": "semantic", "max_silence_ms": EAGERNESS_MAX_SILENCE_MS[td["eagerness"]]}
            barge_in = {"disabled": not td["interrupt_response"]}
        config = {
            "type": "config",
            "sample_rate": FLEET_INPUT_RATE,
            "output_sample_rate": FLEET_OUTPUT_RATE,
            "voice": self.voice or "",
            "language": (self.transcription or {}).get("language") or "",
            "system_prompt": self.instructions,
            "engine": self.model if self.model in ENGINE_MODELS else "",
            "max_tokens": 0 if self.max_output_tokens == "inf" else self.max_output_tokens,
            "endpointing": endpointing,
            "barge_in": barge_in,
        }
        protocol.conversation_config(config, max_text_chars)  # one definition of the checks: a bug here, not the client
        return config


# Fields whose value is part of the Converse config: fixed once the Converse stream is open (one config per session).
LOCKED = {
    "instructions": "session.instructions",
    "max_output_tokens": "session.max_output_tokens",
    "voice": "session.audio.output.voice",
    "turn_detection": "session.audio.input.turn_detection",
    "transcription_language": "session.audio.input.transcription.language",
    "tools": "session.tools",
    "tool_choice": "session.tool_choice",
}


def _locked_values(s: RealtimeSession) -> dict:
    return {
        "instructions": s.instructions,
        "max_output_tokens": s.max_output_tokens,
        "voice": s.voice,
        "turn_detection": s.turn_detection,
        "transcription_language": (s.transcription or {}).get("language"),
        "tools": s.tools,
        "tool_choice": s.tool_choice,
    }


def _shown(value) -> str:
    return json.dumps(value)[:60]


def _object(value, param: str) -> dict:
    if not isinstance(value, dict):
        raise RealtimeError(
            f"Invalid type for '{param}': expected an object, got {_shown(value)}.", param, "invalid_type"
        )
    return value


def _known(obj: dict, where: str, known: tuple[str, ...]) -> None:
    for name in obj:
        if name not in known:
            raise RealtimeError(
                f"Unknown parameter: '{where}.{name}'. Known: {', '.join(known)}.",
                f"{where}.{name}",
                "unknown_parameter",
            )


def _tools(value) -> list:
    """session.tools: OpenAI function tools ({type: "function", name, description, parameters}), each checked as the
    Conversation contract checks a declaration (services/common/tools.py), the param naming the Realtime field."""
    from services.common import tools as declarations
    from services.common.errors import InvalidArgument

    if value is None:
        return []
    if not isinstance(value, list):
        raise RealtimeError("Invalid value for 'session.tools': expected a list of function tools.", "session.tools")
    out, declared = [], []
    for i, tool in enumerate(value):
        where = f"session.tools[{i}]"
        if not isinstance(tool, dict):
            raise RealtimeError(f"Invalid value for '{where}': expected an object.", where)
        if tool.get("type", "function") != "function":
            raise RealtimeError(
                f"'{where}.type' {str(tool.get('type'))[:20]!r} is not served: function tools only (no MCP servers).",
                f"{where}.type",
                "unsupported",
            )
        for name in tool:
            if name not in ("type", "name", "description", "parameters"):
                raise RealtimeError(f"Unknown parameter: '{where}.{name}'.", f"{where}.{name}", "unknown_parameter")
        name, description = tool.get("name"), tool.get("description") or ""
        parameters = tool.get("parameters")
        if not isinstance(name, str) or not isinstance(description, str):
            raise RealtimeError(f"Invalid value for '{where}': name and description are strings.", f"{where}.name")
        try:
            text = "" if parameters is None else json.dumps(parameters)
            checked = declarations.tool(name, description, text, where)
        except InvalidArgument as e:
            param = e.field.replace(".parameters_json", ".parameters")
            raise RealtimeError(f"Invalid value for '{param}': {e.message.split(': ', 1)[-1]}", param) from None
        declared.append(checked)
        out.append({"type": "function", "name": name, "description": description, "parameters": checked.parameters})
    try:
        declarations.declared(declared, declarations.ToolChoice(), "session")
    except InvalidArgument as e:
        raise RealtimeError(f"Invalid value for '{e.field}': {e.message.split(': ', 1)[-1]}", e.field) from None
    return out


def engine_tool_choice(choice):
    """A session's tool_choice ("auto", "none", "required" or {type: "function", name}) as the engines' ToolChoice."""
    from services.common.engines import TOOL_FUNCTION, ToolChoice

    return ToolChoice(TOOL_FUNCTION, choice["name"]) if isinstance(choice, dict) else ToolChoice(choice)


# The Conversation contract's field names for a choice -> the Realtime session's.
_CHOICE_PARAMS = {"session.tool_choice.function_name": "session.tool_choice.name", "session.tool_choice.mode": ""}


def _tool_choice(value, tools: list):
    """session.tool_choice: "auto", "none", "required", or {type: "function", name} of a declared tool, checked as
    the Conversation contract checks a choice against its tools (services/common/tools.py ``declared``)."""
    from services.common import tools as declarations
    from services.common.engines import Tool
    from services.common.errors import InvalidArgument

    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("name"), str):
        value = {"type": "function", "name": value["name"]}
    elif value not in ("auto", "none", "required"):
        raise RealtimeError(
            'Invalid value for \'session.tool_choice\': "auto", "none", "required" or {"type": "function", "name"}.',
            "session.tool_choice",
        )
    try:
        declarations.declared([Tool(t["name"]) for t in tools], engine_tool_choice(value), "session")
    except InvalidArgument as e:
        param = _CHOICE_PARAMS.get(e.field) or "session.tool_choice"
        raise RealtimeError(f"Invalid value for '{param}': {e.message.split(': ', 1)[-1]}", param) from None
    return value


def _refuse_set(obj: dict, where: str, name: str, why: str, allowed=(None,)) -> None:
    if name in obj and obj[name] not in allowed:
        raise RealtimeError(f"'{where}.{name}' is not served by this fleet: {why}.", f"{where}.{name}", "unsupported")


def _number(value, param: str, low: float, high: float, integer: bool = False):
    kinds = int if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    if ok and (value < low or value > high):
        ok = False
    if not ok:
        span = f"{'an integer' if integer else 'a number'} from {low:g} to {high:g}"
        raise RealtimeError(f"Invalid value for '{param}': expected {span}, got {_shown(value)}.", param)
    return value


def _setting(value, param: str, setting: Setting):
    """A turn_detection value that becomes an endpointing setting: within that setting's bounds (0 is not "the
    default" here)."""
    kinds = int if setting.kind == INT else (int, float)
    if not isinstance(value, kinds) or isinstance(value, bool) or not setting.in_bounds(value):
        what = "an integer" if setting.kind == INT else "a number"
        raise RealtimeError(
            f"Invalid value for '{param}': expected {what} {setting.bounds_text()}, got {_shown(value)}.", param
        )
    return value


SESSION_FIELDS = (
    "type",
    "model",
    "instructions",
    "output_modalities",
    "max_output_tokens",
    "audio",
    "tools",
    "tool_choice",
    "tracing",
    "truncation",
    "prompt",
    "include",
    "parallel_tool_calls",
    "reasoning",
)
SERVER_VAD_FIELDS = tuple(SERVER_VAD_DEFAULTS)
SEMANTIC_VAD_FIELDS = tuple(SEMANTIC_VAD_DEFAULTS)
TRANSCRIPTION_FIELDS = ("model", "language", "prompt", "delay", "keywords", "languages")


def output_modalities(value, param: str) -> list:
    if value not in (["audio"], ["text"]):
        raise RealtimeError(
            f"Invalid value for '{param}': ['audio'] or ['text'] (one of them, as the protocol says), got"
            f" {_shown(value)}.",
            param,
        )
    return list(value)


def _format(value, param: str) -> str:
    fmt = _object(value, param)
    _known(fmt, param, ("type", "rate"))
    kind = fmt.get("type", "audio/pcm")
    if kind not in FORMAT_RATES:
        raise RealtimeError(
            f"Invalid value for '{param}.type': one of audio/pcm, audio/pcmu, audio/pcma, got {_shown(kind)}.",
            f"{param}.type",
        )
    rate = fmt.get("rate")
    if rate is not None and rate != FORMAT_RATES[kind]:
        raise RealtimeError(
            f"Invalid value for '{param}.rate': {kind} is {FORMAT_RATES[kind]} Hz, got {_shown(rate)}.", f"{param}.rate"
        )
    return kind


def _turn_detection(value, current: dict | None, param: str, responds: bool = True) -> dict | None:
    if value is None:
        return None
    td = _object(value, param)
    kind = td.get("type")
    if kind not in ("server_vad", "semantic_vad"):
        raise RealtimeError(
            f"Invalid value for '{param}.type': server_vad or semantic_vad (or turn_detection null), got"
            f" {_shown(kind)}.",
            f"{param}.type",
        )
    if kind == "server_vad":
        _known(td, param, SERVER_VAD_FIELDS)
        base = dict(current) if current and current["type"] == kind else dict(SERVER_VAD_DEFAULTS)
    else:
        _known(td, param, SEMANTIC_VAD_FIELDS)
        base = dict(current) if current and current["type"] == kind else dict(SEMANTIC_VAD_DEFAULTS)
    merged = {**base, **{k: v for k, v in td.items()}}
    if kind == "server_vad":
        # The recognizer's own speech-probability bound and hangover, within those settings' bounds.
        merged["threshold"] = _setting(merged["threshold"], f"{param}.threshold", THRESHOLD)
        merged["silence_duration_ms"] = _setting(
            merged["silence_duration_ms"], f"{param}.silence_duration_ms", HANGOVER
        )
        # Accepted and shown; the recognizer keeps its own pre-roll before a speech start (docs/gateway.md).
        merged["prefix_padding_ms"] = _number(
            merged["prefix_padding_ms"], f"{param}.prefix_padding_ms", 0, 5000, integer=True
        )
        if merged["idle_timeout_ms"] is not None:  # the agent speaks after this much silence (realtime.py _keep)
            merged["idle_timeout_ms"] = _number(
                merged["idle_timeout_ms"],
                f"{param}.idle_timeout_ms",
                IDLE_TIMEOUT_MS[0],
                IDLE_TIMEOUT_MS[1],
                integer=True,
            )
    else:
        if merged["eagerness"] not in EAGERNESS_MAX_SILENCE_MS:
            raise RealtimeError(
                f"Invalid value for '{param}.eagerness': low, medium, high or auto, got {_shown(merged['eagerness'])}.",
                f"{param}.eagerness",
            )
    if responds and merged["create_response"] is not True:
        raise RealtimeError(
            f"'{param}.create_response' false is not served: the fleet answers each user turn; use turn_detection"
            " null to commit and ask for each response yourself.",
            f"{param}.create_response",
            "unsupported",
        )
    if not isinstance(merged["interrupt_response"], bool):
        raise RealtimeError(
            f"Invalid value for '{param}.interrupt_response': true or false.", f"{param}.interrupt_response"
        )
    return merged


def _transcription(value, param: str) -> dict | None:
    if value is None:
        return None
    t = _object(value, param)
    _known(t, param, TRANSCRIPTION_FIELDS)
    for name in ("delay", "keywords", "languages"):
        _refuse_set(t, param, name, "the fleet's recognizer takes a language only", allowed=(None, []))
    for name in ("model", "language", "prompt"):
        if t.get(name) is not None and not isinstance(t[name], str):
            raise RealtimeError(
                f"Invalid type for '{param}.{name}': expected a string.", f"{param}.{name}", "invalid_type"
            )
    _refuse_set(t, param, "prompt", "the fleet's recognizer takes no prompt", allowed=(None, ""))
    language = t.get("language") or None
    if language is not None and not (2 <= len(language) <= 12 and language.replace("-", "").isalnum()):
        raise RealtimeError(
            f"Invalid value for '{param}.language': an ISO-639-1 code such as 'en', got {_shown(language)}.",
            f"{param}.language",
        )
    # Any model name is taken (whisper-1, gpt-4o-transcribe, ...): the transcript is the fleet's recognizer's.
    return {"model": t.get("model") or "whisper-1", "language": language, "prompt": None}


def apply_update(
    current: RealtimeSession, update, locked: bool, voices: list[str] | None, max_text_chars: int
) -> RealtimeSession:
    """The settings after a session.update's ``session`` object; RealtimeError (nothing changed) naming the param.
    ``locked``: the Converse stream is open, so its config fields may not change. ``voices``: the fleet's voice ids
    (None: not checked)."""
    session = _object(update, "session")
    if "type" not in session:
        raise RealtimeError(
            "Missing required parameter: 'session.type' (realtime or transcription).",
            "session.type",
            "missing_required_parameter",
        )
    if session["type"] not in ("realtime", "transcription"):
        raise RealtimeError(
            f"Invalid value for 'session.type': realtime or transcription, got {_shown(session['type'])}.",
            "session.type",
        )
    if session["type"] != current.kind:
        if locked:
            raise RealtimeError(
                f"'session.type' cannot change once audio has started (this is a {current.kind} session).",
                "session.type",
                "session_locked",
            )
        current = dataclasses.replace(current, kind=session["type"])
    if current.kind == "transcription":
        return _transcription_update(current, session, locked)
    _known(session, "session", SESSION_FIELDS)
    new = dataclasses.replace(current)
    if "model" in session and session["model"] not in (None, current.model):
        raise RealtimeError(
            "'session.model' cannot change: the model in the URL picked the session's route.",
            "session.model",
            "unsupported",
        )
    if "instructions" in session:
        text = session["instructions"]
        if not isinstance(text, str) or len(text) > max_text_chars:
            raise RealtimeError(
                f"Invalid value for 'session.instructions': a string of up to {max_text_chars} characters.",
                "session.instructions",
            )
        new.instructions = text
    if "output_modalities" in session:
        new.output_modalities = output_modalities(session["output_modalities"], "session.output_modalities")
    if "max_output_tokens" in session:
        value = session["max_output_tokens"]
        new.max_output_tokens = (
            "inf" if value in ("inf", None) else _number(value, "session.max_output_tokens", 1, 4096, integer=True)
        )
    if "tools" in session:
        new.tools = _tools(session["tools"])
    if "tool_choice" in session:
        new.tool_choice = _tool_choice(session["tool_choice"], new.tools)
    for name, why in (
        ("prompt", "prompt templates are not served"),
        ("include", "logprobs are not served"),
        ("tracing", "traces are not kept"),
        ("reasoning", "the fleet's models do not reason"),
    ):
        _refuse_set(session, "session", name, why, allowed=(None, []))
    _refuse_set(session, "session", "parallel_tool_calls", "one call at a time is made", allowed=(None, False))
    _refuse_set(session, "session", "truncation", "the fleet drops the oldest turns itself", allowed=("auto",))
    if "audio" in session:
        audio = _object(session["audio"], "session.audio")
        _known(audio, "session.audio", ("input", "output"))
        if "input" in audio:
            a_in = _object(audio["input"], "session.audio.input")
            _known(a_in, "session.audio.input", ("format", "transcription", "noise_reduction", "turn_detection"))
            if "format" in a_in:
                new.input_format = _format(a_in["format"], "session.audio.input.format")
            if "transcription" in a_in:
                new.transcription = _transcription(a_in["transcription"], "session.audio.input.transcription")
            _refuse_set(
                a_in,
                "session.audio.input",
                "noise_reduction",
                "the fleet's echo canceller and VAD take the line as it is",
            )
            if "turn_detection" in a_in:
                new.turn_detection = _turn_detection(
                    a_in["turn_detection"], current.turn_detection, "session.audio.input.turn_detection"
                )
        if "output" in audio:
            a_out = _object(audio["output"], "session.audio.output")
            _known(a_out, "session.audio.output", ("format", "voice", "speed"))
            if "format" in a_out:
                new.output_format = _format(a_out["format"], "session.audio.output.format")
            if "speed" in a_out and a_out["speed"] not in (None, 1, 1.0):
                raise RealtimeError(
                    "'session.audio.output.speed' other than 1.0 is not served on this route.",
                    "session.audio.output.speed",
                    "unsupported",
                )
            if "voice" in a_out:
                new.voice = _voice(a_out["voice"], voices)
    if locked:
        before, after = _locked_values(current), _locked_values(new)
        for name, param in LOCKED.items():
            if before[name] != after[name]:
                raise RealtimeError(
                    f"'{param}' cannot change once audio has started: the fleet's conversation takes one config per"
                    " session. Send it in the first session.update, before any audio.",
                    param,
                    "session_locked",
                )
    return new


def _transcription_update(current: RealtimeSession, session: dict, locked: bool) -> RealtimeSession:
    """A transcription session's update: its input audio (format, transcription, turn detection) and nothing else."""
    _known(session, "session", ("type", "audio", "include"))
    _refuse_set(session, "session", "include", "logprobs are not served", allowed=(None, []))
    new = dataclasses.replace(current)
    if "audio" in session:
        audio = _object(session["audio"], "session.audio")
        _known(audio, "session.audio", ("input",))
        if "input" in audio:
            a_in = _object(audio["input"], "session.audio.input")
            _known(a_in, "session.audio.input", ("format", "transcription", "noise_reduction", "turn_detection"))
            if "format" in a_in:
                new.input_format = _format(a_in["format"], "session.audio.input.format")
            if "transcription" in a_in:
                new.transcription = _transcription(a_in["transcription"], "session.audio.input.transcription")
            _refuse_set(
                a_in, "session.audio.input", "noise_reduction", "the fleet's recognizer takes the line as it is"
            )
            if "turn_detection" in a_in:
                new.turn_detection = _turn_detection(
                    a_in["turn_detection"], current.turn_detection, "session.audio.input.turn_detection", False
                )
    if locked:
        for name in ("turn_detection", "transcription_language"):
            if _locked_values(current)[name] != _locked_values(new)[name]:
                param = LOCKED[name]
                raise RealtimeError(
                    f"'{param}' cannot change once audio has started: the recognizer stream takes one config.",
                    param,
                    "session_locked",
                )
    return new


def recognition_endpointing(s: RealtimeSession) -> dict:
    """A transcription session's turn detection as the conversation socket's endpointing fields (the same mapping)."""
    return s.converse_config(10**6)["endpointing"]


def _voice(value, voices: list[str] | None) -> str | None:
    param = "session.audio.output.voice"
    if isinstance(value, dict):
        _known(value, param, ("id",))
        value = value.get("id")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RealtimeError(f"Invalid type for '{param}': a voice id (a string).", param, "invalid_type")
    if voices is not None and value not in voices:
        few = ", ".join(voices[:8]) or "none"
        raise RealtimeError(
            f"Invalid value for '{param}': unknown voice {value!r}; the fleet's voices include {few}"
            " (GET /v1/audio/voices lists them all).",
            param,
        )
    return value
