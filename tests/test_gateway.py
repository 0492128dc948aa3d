"""The gateway on a real CPU fleet (asr + brain + moss_sts + router + gateway on loopback): the official ``openai``
client speaks and transcribes through it (audio checked by the strict listener), the conversation WebSocket answers
spoken audio, and bad input closes a socket with a code and a reason naming the field while other sessions go on.
The browser test is tests/test_gateway_browser.py (same fleet)."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import aiohttp
import openai
import pytest

from services.common import audio
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
    (['{"type": "config", "sample_rate": 16000}', b"\x00\x00\x00"], 4003, "16-bit"),
    (['{"type": "config", "sample_rate": 16000}', b"\x00\x00" * 32000], 4003, "max_frame_ms"),
    (['{"type": "config", "sample_rate": 16000}', '{"type": "louder"}'], 4004, "type"),
    (['{"type": "config", "sample_rate": 16000}', '{"type": "config", "sample_rate": 16000}'], 4004, "config"),
    (['{"type": "config", "sample_rate": 16000}', '{"type": "mute", "now": true}'], 4001, "mute.now"),
]


async def test_bad_input_closes_with_a_reason_while_another_session_goes_on(gateway_fleet, question_pcm):
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url(gateway_fleet, "/v1/conversation")) as good:
            await good.send_json({"type": "config", "sample_rate": 16000, "system_prompt": SYSTEM})
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
