"""Endpointing's one definition (services/common/endpointing.py) against the contract, and every place that takes an
endpointing setting against the definition: the config file, a request's checks (the Recognizer and Conversation
servicers), the conversation WebSocket's JSON and the Realtime route's turn_detection. No fleet: the end-to-end
refusals over gRPC are tests/asr/test_asr_turn.py's and tests/asr/test_asr_bad_input.py's."""

from __future__ import annotations

import math
import re
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor

from services.common.asr_servicer import endpointing_defaults, endpointing_from_config
from services.common.config import ConfigError, load_config
from services.common.convert.asr import endpointing_to_proto
from services.common.endpointing import (
    BY_NAME,
    CHOICE,
    FLOAT,
    INT,
    SETTINGS,
    SWITCH,
    WORDS,
    Endpointing,
    Setting,
)
from services.common.errors import InvalidArgument
from services.gateway import protocol
from services.gateway.realtime_config import (
    EAGERNESS_MAX_SILENCE_MS,
    MANUAL_HANGOVER_MS,
    RealtimeError,
    RealtimeSession,
    apply_update,
)
from voice.v1 import recognizer_pb2

pytestmark = pytest.mark.background
PROTO = Path(__file__).resolve().parents[2] / "protos" / "voice" / "v1" / "recognizer.proto"
MESSAGE = recognizer_pb2.EndpointingConfig.DESCRIPTOR
NUMBERS = [s for s in SETTINGS if s.kind in (INT, FLOAT)]
# The proto type each kind of setting is carried in.
PROTO_TYPES = {INT: FieldDescriptor.TYPE_UINT32, FLOAT: FieldDescriptor.TYPE_FLOAT, CHOICE: FieldDescriptor.TYPE_ENUM}
PROTO_TYPES |= {SWITCH: FieldDescriptor.TYPE_ENUM, WORDS: FieldDescriptor.TYPE_STRING}


# --- the definition is the contract's message ------------------------------------------------------------------------
def test_every_field_of_the_proto_message_is_a_setting_and_every_setting_a_field():
    in_proto = [f.name for f in MESSAGE.fields]
    defined = [s.name for s in SETTINGS]
    assert sorted(set(in_proto) - set(defined)) == [], "EndpointingConfig fields missing from SETTINGS"
    assert sorted(set(defined) - set(in_proto)) == [], "SETTINGS missing from EndpointingConfig"
    assert defined == in_proto, "SETTINGS in the message's field order (Endpointing's positional order)"


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_each_setting_has_the_proto_fields_type(setting: Setting):
    field = MESSAGE.fields_by_name[setting.name]
    assert field.type == PROTO_TYPES[setting.kind], setting.name
    repeated = field.is_repeated
    assert repeated == (setting.kind == WORDS), setting.name
    if setting.kind in (CHOICE, SWITCH):
        values = {v.number: v.name for v in field.enum_type.values}
        prefix = values[0].removesuffix("UNSPECIFIED")
        assert values[0].endswith("_UNSPECIFIED")
        assert sorted(values[n] for n in values if n) == sorted(prefix + c.upper() for c in setting.choices)


def _proto_comments() -> dict[str, str]:
    """EndpointingConfig's field name -> its comment in the .proto, lines joined."""
    body = PROTO.read_text().split("message EndpointingConfig {", 1)[1].split("\nmessage ", 1)[0]
    comments, block = {}, []
    for line in body.splitlines():
        text = line.strip()
        if text.startswith("//"):
            block.append(text.removeprefix("//").strip())
            continue
        field = re.match(r"(?:repeated\s+)?\w+\s+(\w+)\s*=\s*\d+;", text)
        if field:
            comments[field.group(1)] = " ".join(block)
        block = []
    return comments


def test_the_proto_says_the_definitions_defaults():
    comments = _proto_comments()
    assert set(comments) == {s.name for s in SETTINGS}
    said = {}
    for s in NUMBERS:
        found = re.search(r"0 means the default \(([\d.]+)\)", comments[s.name])
        assert found, f"recognizer.proto: {s.name} does not say its default"
        said[s.name] = float(found.group(1))
    assert said == {s.name: float(s.default) for s in NUMBERS}


# --- the shipped defaults --------------------------------------------------------------------------------------------
def test_the_shipped_defaults_did_not_move():
    # The values before the definition existed (engines.Endpointing, config sections, default_config.yaml).
    assert Endpointing() == Endpointing(
        threshold=0.5,
        min_speech_ms=250,
        hangover_ms=200,
        max_utterance_ms=30_000,
        mode="",
        turn_threshold=0.5,
        min_silence_ms=160,
        max_silence_ms=1500,
        text_check="",
        non_final_words=(),
        sentence_end_silence_ms=600,
        early_silence_ms=96,
        early_turn_threshold=0.85,
    )
    c = load_config(env={})
    asr, sts = endpointing_defaults(c.asr.endpointing), endpointing_defaults(c.moss_sts.endpointing)
    assert (asr.mode, asr.hangover_ms, asr.text_check) == ("silence", 200, "on")
    assert (sts.mode, sts.hangover_ms, sts.text_check) == ("semantic", 400, "on")
    for e in (asr, sts):
        assert (e.threshold, e.min_speech_ms, e.max_utterance_ms, e.turn_threshold) == (0.5, 250, 30_000, 0.5)
        assert (e.min_silence_ms, e.max_silence_ms, e.sentence_end_silence_ms) == (160, 1500, 600)
        assert (e.early_silence_ms, e.early_turn_threshold) == (96, 0.85)
        assert "the" in e.non_final_words and "table" not in e.non_final_words


# --- every consumer holds to the bounds ------------------------------------------------------------------------------
def _outside(s: Setting) -> list[float]:
    """Values just outside the setting's bounds that a request can carry (not 0: that is "the default")."""
    step = 1 if s.kind == INT else 0.01
    values = [s.high + step if s.le is not None else s.lt]
    if s.ge is not None and s.ge - step > 0:
        values.append(s.ge - step)
    if s.gt is not None and s.kind == FLOAT:
        values.append(s.gt - step)  # a negative probability (a float field carries it)
    return values


def _edges(s: Setting) -> list[float]:
    """In-bounds values at the edges (non-zero)."""
    step = 1 if s.kind == INT else 0.01
    low = s.ge if s.ge else s.low + step
    high = s.le if s.le is not None else s.lt - step
    return [low, high]


def _with_partners(s: Setting, value) -> dict:
    """``{s.name: value}`` and what a check across fields needs beside it (min_silence_ms <= max_silence_ms)."""
    fields = {s.name: value}
    if s.at_most:
        fields[s.at_most] = BY_NAME[s.at_most].high
    for other in SETTINGS:
        if other.at_most == s.name:
            fields[other.name] = other.low
    return fields


def _request(**fields) -> recognizer_pb2.EndpointingConfig:
    return recognizer_pb2.EndpointingConfig(**fields)


LIMITS = Endpointing(max_utterance_ms=120_000)  # a server whose limit is the definition's bound


@pytest.mark.parametrize("setting", NUMBERS, ids=lambda s: s.name)
def test_a_request_out_of_bounds_is_invalid_argument_naming_the_field(setting: Setting):
    for value in _outside(setting):
        with pytest.raises(InvalidArgument) as refused:
            endpointing_from_config(_request(**{setting.name: value}), LIMITS)
        assert refused.value.field == f"config.endpointing.{setting.name}", value
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    for value in _edges(setting):
        got = getattr(endpointing_from_config(_request(**_with_partners(setting, value)), LIMITS), setting.name)
        assert math.isclose(got, value, rel_tol=1e-6), (setting.name, value, got)
    # 0: this server's default
    assert getattr(endpointing_from_config(_request(), LIMITS), setting.name) == getattr(LIMITS, setting.name)


def test_a_request_past_this_servers_limit_is_refused():
    with pytest.raises(InvalidArgument, match="this server's limit") as refused:
        endpointing_from_config(_request(max_utterance_ms=30_001), Endpointing())
    assert refused.value.field == "config.endpointing.max_utterance_ms"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"min_silence_ms": 2000, "max_silence_ms": 1000}, "min_silence_ms"),
        ({"max_silence_ms": 100}, "min_silence_ms"),  # the default min_silence_ms (160) is over it
        ({"mode": 7}, "mode"),
        ({"text_check": 3}, "text_check"),
        ({"non_final_words": ["the", "of the"]}, "non_final_words"),
        ({"non_final_words": ["a"] * 501}, "non_final_words"),
    ],
)
def test_other_bad_requests_name_the_field(fields, named):
    with pytest.raises(InvalidArgument) as refused:
        endpointing_from_config(_request(**fields), Endpointing())
    assert refused.value.field == f"config.endpointing.{named}"


def test_a_request_sets_every_setting_and_leaves_the_rest_to_the_server():
    asked = Endpointing(
        threshold=0.25,
        min_speech_ms=100,
        hangover_ms=300,
        max_utterance_ms=20_000,
        mode="semantic",
        turn_threshold=0.75,
        min_silence_ms=200,
        max_silence_ms=2000,
        text_check="off",
        non_final_words=("to", "the"),
        sentence_end_silence_ms=700,
        early_silence_ms=64,
        early_turn_threshold=0.9,
    )
    assert {s.name for s in SETTINGS if getattr(asked, s.name) == getattr(LIMITS, s.name)} == set()
    got = endpointing_from_config(endpointing_to_proto(asked), LIMITS)
    for s in SETTINGS:
        if s.kind == FLOAT:
            assert math.isclose(getattr(got, s.name), getattr(asked, s.name), rel_tol=1e-6), s.name
        else:
            assert getattr(got, s.name) == getattr(asked, s.name), s.name
    server = Endpointing(mode="silence", text_check="on", non_final_words=("of",))
    assert endpointing_from_config(_request(), server) == server


def _config_file(tmp_path, section: str, fields: dict) -> Path:
    written = ", ".join(f"{name}: {value!r}" for name, value in fields.items())
    path = tmp_path / "c.yaml"
    path.write_text(f"{section}: {{endpointing: {{{written}}}}}\n")
    return path


@pytest.mark.parametrize("section", ["asr", "moss_sts"])
@pytest.mark.parametrize("setting", NUMBERS, ids=lambda s: s.name)
def test_the_config_file_holds_to_the_same_bounds(tmp_path, section, setting: Setting):
    for value in _outside(setting):
        with pytest.raises(ConfigError, match=rf"{section}\.endpointing\.{setting.name}: must be"):
            load_config(_config_file(tmp_path, section, {setting.name: value}), env={})
    for value in _edges(setting):
        path = _config_file(tmp_path, section, _with_partners(setting, value))
        loaded = getattr(load_config(path, env={}), section)
        assert getattr(loaded.endpointing, setting.name) == value


def test_the_config_file_takes_0_where_it_means_none_and_checks_across_fields(tmp_path):
    zeroed = [s for s in SETTINGS if s.zero]
    assert zeroed, "early_silence_ms: 0 = none in the config file"
    for s in zeroed:
        assert getattr(load_config(_config_file(tmp_path, "asr", {s.name: 0}), env={}).asr.endpointing, s.name) == 0
    path = tmp_path / "c.yaml"
    path.write_text("asr: {endpointing: {min_silence_ms: 2000, max_silence_ms: 1000}}\n")
    with pytest.raises(ConfigError, match=r"asr\.endpointing\.min_silence_ms: must be <= max_silence_ms"):
        load_config(path, env={})


def _socket(endpointing: dict):
    return protocol.conversation_config({"type": "config", "sample_rate": 16000, "endpointing": endpointing})[1]


@pytest.mark.parametrize("setting", NUMBERS, ids=lambda s: s.name)
def test_the_websockets_json_holds_to_the_same_bounds(setting: Setting):
    for value in _outside(setting):
        with pytest.raises(protocol.ProtocolError) as refused:
            _socket({setting.name: value})
        assert refused.value.code == protocol.BAD_FIELD
        assert refused.value.reason.startswith(f"config.endpointing.{setting.name}:"), refused.value.reason
    for value in [0, *_edges(setting)]:
        got = getattr(_socket({setting.name: value}).endpointing, setting.name)
        assert math.isclose(got, value, rel_tol=1e-6), (setting.name, value, got)


def test_the_websockets_json_carries_every_setting_by_the_config_files_names():
    sent = {
        "threshold": 0.25,
        "min_speech_ms": 100,
        "hangover_ms": 300,
        "max_utterance_ms": 20_000,
        "mode": "semantic",
        "turn_threshold": 0.75,
        "min_silence_ms": 200,
        "max_silence_ms": 2000,
        "text_check": False,
        "non_final_words": ["To", "the"],
        "sentence_end_silence_ms": 700,
        "early_silence_ms": 64,
        "early_turn_threshold": 0.9,
    }
    assert set(sent) == {s.name for s in SETTINGS}
    got = endpointing_from_config(_socket(sent).endpointing, LIMITS)
    assert (got.mode, got.text_check, got.non_final_words) == ("semantic", "off", ("to", "the"))
    for name, value in sent.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            assert math.isclose(getattr(got, name), value, rel_tol=1e-6), name
    for bad, named in [
        ({"mode": "eager"}, "mode"),
        ({"text_check": "off"}, "text_check"),
        ({"non_final_words": ["of the"]}, "non_final_words"),
        ({"hangover": 300}, "hangover"),
    ]:
        with pytest.raises(protocol.ProtocolError) as refused:
            _socket(bad)
        assert refused.value.reason.startswith(f"config.endpointing.{named}:"), refused.value.reason


# --- the Realtime route's turn_detection -----------------------------------------------------------------------------
def _turn_detection(td: dict) -> RealtimeSession:
    update = {"type": "realtime", "audio": {"input": {"turn_detection": td}}}
    return apply_update(RealtimeSession(model="gpt-realtime", session_id="s"), update, False, None, 5000)


@pytest.mark.parametrize(("param", "name"), [("threshold", "threshold"), ("silence_duration_ms", "hangover_ms")])
def test_server_vad_holds_to_the_bounds_of_the_setting_it_becomes(param, name):
    setting = BY_NAME[name]
    for value in [*_outside(setting), 0]:
        with pytest.raises(RealtimeError) as refused:
            _turn_detection({"type": "server_vad", param: value})
        assert refused.value.param == f"session.audio.input.turn_detection.{param}"
    for value in _edges(setting):
        config = _turn_detection({"type": "server_vad", param: value}).converse_config(5000)
        assert config["endpointing"][name] == value
        assert math.isclose(getattr(_socket(config["endpointing"]).endpointing, name), value, rel_tol=1e-6)


def test_semantic_vad_and_manual_turns_map_within_the_bounds():
    for eagerness, max_silence in EAGERNESS_MAX_SILENCE_MS.items():
        config = _turn_detection({"type": "semantic_vad", "eagerness": eagerness}).converse_config(5000)
        assert _socket(config["endpointing"]).endpointing.max_silence_ms == max_silence  # 0: the service's
    config = apply_update(
        RealtimeSession(model="gpt-realtime", session_id="s"),
        {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
        False,
        None,
        5000,
    ).converse_config(5000)
    assert _socket(config["endpointing"]).endpointing.hangover_ms == MANUAL_HANGOVER_MS
    with pytest.raises(InvalidArgument):  # the manual hangover is the setting's top: one more is refused
        endpointing_from_config(_request(hangover_ms=MANUAL_HANGOVER_MS + 1), Endpointing())
