from __future__ import annotations

import json
import logging
from pathlib import Path

import jsonschema
import pytest
import yaml

from services.common.config import DEFAULT_CONFIG_PATH, ConfigError, config_schema, load_config


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_are_the_local_cpu_fleet():
    c = load_config(env={})
    assert c.router.address == "127.0.0.1:50051"
    assert c.cosyvoice_tts.engine == "cpu"
    assert c.router.backends["cosyvoice_tts"] == "127.0.0.1:50052"
    assert c.router.backends["qwen_tts"] == "127.0.0.1:50053"
    assert c.qwen_tts.engine == "cpu" and c.fleet.services[-2:] == ["router", "gateway"]
    assert c.gateway.address == "127.0.0.1:8080" and c.gateway.router == ""  # "" = this config's router


def test_a_config_file_that_sets_nothing_gives_the_shipped_defaults(tmp_path):
    # A deployment's own config file replaces default_config.yaml: whatever it leaves out must take the values the
    # shipped file has, or a fleet from `make run` and one from a config file behave differently (moss_sts's
    # first-segment rule did: 3 words in the shipped file, 5 in the model, so every LocalFleet spoke later).
    shipped = load_config(env={}).model_dump()
    empty = load_config(write(tmp_path, "{}"), env={}).model_dump()
    differ = sorted(
        f"{section}.{key}: file {shipped[section][key]!r}, model {empty[section][key]!r}"
        for section in shipped
        for key in shipped[section]
        if shipped[section][key] != empty[section][key]
    )
    assert not differ, differ


def test_the_text_check_is_on_by_default_and_its_words_can_be_replaced(tmp_path):
    from services.common.turn_text import NON_FINAL_WORDS

    c = load_config(env={})
    assert c.asr.endpointing.text_check and c.moss_sts.endpointing.text_check
    assert c.asr.endpointing.non_final_words == list(NON_FINAL_WORDS) == c.moss_sts.endpointing.non_final_words
    c = load_config(
        write(tmp_path, "moss_sts: {endpointing: {text_check: false}}"),
        env={"VOICEFLEET_ASR__ENDPOINTING__NON_FINAL_WORDS": "The, to"},
    )
    assert c.asr.endpointing.non_final_words == ["the", "to"] and not c.moss_sts.endpointing.text_check


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"VOICEFLEET_GATEWAY__MAX_SESSIONS": "0"}, "gateway.max_sessions"),
        ({"VOICEFLEET_GATEWAY__ROUTER": "router-without-port"}, "gateway.router"),
        ({"VOICEFLEET_GATEWAY__ALLOWED_ORIGINS": "example.com"}, "gateway.allowed_origins"),
        ({"VOICEFLEET_GATEWAY__MAX_FRAME_MS": "9000"}, "gateway.max_frame_ms"),
    ],
)
def test_bad_gateway_settings_fail_naming_the_field(override, field):
    with pytest.raises(ConfigError, match=field):
        load_config(env=override)


def test_env_overrides_file(tmp_path):
    p = write(tmp_path, "router: {port: 6000}\n")
    c = load_config(
        p, env={"VOICEFLEET_ROUTER__PORT": "6001", "VOICEFLEET_COSYVOICE_TTS__CHUNKING__MAX_CHUNK_MS": "100"}
    )
    assert c.router.port == 6001
    assert c.cosyvoice_tts.chunking.max_chunk_ms == 100


def test_backend_replicas_on_several_nodes_load_as_one_grpc_target_each(tmp_path):
    # The config keeps each backend's replicas as one gRPC target string, as written (that the router balances over
    # them is tests/fleet/test_scale_two_nodes.py's business); the malformed ones are in test_bad_values_name_the_field.
    text = "router: {backends: {asr: 'dns:///asr-headless:50054', qwen_tts: 'ipv4:10.0.0.1:50053,10.0.0.2:50053'}}"
    c = load_config(write(tmp_path, text))
    assert c.router.backends["asr"] == "dns:///asr-headless:50054"
    assert c.router.backends["qwen_tts"] == "ipv4:10.0.0.1:50053,10.0.0.2:50053"


def test_explicit_backends_via_env(tmp_path):
    c = load_config(write(tmp_path, "{}"), env={"VOICEFLEET_ROUTER__BACKENDS__COSYVOICE_TTS": "10.1.2.3:7000"})
    assert c.router.backends == {"cosyvoice_tts": "10.1.2.3:7000"}


@pytest.mark.parametrize(
    "text,env,message",
    [
        ("router: {port: 0}", {}, "router.port: must be 1..65535, got 0"),
        ("router: {prot: 1}", {}, "router.prot: unknown field"),
        ("nonsense: {}", {}, "nonsense: unknown field"),
        ("router: {port: fast}", {}, "router.port: must be a number"),
        ("router: {port: 1.5}", {}, "router.port: must be a whole number"),
        ("cosyvoice_tts: {chunking: {max_chunk_ms: 5}}", {}, "cosyvoice_tts.chunking.max_chunk_ms: must be 10..2000"),
        ("brain: {prompt_cache_mb: -1}", {}, "brain.prompt_cache_mb: must be 0 (off) or 1..65536 MiB, got -1"),
        (
            "moss_sts: {chunking: {first_segment_words: -1}}",
            {},
            "moss_sts.chunking.first_segment_words: must be 0 (clause marks only) or 1..50",
        ),
        (
            "{}",
            {"VOICEFLEET_COSYVOICE_TTS__CHUNKING__FIRST_SEGMENT_CJK_CHARS": "0"},
            "cosyvoice_tts.chunking.first_segment_cjk_chars: must be 1..200",
        ),
        ("router: {backends: {cosyvoice_tts: nowhere}}", {}, "router.backends.cosyvoice_tts: must be host:port"),
        ("router: {backends: {asr: 'dns:///asr-headless'}}", {}, "router.backends.asr: must be host:port, dns:///"),
        ("router: {backends: {asr: 'ipv4:10.0.0.1:5,10.0.0.2'}}", {}, "router.backends.asr: must be host:port"),
        ("router: {leases: {authorities: [lease-authority]}}", {}, "router.leases.authorities: must be host:port"),
        ("residency: {lease_authority: here}", {}, "residency.lease_authority: must be host:port"),
        ("fleet: {services: [router, tortoise]}", {}, "fleet.services: unknown service 'tortoise'"),
        ("{}", {"VOICEFLEET_ROUTER__GRACE_SECONDS": "-1"}, "router.grace_seconds: must be >= 0"),
        ("router: [1, 2]", {}, "router: must be a mapping"),
        (
            "router: {leases: {ttl_seconds: 3, renew_deadline_seconds: 3}}",
            {},
            "router.leases.renew_deadline_seconds: must be > 0 and < ttl_seconds",
        ),
        ("router: {port: 1", {}, "is not valid YAML"),
        (
            "asr: {endpointing: {non_final_words: [to, of the]}}",
            {},
            "asr.endpointing.non_final_words: 'of the' is not one word",
        ),
        (
            "moss_sts: {endpointing: {non_final_words: []}}",
            {},
            "moss_sts.endpointing.non_final_words: must list at least one word",
        ),
        ("asr: {endpointing: {text_check: maybe}}", {}, "asr.endpointing.text_check:"),
    ],
)
def test_bad_values_name_the_field(tmp_path, text, env, message):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text), env=env)
    assert message in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", env={})


# --- the published JSON Schema (docs/config.schema.json; docs/configuration.md#editor-support) --------------------
ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "config.schema.json"


def test_the_published_schema_is_what_the_config_models_generate():
    assert json.loads(SCHEMA.read_text()) == config_schema(), "stale: run `make config-schema` and commit it"


@pytest.mark.parametrize("path", [DEFAULT_CONFIG_PATH, ROOT / "deploy" / "voicefleet.yaml"])
def test_the_schema_accepts_the_shipped_config_files(path):
    jsonschema.validate(yaml.safe_load(path.read_text()), json.loads(SCHEMA.read_text()))


@pytest.mark.parametrize(
    "text",
    ["router: {prot: 1}", "router: {port: 70000}", "asr: {engine: tpu}", "router: {routes: {realtime: [asr]}}"],
)
def test_the_schema_flags_what_the_loader_refuses(tmp_path, text):
    # What an editor underlines is what the services would refuse at start.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(text), json.loads(SCHEMA.read_text()))
    with pytest.raises(ConfigError):
        load_config(write(tmp_path, text), env={})


MOSS_AND_ASR_ON_A_CARD = "moss_sts: {engine: gpu, asr: remote}\nasr: {engine: gpu}\n"


def test_moss_listening_through_an_asr_that_cannot_fit_beside_it_is_refused_naming_the_setting(tmp_path):
    # 21 + 2 GiB of leases on a card granting 16: asr could never load while MOSS holds the card.
    small_card = MOSS_AND_ASR_ON_A_CARD + "router: {leases: {capacity_gb: 16}}\n"
    with pytest.raises(
        ConfigError, match=r"moss_sts\.asr: 'remote' needs .*\(23 GiB.* grants 15 GiB.*moss_sts\.asr: local"
    ):
        load_config(write(tmp_path, small_card), env={})
    # Where both fit (a 48 GB card), or moss_sts listens with its own engines, the same fleet loads.
    assert load_config(write(tmp_path, MOSS_AND_ASR_ON_A_CARD + "router: {leases: {capacity_gb: 48}}\n"), env={})
    local = small_card.replace("asr: remote", "asr: local")
    assert load_config(write(tmp_path, local), env={}).moss_sts.asr == "local"


# --- gateway.webrtc_ice_servers: STUN URLs and TURN servers with their credential -------------------------------
TURN = "{urls: 'turn:turn.example.org:3478', username: voicefleet, credential: hush-3f9a}"


def test_ice_servers_take_url_strings_and_turn_servers_with_credentials(tmp_path):
    text = f"gateway: {{webrtc_ice_servers: ['stun:stun.example.org:3478', {TURN}]}}"
    stun, turn = load_config(write(tmp_path, text), env={}).gateway.webrtc_ice_servers
    assert stun.urls == ["stun:stun.example.org:3478"] and not stun.turn and stun.username == ""
    assert turn.urls == ["turn:turn.example.org:3478"] and turn.turn and turn.username == "voicefleet"
    assert turn.credential.get_secret_value() == "hush-3f9a"
    # The environment's form (YAML in one variable), and the client list with several URLs per server.
    env = {
        "VOICEFLEET_GATEWAY__WEBRTC_CLIENT_ICE_SERVERS": "[{urls: ['turn:203.0.113.7:3478', "
        "'turn:203.0.113.7:3478?transport=tcp', 'turns:relay.example.org'], username: u, credential: p}, stun:s:19302]"
    }
    servers = load_config(env=env).gateway.webrtc_client_ice_servers
    assert [s.urls for s in servers] == [
        ["turn:203.0.113.7:3478", "turn:203.0.113.7:3478?transport=tcp", "turns:relay.example.org"],
        ["stun:s:19302"],
    ]
    assert servers[0].for_client() == {"urls": servers[0].urls, "username": "u", "credential": "p"}
    assert servers[1].for_client() == {"urls": ["stun:s:19302"]}
    # "a,b" (what the field took before it took objects) is still two URLs.
    env = {"VOICEFLEET_GATEWAY__WEBRTC_CLIENT_ICE_SERVERS": "stun:a:3478,stun:b:3478"}
    assert [s.urls for s in load_config(env=env).gateway.webrtc_client_ice_servers] == [
        ["stun:a:3478"],
        ["stun:b:3478"],
    ]


@pytest.mark.parametrize(
    ("servers", "says"),
    [
        ("['turn:turn.example.org:3478']", "webrtc_ice_servers[0].username: required for turn: and turns: URLs"),
        ("[{urls: 'turns:t.example.org', username: u}]", "webrtc_ice_servers[0].credential: required for turn:"),
        ("[{urls: 'turn:t:3478', credential: hush-3f9a}]", "webrtc_ice_servers[0].username: required for turn:"),
        ("[{urls: 'turn:t:3478', username: u, credential: [hush-3f9a]}]", "[0].credential: must be a string"),
        ("[{username: u, credential: hush-3f9a}]", "webrtc_ice_servers[0].urls: required"),
        ("[{urls: 'turn:t:3478', username: u, credential: hush-3f9a, password: x}]", "[0].password: unknown field"),
        ("['http://stun.example.org']", "[0].urls: each must be stun:host[:port], turn:host"),
        ("['stuns:stun.example.org']", "[0].urls: each must be"),  # aiortc never uses stuns:
        ("['turn:t:3478?transport=tls']", "[0].urls: each must be"),  # aiortc drops it in silence
        ("['stun:stun.example.org:70000']", "[0].urls: port must be 1..65535"),
        ("['stun:s:3478?transport=udp']", "[0].urls: a stun: URL has no transport"),
        ("['turns:t:5349?transport=udp']", "[0].urls: turns: is TLS over TCP"),
        ("['stun:a:3478', 'stun:b:3478']", "webrtc_ice_servers: at most one STUN URL (aiortc uses only the first)"),
        (f"[{TURN}, {TURN}]", "webrtc_ice_servers: at most one TURN URL"),
    ],
)
def test_bad_ice_servers_fail_naming_the_field_and_never_the_credential(tmp_path, servers, says):
    with pytest.raises(ConfigError) as refused:
        load_config(write(tmp_path, f"gateway: {{webrtc_ice_servers: {servers}}}"), env={})
    assert str(refused.value).startswith("gateway.webrtc_ice_servers") and says in str(refused.value)
    assert "hush-3f9a" not in str(refused.value)


def test_the_turn_credential_is_shown_nowhere(tmp_path, caplog):
    config = load_config(
        write(tmp_path, f"gateway: {{webrtc_ice_servers: [{TURN}], webrtc_client_ice_servers: [{TURN}]}}"), env={}
    )
    shown = [repr(config), str(config), repr(config.gateway), config.model_dump_json(), str(config.model_dump())]
    shown.append(json.dumps(config.gateway.model_dump(mode="json")))
    for text in shown:
        assert "hush-3f9a" not in text and "**********" in text
    logging.getLogger("voicefleet.test").warning("config: %s / %r", config.gateway, config.gateway.webrtc_ice_servers)
    assert "hush-3f9a" not in caplog.text and "**********" in caplog.text


def test_the_schema_takes_both_forms_of_ice_server():
    schema = json.loads(SCHEMA.read_text())
    good = {
        "gateway": {"webrtc_ice_servers": ["stun:s:3478", {"urls": "turn:t:3478", "username": "u", "credential": "p"}]}
    }
    jsonschema.validate(good, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"gateway": {"webrtc_ice_servers": [{"urls": "turn:t", "password": "p"}]}}, schema)
