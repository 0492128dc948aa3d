"""``POST /v1/realtime/calls`` without a fleet: the gateway in this process (its router address answers nothing), an
aiortc peer as the caller. A bad offer is a 400 naming the field, a missing or wrong token a 401 when tokens are
configured, and a good offer gets a 201 answer whose call opens ``oai-events``, sends session.created with the
multipart form's session, then the router's error, and ends with its peer connection closed and counted.
The whole flow with a browser and a fleet: tests/gateway/test_realtime_webrtc.py."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web
from aiortc import AudioStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from services.cli.fleet import free_port
from services.common import security
from services.common.config import Config
from services.common.config.security import SecurityConfig
from services.common.metrics import GATEWAY_REQUESTS
from services.gateway.app import Gateway

pytestmark = pytest.mark.timeout(60)
TOKEN = "s3cret-calls-token"


@pytest.fixture
async def gateway():
    """(base URL, the Gateway) with no router behind it."""
    config = Config()
    config.gateway.router = f"127.0.0.1:{free_port()}"
    gw = Gateway(config)
    runner = web.AppRunner(gw.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}", gw
    await runner.cleanup()


@pytest.fixture
def tokens():
    before = security.settings()
    security.configure(SecurityConfig(bearer_tokens=[TOKEN]))
    yield TOKEN
    security.configure(before)


async def offer(audio: bool = True, events: bool = True) -> tuple[RTCPeerConnection, str]:
    """A caller's peer connection and its offer (OpenAI's flow: a microphone track, the oai-events channel). The
    microphone is aiortc's silence track."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    if audio:
        pc.addTrack(AudioStreamTrack())
    channel = pc.createDataChannel("oai-events") if events else None
    pc.channel = channel
    await pc.setLocalDescription(await pc.createOffer())
    return pc, pc.localDescription.sdp


async def post_sdp(base: str, sdp: str, headers: dict | None = None) -> tuple[int, dict | str, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{base}/v1/realtime/calls", data=sdp, headers={"Content-Type": "application/sdp", **(headers or {})}
        ) as reply:
            body = await reply.text()
            if reply.content_type == "application/json":
                body = json.loads(body)
            return reply.status, body, dict(reply.headers)


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("empty", "required"),
        ("not sdp", "must start with 'v=0'"),
        ("no audio", "no audio section"),
        ("no data channel", "no data channel section"),
        ("no ice", "no ICE credentials"),
    ],
)
async def test_a_bad_offer_is_a_400_naming_sdp(gateway, case, says):
    base, gw = gateway
    pc, sdp = await offer(audio=case != "no audio", events=case != "no data channel")
    await pc.close()
    if case == "empty":
        sdp = ""
    elif case == "not sdp":
        sdp = "hello, I would like to talk"
    elif case == "no ice":
        sdp = "\r\n".join(line for line in sdp.split("\r\n") if not line.startswith("a=ice-"))
    status, body, _ = await post_sdp(base, sdp)
    assert status == 400, body
    assert body["error"]["param"] == "sdp" and says in body["error"]["message"], body
    assert not gw.calls


async def test_other_content_types_and_a_bad_session_are_refused_by_name(gateway):
    base, gw = gateway
    pc, sdp = await offer()
    await pc.close()
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/v1/realtime/calls", json={"sdp": sdp}) as reply:
            wrong_type = (reply.status, (await reply.json())["error"]["param"])
        form = aiohttp.FormData()
        form.add_field("sdp", sdp)
        form.add_field("session", json.dumps({"type": "realtime", "volume": 11}))
        async with session.post(f"{base}/v1/realtime/calls", data=form) as reply:
            bad_session = (reply.status, (await reply.json())["error"]["param"])
    assert wrong_type == (415, "Content-Type")
    assert bad_session == (400, "session.volume")
    assert not gw.calls


async def test_a_missing_or_wrong_token_is_refused_when_tokens_are_configured(gateway, tokens):
    base, gw = gateway
    pc, sdp = await offer()
    without = await post_sdp(base, sdp)
    wrong = await post_sdp(base, sdp, {"Authorization": "Bearer nope"})
    right = await post_sdp(base, sdp, {"Authorization": f"Bearer {tokens}"})
    await pc.close()
    assert (without[0], wrong[0]) == (401, 401), (without, wrong)
    assert "bearer token" in without[1]["error"]["message"]
    assert right[0] == 201, right[1]


async def test_a_call_opens_oai_events_and_its_peer_connection_is_closed_and_counted_at_the_end(gateway):
    base, gw = gateway
    ended = GATEWAY_REQUESTS.labels("realtime_webrtc", "4503")
    before = ended._value.get()
    pc, sdp = await offer()
    received: asyncio.Queue = asyncio.Queue()
    pc.channel.on("message", received.put_nowait)
    form = aiohttp.FormData()
    form.add_field("sdp", sdp, content_type="application/sdp")
    form.add_field("session", json.dumps({"type": "realtime", "instructions": "Be brief."}))
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/v1/realtime/calls?model=gpt-realtime", data=form) as reply:
            answer = await reply.text()
            status, kind, location = reply.status, reply.content_type, reply.headers.get("Location", "")
    assert (status, kind) == (201, "application/sdp"), answer
    call_id = location.rsplit("/", 1)[-1]
    assert location == f"/v1/realtime/calls/{call_id}" and call_id in gw.calls
    transport = gw.calls[call_id][1]
    assert "m=audio" in answer and "opus/48000" in answer and "m=application" in answer
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    created = json.loads(await asyncio.wait_for(received.get(), 20))
    error = json.loads(await asyncio.wait_for(received.get(), 20))
    assert created["type"] == "session.created" and created["session"]["instructions"] == "Be brief.", created
    # The microphone's audio opened the Converse stream (after SETTLE_S: the client sent no event), and no router
    # answers it.
    assert error["type"] == "error" and error["error"]["code"] == "UNAVAILABLE", error
    for _ in range(200):  # the session ended: its peer connection closed, the call gone and counted
        if call_id not in gw.calls:
            break
        await asyncio.sleep(0.05)
    await pc.close()
    assert call_id not in gw.calls and transport.pc.connectionState == "closed"
    assert ended._value.get() == before + 1


async def test_hangup_ends_the_call_and_an_unknown_call_is_a_404(gateway):
    base, gw = gateway
    pc, sdp = await offer()
    status, answer, headers = await post_sdp(base, sdp)
    assert status == 201, answer
    call_id = headers["Location"].rsplit("/", 1)[-1]
    transport = gw.calls[call_id][1]
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/v1/realtime/calls/{call_id}/hangup") as reply:
            hung_up = reply.status
        async with session.post(f"{base}/v1/realtime/calls/rtc_nope/hangup") as reply:
            unknown = (reply.status, (await reply.json())["error"]["param"])
    for _ in range(100):
        if call_id not in gw.calls:
            break
        await asyncio.sleep(0.05)
    await pc.close()
    assert hung_up == 200 and unknown == (404, "call_id")
    assert call_id not in gw.calls and transport.pc.connectionState == "closed"
