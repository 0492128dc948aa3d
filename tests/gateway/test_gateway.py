"""The gateway on a real CPU fleet (asr + brain + moss_sts + router + gateway on loopback): the official ``openai``
client speaks and transcribes through it (audio checked by the strict listener), the conversation WebSocket answers
spoken audio, and bad input closes a socket with a code and a reason naming the field while other sessions go on.
The browser test is tests/gateway/test_gateway_browser.py (same fleet)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import aiohttp
import openai
import pytest
import yaml

from services.cli.fleet import free_port
from services.common import audio
from tests.conftest import wait_until
from tests.speech import INTELLIGIBLE, intelligible, wer

pytestmark = pytest.mark.timeout(300)
FOX = "the quick brown fox jumps over the lazy dog"
QUESTION = "Please tell me a short story about a friendly dog."
SYSTEM = "You are a friendly voice assistant. Answer in English, in one or two short sentences."


def url(fleet, path: str = "", scheme: str = "http") -> str:
    return f"{scheme}://{fleet.address('gateway')}{path}"


@pytest.fixture(scope="module")
def client(gateway_fleet):
    return openai.OpenAI(base_url=url(gateway_fleet, "/v1"), api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def question_pcm(client) -> bytes:
    """The user's question at 16 kHz, said by the fleet's own piper voice through the gateway."""
    reply = client.audio.speech.create(
        model="tts-1", voice="joe", input=QUESTION, response_format="pcm", extra_body={"sample_rate": 16000}
    )
    return reply.content


# --- OpenAI-compatible endpoints --------------------------------------------------------------------------------
def test_openai_client_speech_wav_is_intelligible(client):
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="joe", input=FOX, response_format="wav"
    ) as response:
        assert response.headers["content-type"] == "audio/wav"
        data = b"".join(response.iter_bytes())
    pcm, rate = audio.read_wav(data)
    assert rate == 24_000  # OpenAI's rate for pcm and wav
    error, heard = intelligible(FOX, pcm, rate)
    assert error <= INTELLIGIBLE, heard


def test_openai_client_speech_pcm_and_speed(client):
    normal = client.audio.speech.create(model="tts-1", voice="joe", input=FOX, response_format="pcm").content
    fast = client.audio.speech.create(model="tts-1", voice="joe", input=FOX, response_format="pcm", speed=1.5).content
    for pcm in (normal, fast):
        error, heard = intelligible(FOX, pcm, 24_000)
        assert error <= INTELLIGIBLE, heard
    assert len(fast) < 0.85 * len(normal)  # speed reached the engine: the same words in less audio


def test_openai_client_transcribes_through_the_gateway(client, tmp_path):
    pcm = client.audio.speech.create(model="tts-1", voice="joe", input=FOX, response_format="pcm").content
    path = tmp_path / "fox.wav"
    audio.write_wav(path, pcm, 24_000)
    with path.open("rb") as f:
        result = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert wer(FOX, result.text) <= INTELLIGIBLE, result.text


def test_voices_list_the_fleet_voices(gateway_fleet):
    body = json.loads(urllib.request.urlopen(url(gateway_fleet, "/v1/audio/voices"), timeout=10).read())
    assert "joe" in body["voices"]
    joe = next(v for v in body["data"] if v["id"] == "joe")
    assert joe["service"] == "moss_sts" and "en-US" in joe["languages"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"response_format": "mp3"}, "response_format"),
        ({"speed": 3.0}, "speed"),
        ({"input": ""}, "input"),
        ({"extra_body": {"volume": 2}}, "volume"),
    ],
)
def test_speech_bad_input_is_a_400_naming_the_field(client, kwargs, field):
    args = {"model": "tts-1", "voice": "joe", "input": FOX, **kwargs}
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(**args)
    assert caught.value.status_code == 400
    assert field in caught.value.message


def test_speech_router_error_keeps_its_grpc_code(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.audio.speech.create(model="tts-1", voice="no-such-voice", input=FOX)
    assert "NOT_FOUND" in caught.value.message and "no-such-voice" in caught.value.message


def test_transcription_of_a_file_that_is_not_wav_names_file(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.transcriptions.create(model="whisper-1", file=("notes.txt", b"hello, not audio", "text/plain"))
    assert "file" in caught.value.message and "WAV" in caught.value.message


# --- the conversation WebSocket ---------------------------------------------------------------------------------
async def converse_one_turn(ws, pcm: bytes) -> dict:
    """Send a user turn like a microphone (40 ms frames, then silence) until the turn is complete; its events."""
    frame = 16_000 * 40 // 1000 * 2
    events, reply = [], bytearray()

    async def speak():
        for start in range(0, len(pcm), frame):
            await ws.send_bytes(pcm[start : start + frame])
            await asyncio.sleep(0.01)
        while True:  # silence, like a live microphone, until the caller stops listening
            await ws.send_bytes(bytes(frame))
            await asyncio.sleep(0.04)

    sender = asyncio.create_task(speak())
    try:
        async for message in ws:
            if message.type == aiohttp.WSMsgType.BINARY:
                reply += message.data
                continue
            event = json.loads(message.data)
            events.append(event)
            if event["type"] in ("turn_complete", "turn_error", "error"):
                break
    finally:
        sender.cancel()
    return {"events": events, "reply": bytes(reply)}


async def test_conversation_turn_over_the_websocket(gateway_fleet, question_pcm):
    async with aiohttp.ClientSession() as session, session.ws_connect(url(gateway_fleet, "/v1/conversation")) as ws:
        await ws.send_json(
            {
                "type": "config",
                "sample_rate": 16000,
                "output_sample_rate": 16000,
                "language": "en-US",
                "system_prompt": SYSTEM,
            }
        )
        ready = await ws.receive_json(timeout=10)
        assert ready["type"] == "ready" and ready["output_sample_rate"] == 16000
        turn = await converse_one_turn(ws, question_pcm)
    kinds = [e["type"] for e in turn["events"]]
    finals = [e["text"] for e in turn["events"] if e["type"] == "transcript" and e["final"]]
    complete = turn["events"][-1]
    assert complete["type"] == "turn_complete", kinds
    assert wer(QUESTION, finals[0]) <= 0.2, finals
    assert {"state", "reply_text"} <= set(kinds)
    assert complete["reply_text"].strip() and complete["served_by"]
    assert set(complete["timings"]) >= {"speech_end_to_first_audio_ms", "speech_end_to_commit_ms", "preemptive"}
    error, heard = intelligible(complete["reply_text"], turn["reply"], 16_000)
    assert error <= INTELLIGIBLE, (complete["reply_text"], heard)


async def test_router_error_is_an_error_event_with_the_grpc_code(gateway_fleet, question_pcm):
    async with aiohttp.ClientSession() as session, session.ws_connect(url(gateway_fleet, "/v1/conversation")) as ws:
        await ws.send_json({"type": "config", "sample_rate": 16000, "voice": "no-such-voice"})
        for start in range(0, 16000, 1280):  # audio until the router answers
            await ws.send_bytes(question_pcm[start : start + 1280])
        events = []
        while (message := await ws.receive(timeout=30)).type == aiohttp.WSMsgType.TEXT:
            events.append(json.loads(message.data))
    error = events[-1]
    assert "ready" not in [e["type"] for e in events]  # refused at its config: never ready
    assert error["type"] == "error" and error["code"] == "NOT_FOUND" and "no-such-voice" in error["message"], events
    assert message.type == aiohttp.WSMsgType.CLOSE and message.data == 4404, (message.type, message.data)


async def test_upload_over_max_upload_bytes_is_413(gateway_fleet):
    limit = gateway_fleet.config.gateway.max_upload_bytes
    form = aiohttp.FormData()
    form.add_field("model", "whisper-1")
    form.add_field("file", bytes(limit + 1024), filename="big.wav", content_type="audio/wav")
    async with (
        aiohttp.ClientSession() as session,
        session.post(url(gateway_fleet, "/v1/audio/transcriptions"), data=form) as reply,
    ):
        body = await reply.json()
    assert reply.status == 413 and "max_upload_bytes" in body["error"]["message"], body


async def close_of(ws) -> tuple[int, str]:
    """(close code, reason) of a socket the server closes; events before it (ready) are skipped."""
    while True:
        message = await ws.receive(timeout=30)
        if message.type == aiohttp.WSMsgType.CLOSE:
            return message.data, message.extra or ""
        if message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            return ws.close_code, ""


BAD_SESSIONS = [
    # (what the client sends first, close code, words the reason must hold)
    ([b"\x00\x00" * 320], 4002, "config"),
    (["not json"], 4000, "JSON"),
    (['{"type": "config", "sample_rate": 16000, "volume": 3}'], 4001, "config.volume"),
    (['{"type": "config"}'], 4001, "config.sample_rate"),
    (['{"type": "config", "sample_rate": 1000}'], 4001, "config.sample_rate"),
    (['{"type": "config", "sample_rate": 16000, "barge_in": {"min_words": "two"}}'], 4001, "barge_in.min_words"),
    (['{"type": "config", "sample_rate": 16000, "client_cancels_echo": "yes"}'], 4001, "config.client_cancels_echo"),
    # endpointing: the definition's bounds (services/common/endpointing.py), refused by the gateway before the router
    (['{"type": "config", "sample_rate": 16000, "endpointing": {"hangover_ms": 10}}'], 4001, "endpointing.hangover_ms"),
    (['{"type": "config", "sample_rate": 16000}', b"\x00\x00\x00"], 4003, "16-bit"),
    (['{"type": "config", "sample_rate": 16000}', b"\x00\x00" * 32000], 4003, "max_frame_ms"),
    (['{"type": "config", "sample_rate": 16000}', b"\x00\x00" * 160_000], 1009, ""),  # over max_message_bytes
    (['{"type": "config", "sample_rate": 16000}', '{"type": "louder"}'], 4004, "type"),
    (['{"type": "config", "sample_rate": 16000}', '{"type": "config", "sample_rate": 16000}'], 4004, "config"),
    (['{"type": "config", "sample_rate": 16000}', '{"type": "mute", "now": true}'], 4001, "mute.now"),
    (
        ['{"type": "config", "sample_rate": 16000}', '{"type": "interrupt", "played_ms": -5}'],
        4001,
        "interrupt.played_ms",
    ),
    (['{"type": "config", "sample_rate": 16000}', '{"type": "interrupt", "at": 1}'], 4001, "interrupt.at"),
]


async def test_bad_input_closes_with_a_reason_while_another_session_goes_on(gateway_fleet, question_pcm):
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url(gateway_fleet, "/v1/conversation")) as good:
            # A short reply (12 tokens): this session's turn only has to complete; its reply is paced to playback.
            await good.send_json({"type": "config", "sample_rate": 16000, "system_prompt": SYSTEM, "max_tokens": 12})
            assert (await good.receive_json(timeout=10))["type"] == "ready"
            for messages, code, words in BAD_SESSIONS:
                async with session.ws_connect(url(gateway_fleet, "/v1/conversation")) as bad:
                    for m in messages:
                        await (bad.send_bytes(m) if isinstance(m, bytes) else bad.send_str(m))
                    closed_with, reason = await close_of(bad)
                    assert closed_with == code, (messages[-1][:60], closed_with, reason)
                    assert words in reason, reason
            turn = await converse_one_turn(good, question_pcm)
        assert turn["events"][-1]["type"] == "turn_complete", turn["events"][-3:]
        async with session.get(url(gateway_fleet, "/healthz")) as health:
            assert health.status == 200


# --- limits and access ------------------------------------------------------------------------------------------
async def test_idle_socket_is_closed_naming_the_timeout(gateway_fleet):
    async with aiohttp.ClientSession() as session, session.ws_connect(url(gateway_fleet, "/v1/conversation")) as ws:
        await ws.send_json({"type": "config", "sample_rate": 16000})
        code, reason = await close_of(ws)  # the fleet's gateway.idle_timeout_seconds is 3
    assert code == 4008 and "idle" in reason, (code, reason)


async def test_sessions_over_max_sessions_are_refused_and_counted(gateway_fleet):
    before = gateway_fleet.metric("gateway", "voicefleet_gateway_refusals_total", reason="max_sessions")
    async with aiohttp.ClientSession() as session:
        open_sockets = []
        try:
            for _ in range(gateway_fleet.config.gateway.max_sessions):
                ws = await session.ws_connect(url(gateway_fleet, "/v1/conversation"))
                await ws.send_json({"type": "config", "sample_rate": 16000})
                assert (await ws.receive_json(timeout=10))["type"] == "ready"
                open_sockets.append(ws)
            sessions = gateway_fleet.metric("gateway", "voicefleet_gateway_sessions")
            async with session.ws_connect(url(gateway_fleet, "/v1/conversation")) as extra:
                code, reason = await close_of(extra)
        finally:
            for ws in open_sockets:
                await ws.close()
    assert code == 4029 and "max_sessions" in reason, (code, reason)
    assert sessions == gateway_fleet.config.gateway.max_sessions
    assert gateway_fleet.metric("gateway", "voicefleet_gateway_refusals_total", reason="max_sessions") == before + 1


async def test_foreign_origin_is_refused(gateway_fleet):
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await session.ws_connect(url(gateway_fleet, "/v1/conversation"), origin="https://evil.example")
        assert caught.value.status == 403
        own = f"http://{gateway_fleet.address('gateway')}"  # the page's own origin is always allowed
        async with session.ws_connect(url(gateway_fleet, "/v1/conversation"), origin=own) as ws:
            await ws.send_json({"type": "config", "sample_rate": 16000})
            assert (await ws.receive_json(timeout=10))["type"] == "ready"


def another_gateway(gateway_fleet, directory: Path, router: str, **sections):
    """One more gateway process from the fleet's config (its own port, ``router``, ``sections`` merged in): yields
    (address, log path) once it answers /healthz, stops it after."""
    raw = yaml.safe_load(Path(gateway_fleet.config_path).read_text())
    raw["gateway"] = {**raw["gateway"], "port": free_port(), "metrics_port": 0, "router": router}
    raw.update(sections)
    path = directory / "voicefleet.yaml"
    path.write_text(yaml.safe_dump(raw))
    log = directory / "gateway.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.gateway", "--config", str(path)], stdout=out, stderr=subprocess.STDOUT
        )
    address = f"127.0.0.1:{raw['gateway']['port']}"

    def up():
        try:
            return urllib.request.urlopen(f"http://{address}/healthz", timeout=1).status == 200
        except OSError:
            return False

    try:
        assert wait_until(up, timeout=60), log.read_text()
        yield address, log
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def gateway_with_token(gateway_fleet, tmp_path_factory):
    """A second gateway in front of the same router, with security.bearer_tokens set; its log is kept."""
    directory = tmp_path_factory.mktemp("gateway-token")
    security = {"bearer_tokens": ["s3cret-token-for-test"]}
    yield from another_gateway(gateway_fleet, directory, gateway_fleet.address("router"), security=security)


@pytest.fixture
def gateway_without_router(gateway_fleet, tmp_path):
    yield from another_gateway(gateway_fleet, tmp_path, f"127.0.0.1:{free_port()}")  # no router listens there


async def test_router_down_is_503_and_an_unavailable_error_event(gateway_without_router):
    address, _ = gateway_without_router
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://{address}/v1/audio/speech", json={"input": FOX}) as reply:
            body = await reply.json()
        assert reply.status == 503 and "UNAVAILABLE" in body["error"]["message"], body
        async with session.ws_connect(f"http://{address}/v1/conversation") as ws:
            await ws.send_json({"type": "config", "sample_rate": 16000})
            error = await ws.receive_json(timeout=30)
            code, reason = await close_of(ws)
    assert error["type"] == "error" and error["code"] == "UNAVAILABLE", error
    assert code == 4503 and "UNAVAILABLE" in reason, (code, reason)


def test_bearer_token_is_required_and_never_logged(gateway_with_token):
    address, log = gateway_with_token
    token = "s3cret-token-for-test"
    without = openai.OpenAI(base_url=f"http://{address}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        without.audio.speech.create(model="tts-1", voice="joe", input=FOX)
    assert "bearer token" in caught.value.message
    client = openai.OpenAI(base_url=f"http://{address}/v1", api_key=token, max_retries=0)
    pcm = client.audio.speech.create(model="tts-1", voice="joe", input=FOX, response_format="pcm").content
    error, heard = intelligible(FOX, pcm, 24_000)
    assert error <= INTELLIGIBLE, heard

    async def browser_style():  # a browser cannot set headers on a WebSocket: the token rides in the query
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(f"http://{address}/v1/conversation")
            async with session.ws_connect(f"http://{address}/v1/conversation?access_token={token}") as ws:
                await ws.send_json({"type": "config", "sample_rate": 16000})
                return refused.value.status, (await ws.receive_json(timeout=10))["type"]

    assert asyncio.run(browser_style()) == (401, "ready")
    logged = log.read_text()
    assert "/v1/conversation" in logged and token not in logged


async def test_gateway_metrics_count_sessions_messages_and_refusals(gateway_fleet, question_pcm):
    def metric(name, **labels):
        return gateway_fleet.metric("gateway", name, **labels)

    names = {
        "speech_ok": ("voicefleet_gateway_requests_total", {"endpoint": "speech", "outcome": "200"}),
        "speech_added": ("voicefleet_gateway_added_seconds_count", {"endpoint": "speech"}),
        "audio_in": ("voicefleet_gateway_messages_total", {"direction": "in", "kind": "audio"}),
        "bytes_in": ("voicefleet_gateway_bytes_total", {"direction": "in", "endpoint": "conversation"}),
        "bad_input": ("voicefleet_gateway_refusals_total", {"reason": "bad_input"}),
        "closed_4003": ("voicefleet_gateway_requests_total", {"endpoint": "conversation", "outcome": "4003"}),
    }
    before = {key: metric(name, **labels) for key, (name, labels) in names.items()}
    async with aiohttp.ClientSession() as session:
        body = {"input": FOX, "voice": "joe", "response_format": "pcm"}
        async with session.post(url(gateway_fleet, "/v1/audio/speech"), json=body) as reply:
            assert reply.status == 200 and len(await reply.read()) > 0
        async with session.ws_connect(url(gateway_fleet, "/v1/conversation")) as ws:
            await ws.send_json({"type": "config", "sample_rate": 16000})
            await ws.send_bytes(question_pcm[:6400])
            await ws.send_bytes(b"\x00")
            code, _ = await close_of(ws)
    assert code == 4003
    after = {key: metric(name, **labels) for key, (name, labels) in names.items()}
    assert after["speech_ok"] == before["speech_ok"] + 1
    assert after["speech_added"] == before["speech_added"] + 1
    assert after["audio_in"] == before["audio_in"] + 1
    assert after["bytes_in"] == before["bytes_in"] + 6400
    assert after["bad_input"] == before["bad_input"] + 1
    assert after["closed_4003"] == before["closed_4003"] + 1
