"""The conversation WebSocket's protocol: JSON messages <-> voice.v1.Conversation messages (docs/gateway.md#protocol).

Client -> gateway: one JSON ``config`` first, then binary frames of s16le mono PCM at ``sample_rate`` and JSON
controls (``interrupt``, ``end_of_turn``, ``mute``, ``unmute``). Gateway -> client: binary frames of reply audio
(s16le mono at the ``output_sample_rate`` the ``ready`` event names) and JSON events, one per ConverseResponse.

Bad input raises ``ProtocolError`` with a WebSocket close code (4000-4999) and a reason naming what to fix.
"""

from __future__ import annotations

import json

import grpc

from services.common import audio
from services.common.convert.asr import endpointing_proto
from services.common.endpointing import CHOICE, FLOAT, INT, SWITCH, WORDS
from services.common.endpointing import NAMES as ENDPOINTING_NAMES
from services.common.endpointing import SETTINGS as ENDPOINTING_SETTINGS
from services.common.turn_text import bad_word
from voice.v1 import audio_pb2, conversation_pb2, recognizer_pb2, routing_pb2

# Application close codes (RFC 6455 leaves 4000-4999 to applications).
BAD_JSON = 4000  # a text message that is not a JSON object
BAD_FIELD = 4001  # an unknown field, a missing one, or a bad value: the reason names it
NOT_CONFIGURED = 4002  # audio or a control before the config
BAD_FRAME = 4003  # an audio frame of the wrong size
BAD_CONTROL = 4004  # an unknown message type, or a second config
IDLE = 4008  # nothing received for gateway.idle_timeout_seconds
SLOW_CLIENT = 4010  # the client did not read fast enough (its send queue filled)
UNAUTHENTICATED = 4401
FORBIDDEN = 4403
AT_CAPACITY = 4029  # gateway.max_sessions reached
# A router status the client can act on closes with its own code; others with 1011 (internal error).
ROUTER_CLOSE_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT: 4400,
    grpc.StatusCode.NOT_FOUND: 4404,
    grpc.StatusCode.OUT_OF_RANGE: 4400,
    grpc.StatusCode.FAILED_PRECONDITION: 4400,
    grpc.StatusCode.UNAUTHENTICATED: 4401,
    grpc.StatusCode.PERMISSION_DENIED: 4403,
    grpc.StatusCode.DEADLINE_EXCEEDED: 4408,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 4429,
    grpc.StatusCode.UNAVAILABLE: 4503,
}
MAX_REASON_BYTES = 123  # RFC 6455: a close frame's reason fits in 123 bytes


class ProtocolError(Exception):
    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame can carry (whole UTF-8 characters)."""
    data = text.encode()
    if len(data) <= MAX_REASON_BYTES:
        return text
    return data[: MAX_REASON_BYTES - 3].decode(errors="ignore") + "..."


def parse_json(text: str) -> dict:
    try:
        message = json.loads(text)
    except ValueError as e:
        raise ProtocolError(BAD_JSON, f"not JSON: {e}") from None
    if not isinstance(message, dict):
        raise ProtocolError(BAD_JSON, "each text message must be a JSON object with a 'type'")
    kind = message.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(BAD_FIELD, "type: required, a string (config, interrupt, end_of_turn, mute, unmute)")
    return message


# --- config ---------------------------------------------------------------------------------------------------------
def _take(obj: dict, where: str, name: str, kind, default, check=None, hint: str = ""):
    if name not in obj:
        return default
    value = obj[name]
    ok = isinstance(value, kind) and not (kind in (int, float, (int, float)) and isinstance(value, bool))
    if ok and kind is list:
        ok = all(isinstance(v, str) for v in value)
    if not ok or (check is not None and not check(value)):
        raise ProtocolError(BAD_FIELD, f"{where}{name}: {hint or 'bad value'}, got {json.dumps(value)[:40]}")
    return value


def _no_unknown(obj: dict, where: str, known: tuple[str, ...]) -> None:
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise ProtocolError(BAD_FIELD, f"{where}{unknown[0]}: unknown field; known: {', '.join(known)}")


CONFIG_FIELDS = (
    "type",
    "request_id",
    "sample_rate",
    "output_sample_rate",
    "voice",
    "language",
    "system_prompt",
    "engine",
    "temperature",
    "max_tokens",
    "endpointing",
    "barge_in",
    "client_cancels_echo",
)
# The endpointing object: every setting of services/common/endpointing.py, by the config file's names and values
# (mode "silence"/"semantic", text_check true/false, non_final_words a list), 0 or absent = the service's default.
ENDPOINTING_FIELDS = ENDPOINTING_NAMES
BARGE_IN_FIELDS = ("disabled", "min_speech_ms", "stop_words", "min_words", "backchannels")
DEFAULT_OUTPUT_RATE = 16_000


def _rate_ok(rate: int) -> bool:
    return audio.MIN_RATE_HZ <= rate <= audio.MAX_RATE_HZ


def conversation_config(message: dict, max_text_chars: int = 5000) -> tuple[str, conversation_pb2.ConversationConfig]:
    """(request_id, ConversationConfig) from the first JSON message; ProtocolError naming the bad field."""
    _no_unknown(message, "config.", CONFIG_FIELDS)
    rates = f"a whole number of Hz, {audio.MIN_RATE_HZ}..{audio.MAX_RATE_HZ}"
    if "sample_rate" not in message:
        raise ProtocolError(BAD_FIELD, f"config.sample_rate: required ({rates}), the rate of your audio frames")
    rate = _take(message, "config.", "sample_rate", int, 0, _rate_ok, rates)
    out_rate = _take(message, "config.", "output_sample_rate", int, 0, lambda r: r == 0 or _rate_ok(r), rates)
    text = (str, "", None, "a string")
    request_id = _take(message, "config.", "request_id", str, "", lambda s: len(s) <= 128, "a string up to 128 chars")
    voice = _take(message, "config.", "voice", *text)
    language = _take(message, "config.", "language", *text)
    system_prompt = _take(
        message, "config.", "system_prompt", str, "", lambda s: len(s) <= max_text_chars, f"up to {max_text_chars}"
    )
    engine = _take(message, "config.", "engine", *text)
    temperature = _take(message, "config.", "temperature", (int, float), 0, lambda t: 0 <= t <= 2, "a number 0..2")
    max_tokens = _take(message, "config.", "max_tokens", int, 0, lambda n: 0 <= n <= 4096, "a whole number 0..4096")
    endpointing = _endpointing(_take(message, "config.", "endpointing", dict, {}, None, "an object"))
    ms = (int, 0, lambda n: 0 <= n <= 60_000, "a whole number of ms, 0..60000")
    barge_in = _take(message, "config.", "barge_in", dict, {}, None, "an object")
    _no_unknown(barge_in, "config.barge_in.", BARGE_IN_FIELDS)
    words = (list, [], None, "a list of strings")
    config = conversation_pb2.ConversationConfig(
        input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1),
        output_format=audio_pb2.AudioFormat(
            encoding=audio.S16LE, sample_rate_hz=out_rate or DEFAULT_OUTPUT_RATE, channels=1
        ),
        voice=voice,
        system_prompt=system_prompt,
        language=language,
        sampling=conversation_pb2.SamplingConfig(temperature=float(temperature), max_tokens=max_tokens),
        endpointing=endpointing,
        barge_in=conversation_pb2.BargeInConfig(
            disabled=_take(barge_in, "config.barge_in.", "disabled", bool, False, None, "true or false"),
            min_speech_ms=_take(barge_in, "config.barge_in.", "min_speech_ms", *ms),
            stop_words=_take(barge_in, "config.barge_in.", "stop_words", *words),
            min_words=_take(barge_in, "config.barge_in.", "min_words", int, 0, lambda n: 0 <= n <= 100, "0..100"),
            backchannels=_take(barge_in, "config.barge_in.", "backchannels", *words),
        ),
        routing=routing_pb2.Routing(engine=engine),
        client_cancels_echo=_take(message, "config.", "client_cancels_echo", bool, False, None, "true or false"),
    )
    return request_id, config


def _endpointing(obj: dict) -> recognizer_pb2.EndpointingConfig:
    """The config's endpointing object checked against the settings' bounds (services/common/endpointing.py)."""
    where = "config.endpointing."
    _no_unknown(obj, where, ENDPOINTING_FIELDS)
    values = {}
    for s in ENDPOINTING_SETTINGS:
        if s.name not in obj:
            continue
        if s.kind == WORDS:
            words = _take(obj, where, s.name, list, [], None, "a list of words")
            problem = bad_word([w.strip().lower() for w in words])
            if problem:
                raise ProtocolError(BAD_FIELD, f"{where}{s.name}: {problem}")
            values[s.name] = s.engine_value(words)
        elif s.kind == SWITCH:
            values[s.name] = s.engine_value(_take(obj, where, s.name, bool, False, None, "true or false"))
        elif s.kind == CHOICE:
            choices = " or ".join(s.choices)
            values[s.name] = _take(obj, where, s.name, str, "", lambda c, s=s: c in ("", *s.choices), choices)
        else:
            kind, what = (int, f"a whole number of {s.unit}") if s.kind == INT else ((int, float), "a number")
            zero = (
                f" {s.bounds_text()} (0: the default)" if s.in_bounds(0) else f": 0 (the default) or {s.bounds_text()}"
            )
            hint = what + zero
            value = _take(obj, where, s.name, kind, 0, lambda v, s=s: v == 0 or s.in_bounds(v), hint)
            values[s.name] = float(value) if s.kind == FLOAT else value
    return endpointing_proto(values)


CONTROLS = {
    "interrupt": conversation_pb2.ConversationControl.ACTION_INTERRUPT,
    "end_of_turn": conversation_pb2.ConversationControl.ACTION_END_OF_TURN,
    "mute": conversation_pb2.ConversationControl.ACTION_MUTE,
    "unmute": conversation_pb2.ConversationControl.ACTION_UNMUTE,
    "respond": conversation_pb2.ConversationControl.ACTION_RESPOND,
}


def control(message: dict) -> conversation_pb2.ConverseRequest:
    kind = message["type"]
    if kind == "config":
        raise ProtocolError(BAD_CONTROL, "type: config was already sent; a session has one config")
    if kind not in CONTROLS:
        raise ProtocolError(BAD_CONTROL, f"type: unknown {kind[:30]!r}; one of config, {', '.join(CONTROLS)}")
    if kind != "interrupt":
        _no_unknown(message, f"{kind}.", ("type",))
        return conversation_pb2.ConverseRequest(control=conversation_pb2.ConversationControl(action=CONTROLS[kind]))
    # The page (or any client that buffers) says how much of the reply it played: the context keeps that much.
    _no_unknown(message, "interrupt.", ("type", "played_ms"))
    played_ms = message.get("played_ms")
    if played_ms is not None and (not isinstance(played_ms, int) or isinstance(played_ms, bool) or played_ms < 0):
        raise ProtocolError(BAD_FIELD, "interrupt.played_ms: a whole number of ms, 0 or more, when given")
    control = conversation_pb2.ConversationControl(action=CONTROLS[kind], played_ms=played_ms)
    return conversation_pb2.ConverseRequest(control=control)


def check_frame(frame: bytes, rate: int, max_frame_ms: int) -> None:
    if not frame or len(frame) % audio.BYTES_PER_SAMPLE:
        raise ProtocolError(
            BAD_FRAME, f"audio frame: {len(frame)} bytes is not a whole number of 16-bit samples (s16le mono)"
        )
    ms = len(frame) / audio.BYTES_PER_SAMPLE * 1000 / rate
    if ms > max_frame_ms:
        raise ProtocolError(BAD_FRAME, f"audio frame: {ms:.0f} ms at {rate} Hz is over max_frame_ms={max_frame_ms}")


# --- events ---------------------------------------------------------------------------------------------------------
STATES = {
    conversation_pb2.CONVERSATION_STATE_LISTENING: "listening",
    conversation_pb2.CONVERSATION_STATE_THINKING: "thinking",
    conversation_pb2.CONVERSATION_STATE_SPEAKING: "speaking",
}


def code_name(number: int) -> str:
    return next((c.name for c in grpc.StatusCode if c.value[0] == number), "UNKNOWN")


def event(response: conversation_pb2.ConverseResponse) -> dict | bytes | None:
    """One ConverseResponse as the client sees it: reply audio as bytes, everything else as a JSON-ready dict."""
    kind = response.WhichOneof("event")
    turn = response.turn_index
    if kind == "reply_audio":
        return response.reply_audio.data
    if kind == "state":
        return {"type": "state", "turn": turn, "state": STATES.get(response.state.state, "unspecified")}
    if kind == "user_transcript":
        r = response.user_transcript
        return {"type": "transcript", "turn": turn, "final": r.is_final, "text": r.transcript, "stability": r.stability}
    if kind == "reply_text":
        return {"type": "reply_text", "turn": turn, "delta": response.reply_text.delta}
    if kind == "end_of_turn":
        e = response.end_of_turn
        return {
            "type": "end_of_turn",
            "turn": turn,
            "probability": round(e.probability, 4),
            "complete": e.complete,
            "silence_ms": e.silence_ms,
            "vetoed_by_word": e.vetoed_by_word,
            "sentence_end": e.sentence_end,
        }
    if kind == "interrupted":
        i = response.interrupted
        return {
            "type": "interrupted",
            "turn": turn,
            "reason": i.reason,
            "audio_sent_ms": i.audio_sent_ms,
            "heard_text": i.heard_text,
        }
    if kind == "turn_complete":
        c = response.turn_complete
        t = c.timings
        return {
            "type": "turn_complete",
            "turn": turn,
            "user_text": c.user_text,
            "reply_text": c.reply_text,
            "interrupted": c.interrupted,
            "served_by": c.served_by,
            "timings": {
                "speech_end_to_first_audio_ms": t.speech_end_to_first_audio_ms,
                "speech_end_to_transcript_ms": t.speech_end_to_transcript_ms,
                "transcript_to_first_text_ms": t.transcript_to_first_text_ms,
                "reply_audio_ms": t.reply_audio_ms,
                "speech_end_to_commit_ms": t.speech_end_to_commit_ms,
                "discarded_replies": t.discarded_replies,
                "preemptive": t.preemptive,
            },
        }
    if kind == "turn_error":
        e = response.turn_error
        return {"type": "turn_error", "turn": turn, "code": code_name(e.code), "message": e.message}
    return None  # an event this gateway does not know yet (a newer router): nothing to forward
