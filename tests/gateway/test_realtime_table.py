"""The OpenAI Realtime route without a fleet: its compatibility table in docs/gateway.md against the code's lists and
the installed SDK's event unions (so neither can drift), the session config's errors naming the param, and G.711
against CPython's own codec. The route on a real fleet: tests/gateway/test_realtime.py."""

from __future__ import annotations

import re
import typing
import warnings
from pathlib import Path

import numpy as np
import pytest

from services.common import audio
from services.gateway import realtime, realtime_config
from services.gateway.realtime_config import (
    CLIENT_EVENTS,
    NOT_SENT,
    REFUSED,
    SERVER_EVENTS,
    RealtimeError,
    RealtimeSession,
    apply_update,
)

pytestmark = pytest.mark.background
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "gateway.md"


def doc_table(heading: str) -> dict[str, str]:
    """``{event type: status}`` from the markdown table under ``heading`` in docs/gateway.md."""
    text = DOC.read_text()
    start = text.index(heading)
    rows = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        m = re.match(r"\|\s*`([a-z_.]+)`\s*\|\s*([a-z ]+?)\s*\|", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def sdk_types(union) -> set[str]:
    """The ``type`` literals of an SDK event union (openai.types.realtime)."""
    members = typing.get_args(typing.get_args(union)[0]) if typing.get_origin(union) is typing.Annotated else ()
    names = set()
    for member in members:
        names |= set(typing.get_args(member.model_fields["type"].annotation))
    return names


def test_the_docs_table_is_the_codes_table():
    client = doc_table("### Client events")
    server = doc_table("### Server events")
    assert client == {k: v[0] for k, v in CLIENT_EVENTS.items()}
    assert server == {k: v[0] for k, v in SERVER_EVENTS.items()}


def test_the_table_covers_every_event_of_the_installed_sdk():
    from openai.types.realtime import RealtimeClientEvent, RealtimeServerEvent

    client, server = sdk_types(RealtimeClientEvent), sdk_types(RealtimeServerEvent)
    assert len(client) >= 11 and len(server) >= 40, (client, server)  # the unions were read, not skipped
    assert client == set(CLIENT_EVENTS), client ^ set(CLIENT_EVENTS)
    assert server == set(SERVER_EVENTS), server ^ set(SERVER_EVENTS)


def test_handlers_are_the_table_and_emitted_events_are_the_sent_ones():
    handled = {k for k, (status, _) in CLIENT_EVENTS.items() if status != REFUSED}
    assert set(realtime.RealtimeConnection.HANDLERS) == handled
    source = Path(realtime.__file__).read_text()
    prefixes = "session|input_audio_buffer|output_audio_buffer|conversation|response"
    named = set(re.findall(rf'"((?:{prefixes})\.[a-z_.]+|error)"', source))
    emitted = named & set(SERVER_EVENTS)
    sent = {k for k, (status, _) in SERVER_EVENTS.items() if status != NOT_SENT}
    assert emitted == sent, emitted ^ sent


def session() -> RealtimeSession:
    return RealtimeSession(model="gpt-realtime", session_id="sess_test")


@pytest.mark.parametrize(
    ("update", "param", "code"),
    [
        ({"type": "realtime", "volume": 3}, "session.volume", "unknown_parameter"),
        ({"instructions": "hi"}, "session.type", "missing_required_parameter"),
        ({"type": "translation"}, "session.type", "invalid_value"),
        ({"type": "transcription", "instructions": "hi"}, "session.instructions", "unknown_parameter"),
        ({"type": "realtime", "audio": {"output": {"voice": "alloy"}}}, "session.audio.output.voice", "invalid_value"),
        (
            {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            "session.audio.input.format.rate",
            "invalid_value",
        ),
        (
            {
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 9}}},
            },
            "session.audio.input.turn_detection.silence_duration_ms",
            "invalid_value",
        ),
        (
            {
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 100}}},
            },
            "session.audio.input.turn_detection.idle_timeout_ms",
            "invalid_value",
        ),
        (
            {
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": "soon"}}},
            },
            "session.audio.input.turn_detection.idle_timeout_ms",
            "invalid_value",
        ),
        (
            {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "max"}}}},
            "session.audio.input.turn_detection.eagerness",
            "invalid_value",
        ),
        (
            {
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": False}}},
            },
            "session.audio.input.turn_detection.create_response",
            "unsupported",
        ),
        ({"type": "realtime", "tools": [{"type": "mcp", "server_label": "x"}]}, "session.tools[0].type", "unsupported"),
        (
            {"type": "realtime", "tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]},
            "session.tools[0].parameters",
            "invalid_value",
        ),
        (
            {
                "type": "realtime",
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "function", "name": "g"},
            },
            "session.tool_choice.name",
            "invalid_value",
        ),
        ({"type": "realtime", "tool_choice": "required"}, "session.tool_choice", "invalid_value"),
        ({"type": "realtime", "tool_choice": "sometimes"}, "session.tool_choice", "invalid_value"),
        ({"type": "realtime", "output_modalities": ["text", "audio"]}, "session.output_modalities", "invalid_value"),
        ({"type": "realtime", "audio": {"output": {"speed": 1.4}}}, "session.audio.output.speed", "unsupported"),
    ],
)
def test_a_bad_session_update_names_the_param_and_changes_nothing(update, param, code):
    before = session()
    with pytest.raises(RealtimeError) as caught:
        apply_update(before, update, locked=False, voices=["joe", "en-US"], max_text_chars=5000)
    assert (caught.value.param, caught.value.code) == (param, code), caught.value.message
    assert param.split(".")[-1] in caught.value.message
    assert before == session()  # all or nothing
    if param.endswith("voice"):
        assert "joe" in caught.value.message  # the error lists the fleet's voices


def test_the_session_maps_onto_the_conversation_config():
    s = session()
    s = apply_update(
        s,
        {
            "type": "realtime",
            "instructions": "Be brief.",
            "max_output_tokens": 40,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcmu"},
                    "transcription": {"model": "whisper-1", "language": "en"},
                    "turn_detection": {"type": "semantic_vad", "eagerness": "low", "interrupt_response": False},
                },
                "output": {"voice": "joe", "format": {"type": "audio/pcma"}},
            },
        },
        locked=False,
        voices=["joe"],
        max_text_chars=5000,
    )
    config = s.converse_config(5000)
    assert config["system_prompt"] == "Be brief." and config["max_tokens"] == 40 and config["voice"] == "joe"
    assert config["language"] == "en" and config["sample_rate"] == 16_000 and config["output_sample_rate"] == 24_000
    assert config["endpointing"] == {"mode": "semantic", "max_silence_ms": 8000}
    assert config["barge_in"] == {"disabled": True}
    shown = s.as_event()
    assert shown["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert shown["audio"]["input"]["turn_detection"]["eagerness"] == "low"
    vad = apply_update(
        s, {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}, False, None, 5000
    )
    assert vad.converse_config(5000)["endpointing"] == {"mode": "silence", "hangover_ms": 500, "threshold": 0.5}
    manual = apply_update(s, {"type": "realtime", "audio": {"input": {"turn_detection": None}}}, False, None, 5000)
    assert manual.converse_config(5000)["endpointing"]["hangover_ms"] == realtime_config.MANUAL_HANGOVER_MS
    assert not manual.vad


def test_what_the_open_conversation_fixed_cannot_change_but_formats_can():
    s = session()
    with pytest.raises(RealtimeError) as caught:
        apply_update(s, {"type": "realtime", "instructions": "new"}, locked=True, voices=None, max_text_chars=5000)
    assert caught.value.param == "session.instructions" and caught.value.code == "session_locked"
    same = apply_update(s, {"type": "realtime", "instructions": ""}, locked=True, voices=None, max_text_chars=5000)
    assert same == s  # resending the same value is fine
    fmt = {"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcmu"}}}}
    assert apply_update(s, fmt, locked=True, voices=None, max_text_chars=5000).output_format == "audio/pcmu"


def test_g711_matches_cpythons_codec_on_every_sample():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")  # CPython's C codec, in the standard library up to 3.12
    every = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16).tobytes()
    codes = bytes(range(256))
    assert audio.ulaw_encode(every) == audioop.lin2ulaw(every, 2)
    assert audio.alaw_encode(every) == audioop.lin2alaw(every, 2)
    assert audio.ulaw_decode(codes) == audioop.ulaw2lin(codes, 2)
    assert audio.alaw_decode(codes) == audioop.alaw2lin(codes, 2)


def test_g711_round_trip_keeps_a_tone():
    t = np.arange(8000) / 8000
    tone = audio.to_int16(0.5 * np.sin(2 * np.pi * 440 * t)).tobytes()
    for encode, decode in ((audio.ulaw_encode, audio.ulaw_decode), (audio.alaw_encode, audio.alaw_decode)):
        coded = encode(tone)
        assert len(coded) == 8000  # one byte a sample
        back = np.frombuffer(decode(coded), dtype=np.int16).astype(float)
        x = np.frombuffer(tone, dtype=np.int16).astype(float)
        snr = 10 * np.log10(np.sum(x**2) / np.sum((x - back) ** 2))
        assert snr > 30, snr  # G.711 gives about 38 dB on a loud tone
