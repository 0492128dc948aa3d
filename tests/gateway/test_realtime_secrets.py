"""Realtime client secrets (``POST /v1/realtime/client_secrets``, services/gateway/client_secrets.py) without a fleet:
the gateway's app in process (its router an address where nothing listens), the official ``openai`` SDK minting a
secret with the real bearer token and connecting with it; a wrong, an expired and a misused secret refused with 401
before the WebSocket opens; bad requests refused naming the field; the bound on live secrets. A spoken turn with a
secret on a real fleet: tests/gateway/test_realtime_node.py (the npm client connects with one)."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import openai
import pytest
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from services.cli.fleet import free_port
from services.common import security
from services.common.config import Config
from services.common.config.security import SecurityConfig
from services.gateway.app import Gateway
from services.gateway.client_secrets import ClientSecrets, SecretRefused, SecretsFull
from services.gateway.realtime_config import RealtimeError, RealtimeSession

TOKEN = "the-real-token"
SESSION = {
    "type": "realtime",
    "model": "gpt-realtime",
    "instructions": "You are a terse assistant.",
    "output_modalities": ["text"],
    "audio": {
        "input": {"format": {"type": "audio/pcmu"}, "turn_detection": {"type": "semantic_vad", "eagerness": "low"}},
        "output": {"format": {"type": "audio/pcma"}},
    },
}


@contextlib.asynccontextmanager
async def gateway(**section):
    """(the Gateway, an aiohttp test client on its app) with bearer token TOKEN required, ``section`` over the
    gateway's config; the process-wide security settings put back after."""
    config = Config()
    fields = {"router": f"127.0.0.1:{free_port()}", **section}
    gw = Gateway(config.model_copy(update={"gateway": config.gateway.model_copy(update=fields)}))
    before = security.settings()
    security.configure(SecurityConfig(bearer_tokens=[TOKEN]))
    try:
        async with TestClient(TestServer(gw.app())) as client:
            yield gw, client
    finally:
        security.configure(before)


def sdk(client: TestClient, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=key, max_retries=0, timeout=30)


async def first_event(client: TestClient, key: str, model: str = "gpt-realtime"):
    async with sdk(client, key).realtime.connect(model=model) as connection:
        return await asyncio.wait_for(connection.recv(), 30)


async def refusal(client: TestClient, key: str, model: str = "gpt-realtime") -> tuple[int, dict]:
    """The gateway's answer to opening /v1/realtime with ``key`` (a plain GET: the check comes before the upgrade)."""
    response = await client.get(f"/v1/realtime?model={model}", headers={"Authorization": f"Bearer {key}"})
    return response.status, (await response.json())["error"]


async def test_a_secret_minted_with_the_sdk_opens_sessions_with_its_session_config():
    async with gateway() as (_gw, client):
        secret = await sdk(client, TOKEN).realtime.client_secrets.create(
            session=SESSION, expires_after={"anchor": "created_at", "seconds": 60}
        )
        assert secret.value.startswith("ek_") and len(secret.value) > 20
        assert secret.session.type == "realtime" and secret.session.instructions == SESSION["instructions"]
        assert secret.session.expires_at == secret.expires_at
        # Connecting with the secret as the SDK's api key: the session opens with the secret's settings, every time.
        for _ in range(2):
            created = await first_event(client, secret.value)
            assert created.type == "session.created", created
            s = created.session
            assert s.instructions == SESSION["instructions"] and s.output_modalities == ["text"]
            assert s.audio.input.format.type == "audio/pcmu" and s.audio.output.format.type == "audio/pcma"
            assert s.audio.input.turn_detection.type == "semantic_vad"
            assert s.audio.input.turn_detection.eagerness == "low"
            assert s.id != secret.session.id  # each session its own id
        # The real token still opens a session with the defaults.
        plain = await first_event(client, TOKEN)
        assert plain.session.instructions == "" and plain.session.audio.input.format.type == "audio/pcm"


async def test_a_browser_offers_its_secret_as_a_subprotocol():
    """openai-node's browser client cannot set headers on a WebSocket: it offers ``realtime`` and
    ``openai-insecure-api-key.<key>``; the gateway takes the key from there and answers ``realtime``."""
    async with gateway() as (_gw, client):
        secret = await sdk(client, TOKEN).realtime.client_secrets.create(session=SESSION)
        protocols = ("realtime", f"openai-insecure-api-key.{secret.value}")
        async with client.ws_connect("/v1/realtime?model=gpt-realtime", protocols=protocols) as ws:
            assert ws.protocol == "realtime"
            created = await ws.receive_json(timeout=30)
        assert created["type"] == "session.created", created
        assert created["session"]["instructions"] == SESSION["instructions"]
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect("/v1/realtime", protocols=("realtime", "openai-insecure-api-key.ek_wrong"))
        assert refused.value.status == 401


async def test_wrong_expired_and_misused_secrets_are_refused_with_401():
    async with gateway(client_secret_seconds=0.2) as (_gw, client):
        status, error = await refusal(client, "ek_" + "x" * 32)
        assert status == 401 and error["code"] == "invalid_client_secret", error
        assert "client_secrets" in error["message"]
        with pytest.raises(Exception) as caught:  # the SDK's WebSocket handshake fails on the 401
            await first_event(client, "ek_not-a-secret")
        assert "401" in str(caught.value), caught.value
        # No expires_after: the configured life (0.2 s here). Good now, refused once it has passed.
        secret = await sdk(client, TOKEN).realtime.client_secrets.create()
        assert (await first_event(client, secret.value)).type == "session.created"
        await asyncio.sleep(0.3)
        status, error = await refusal(client, secret.value)
        assert status == 401 and error["code"] == "expired_client_secret", error
        # A secret opens Realtime sessions only: it mints no secrets and calls no other route.
        secret = await sdk(client, TOKEN).realtime.client_secrets.create(expires_after={"seconds": 60})
        with pytest.raises(openai.AuthenticationError):
            await sdk(client, secret.value).realtime.client_secrets.create()
        with pytest.raises(openai.AuthenticationError):
            await sdk(client, secret.value).audio.speech.create(model="tts-1", voice="joe", input="Hello.")
        # Minting needs the real token.
        with pytest.raises(openai.AuthenticationError):
            await sdk(client, "not-the-token").realtime.client_secrets.create()


async def test_a_secrets_model_is_the_sessions_model_and_a_url_naming_another_is_refused():
    async with gateway() as (_gw, client):
        fixed = await sdk(client, TOKEN).realtime.client_secrets.create(
            session={"type": "realtime", "model": "moss_sts"}
        )
        assert (await first_event(client, fixed.value, model="moss_sts")).session.model == "moss_sts"
        status, error = await refusal(client, fixed.value, model="gpt-realtime")
        assert status == 400 and error["param"] == "model", error
        free = await sdk(client, TOKEN).realtime.client_secrets.create(session={"type": "realtime"})
        assert (await first_event(client, free.value, model="moss_sts")).session.model == "moss_sts"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"expires_after": {"anchor": "created_at", "seconds": 5}}, "expires_after.seconds"),
        ({"expires_after": {"anchor": "now", "seconds": 60}}, "expires_after.anchor"),
        ({"expires_after": {"seconds": 60, "later": 1}}, "expires_after.later"),
        ({"expires_after": 60}, "expires_after"),
        ({"session": {"type": "realtime", "tools": [{"type": "mcp", "server_label": "x"}]}}, "session.tools[0].type"),
        ({"session": {"type": "realtime", "audio": {"input": {"format": {"type": "audio/mp3"}}}}}, None),
        ({"session": {"instructions": "no type"}}, "session.type"),
        ({"session": "realtime"}, "session"),
        ({"sessions": {}}, "sessions"),
    ],
)
async def test_a_bad_request_is_refused_naming_the_field(body, param):
    async with gateway() as (gw, client):
        response = await client.post(
            "/v1/realtime/client_secrets", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        error = (await response.json())["error"]
        assert response.status == 400, error
        if param is None:  # the format check names where it looked
            assert error["param"].startswith("session.audio.input.format"), error
        else:
            assert error["param"] == param, error
        assert len(gw.client_secrets) == 0


async def test_live_secrets_are_bounded_and_the_refusal_says_so():
    async with gateway(max_client_secrets=2) as (_gw, client):
        minted = [await sdk(client, TOKEN).realtime.client_secrets.create() for _ in range(2)]
        with pytest.raises(openai.RateLimitError) as caught:
            await sdk(client, TOKEN).realtime.client_secrets.create()
        assert "max_client_secrets" in str(caught.value)
        assert (await first_event(client, minted[0].value)).type == "session.created"  # the live ones still work


async def test_a_session_opened_with_a_secret_calls_the_router_with_the_token_that_minted_it():
    async with gateway() as (gw, _client):
        secret = gw.client_secrets.mint({}, TOKEN, RealtimeSession(model="gpt-realtime", session_id=""))
        request = make_mocked_request(
            "GET", "/v1/realtime?model=x", headers={"Authorization": f"Bearer {secret.value}"}
        )
        auth = gw.authorize_realtime(request)
        assert auth.refused is None and auth.metadata == (("authorization", f"Bearer {TOKEN}"),)
        assert auth.settings is not None and auth.settings.model == "x"


def test_the_store_expires_and_bounds_secrets_by_its_clock():
    now = [100.0]
    store = ClientSecrets(default_seconds=30, limit=2, clock=lambda: now[0], wall=lambda: 1_000_000.0)
    settings = RealtimeSession(model="gpt-realtime", session_id="")
    a = store.mint({}, "", settings)
    b = store.mint({"expires_after": {"seconds": 10}}, "", settings)
    assert (a.expires_at, b.expires_at) == (1_000_030, 1_000_010)
    with pytest.raises(SecretsFull):
        store.mint({}, "", settings)
    now[0] = 110.0  # b has expired: refused, and its place is free again
    with pytest.raises(SecretRefused) as caught:
        store.check(b.value)
    assert caught.value.code == "expired_client_secret"
    assert store.check(a.value) is a
    store.mint({}, "", settings)
    with pytest.raises(SecretRefused) as caught:
        store.check("ek_unknown")
    assert caught.value.code == "invalid_client_secret"
    other = ClientSecrets(default_seconds=30, limit=1, clock=lambda: now[0], wall=lambda: 1_000_000.0)
    assert other.mint({"expires_after": {"anchor": "created_at"}}, "", settings).expires_at == 1_000_030  # the default
    with pytest.raises(RealtimeError) as bad:
        store.mint({"expires_after": {"seconds": 7201}}, "", settings)
    assert bad.value.param == "expires_after.seconds"
