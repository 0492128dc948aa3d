"""ICE servers of WebRTC calls, without a fleet and without gathering a candidate: the configured servers become
aiortc's RTCIceServer objects (a TURN server with its username and credential, as aiortc hands them to aioice), and
``GET /v1/realtime/ice_servers`` gives clients the servers meant for them, behind the Realtime routes' checks, and
never the gateway's own credential. Calls through a relay for real: not here (no TURN server runs in the tests)."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from aiohttp import web
from aiortc.rtcicetransport import connection_kwargs

from services.cli.fleet import free_port
from services.common import security
from services.common.config import Config
from services.common.config.gateway import GatewayConfig
from services.common.config.security import SecurityConfig
from services.common.metrics import GATEWAY_REQUESTS
from services.gateway import webrtc
from services.gateway.app import Gateway

pytestmark = pytest.mark.timeout(30)
OWN = {"urls": "turn:turn:3478", "username": "voicefleet", "credential": "own-secret-5be1"}
FOR_CLIENTS = {"urls": ["turn:203.0.113.7:3478"], "username": "voicefleet", "credential": "client-secret-77c2"}
TOKEN = "s3cret-ice-token"


def section(**fields) -> GatewayConfig:
    return GatewayConfig(**fields)


async def test_the_peer_connection_gets_the_turn_server_with_its_credential():
    gateway = section(webrtc_ice_servers=["stun:stun.example.org:3478", OWN])
    pc = webrtc.peer_connection(gateway.webrtc_ice_servers)
    try:
        servers = pc._RTCPeerConnection__configuration.iceServers  # what aiortc gathers with
        assert [(s.urls, s.username, s.credential) for s in servers] == [
            (["stun:stun.example.org:3478"], None, None),
            (["turn:turn:3478"], "voicefleet", "own-secret-5be1"),
        ]
        # ... and what aioice's Connection is given from them (aiortc's own mapping).
        kwargs = connection_kwargs(servers)
        assert kwargs["stun_server"] == ("stun.example.org", 3478)
        assert kwargs["turn_server"] == ("turn", 3478) and kwargs["turn_transport"] == "udp"
        assert (kwargs["turn_username"], kwargs["turn_password"]) == ("voicefleet", "own-secret-5be1")
    finally:
        await pc.close()


async def test_no_ice_servers_means_no_stun_server_at_all():
    # An empty list, not None: aiortc would otherwise ask Google's STUN server.
    pc = webrtc.peer_connection([])
    try:
        assert pc._RTCPeerConnection__configuration.iceServers == []
    finally:
        await pc.close()


@pytest.fixture
async def gateway(caplog):
    """The base URL of a gateway (no router behind it) with its own TURN server and one for clients."""
    caplog.set_level(logging.DEBUG)
    config = Config()
    config.gateway.router = f"127.0.0.1:{free_port()}"
    config.gateway.webrtc_ice_servers = section(webrtc_ice_servers=[OWN]).webrtc_ice_servers
    config.gateway.webrtc_client_ice_servers = section(
        webrtc_client_ice_servers=[FOR_CLIENTS, "stun:stun.example.org:3478"]
    ).webrtc_client_ice_servers
    runner = web.AppRunner(Gateway(config).app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def get(url: str, headers: dict | None = None) -> tuple[int, dict, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers=headers or {}) as reply:
            return reply.status, await reply.json(), dict(reply.headers)


async def test_clients_are_given_their_servers_and_never_the_gateways_own_credential(gateway, caplog):
    before = GATEWAY_REQUESTS.labels("realtime_ice_servers", "200")._value.get()
    status, body, headers = await get(f"{gateway}/v1/realtime/ice_servers")
    assert status == 200 and headers["Cache-Control"] == "no-store"
    # RTCIceServer dictionaries: new RTCPeerConnection({iceServers: body.ice_servers}).
    assert body == {"ice_servers": [FOR_CLIENTS, {"urls": ["stun:stun.example.org:3478"]}]}
    assert "own-secret-5be1" not in str(body)
    assert GATEWAY_REQUESTS.labels("realtime_ice_servers", "200")._value.get() == before + 1
    assert "own-secret-5be1" not in caplog.text and "client-secret-77c2" not in caplog.text


async def test_the_ice_servers_need_what_a_call_needs(gateway):
    before = security.settings()
    security.configure(SecurityConfig(bearer_tokens=[TOKEN]))
    try:
        status, body, _ = await get(f"{gateway}/v1/realtime/ice_servers")
        assert status == 401 and "client-secret-77c2" not in str(body)
        status, body, _ = await get(f"{gateway}/v1/realtime/ice_servers", {"Authorization": "Bearer wrong"})
        assert status == 401
        status, body, _ = await get(f"{gateway}/v1/realtime/ice_servers", {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and body["ice_servers"][0] == FOR_CLIENTS
        # A browser on another origin is refused like on the call's POST.
        status, _, _ = await get(
            f"{gateway}/v1/realtime/ice_servers",
            {"Authorization": f"Bearer {TOKEN}", "Origin": "https://elsewhere.example"},
        )
        assert status == 403
    finally:
        security.configure(before)
