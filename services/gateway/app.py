"""The gateway's HTTP application (aiohttp): the conversation WebSocket, the OpenAI-compatible audio endpoints, the
voice list, health, and the page. Every call goes to the router over gRPC (docs/gateway.md).

Routes:
  GET  /                          the page (static/index.html): Talk and Speak
  GET  /v1/conversation           WebSocket, one voice.v1.Conversation session (session.py, protocol.py)
  GET  /v1/realtime               WebSocket, the OpenAI Realtime protocol onto one Converse stream (realtime.py)
  POST /v1/realtime/client_secrets  a short-lived key that opens Realtime sessions (client_secrets.py)
  POST /v1/realtime/calls         WebRTC: an SDP offer in, the answer out; the same Realtime session (webrtc.py)
  POST /v1/realtime/calls/{id}/hangup   ends that call
  POST /v1/audio/speech           OpenAI-compatible text to speech, streamed (pcm or wav)
  POST /v1/audio/transcriptions   OpenAI-compatible transcription of an uploaded WAV
  GET  /v1/audio/voices           the fleet's voices
  GET  /healthz, /readyz          liveness; readiness (the router answers SERVING)
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import struct
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import audio, security
from services.common.config import Config
from services.common.metrics import (
    GATEWAY_ADDED,
    GATEWAY_BYTES,
    GATEWAY_REFUSALS,
    GATEWAY_REQUESTS,
    GATEWAY_SESSIONS,
)
from services.gateway import client_secrets, protocol, webrtc
from services.gateway.client_secrets import ClientSecrets, SecretRefused, SecretsFull
from services.gateway.protocol import ProtocolError
from services.gateway.realtime import RealtimeConnection, WebSocketTransport
from services.gateway.realtime_config import RealtimeError, RealtimeSession, apply_update
from services.gateway.session import Session, close_socket
from voice.v1 import (
    audio_pb2,
    recognizer_pb2,
    recognizer_pb2_grpc,
    routing_pb2,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)

log = logging.getLogger("voicefleet.gateway")
STATIC_DIR = Path(__file__).with_name("static")
TTS_BACKENDS = ("cosyvoice_tts", "qwen_tts", "moss_sts")
# OpenAI's pcm is 24 kHz s16le mono; wav here is the same samples with a header.
OPENAI_RATE = 24_000
SPEECH_FIELDS = ("model", "input", "voice", "response_format", "speed", "instructions", "stream_format", "sample_rate")
SUBPROTOCOL_KEY = "openai-insecure-api-key."  # a browser's Realtime WebSocket key, offered as a subprotocol
VOICES_TTL_S = 30.0  # the Realtime route checks a session's voice against the fleet's list, kept this long
HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.UNIMPLEMENTED: 501,
}


class AccessLogger(AbstractAccessLogger):
    """Method, path and status; never the query string (a browser's ?access_token=) nor headers."""

    def log(self, request, response, time):  # noqa: A002 - aiohttp's signature
        # Probes (the supervisor, compose, the kubelet) ask every few seconds: DEBUG, so the log shows requests.
        level = logging.DEBUG if request.path in ("/healthz", "/readyz") else logging.INFO
        self.logger.log(level, "%s %s %s %.1fms", request.method, request.path, response.status, time * 1000)


def api_error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    """An error in OpenAI's shape, so its clients raise it with the message."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status)


def wav_header(rate: int) -> bytes:
    """A WAV header for a stream of unknown length (sizes 0xFFFFFFFF, as streaming servers send): players and
    Python's wave module read to the end of the data."""
    unknown = 0xFFFFFFFF
    return (
        b"RIFF"
        + struct.pack("<I", unknown)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * audio.BYTES_PER_SAMPLE, audio.BYTES_PER_SAMPLE, 16)
        + b"data"
        + struct.pack("<I", unknown)
    )


@dataclass
class RealtimeAuth:
    """Who may open a Realtime session (Gateway.authorize_realtime): ``refused`` is the HTTP answer when nobody;
    else ``metadata`` goes to the router with the session's calls, and ``settings`` (a client secret's session) are
    the session's first settings, or None for the defaults."""

    refused: web.Response | None
    metadata: tuple = ()
    settings: RealtimeSession | None = None


def _subprotocol_key(request: web.Request) -> str:
    """The key a browser's WebSocket offers as the subprotocol ``openai-insecure-api-key.<key>`` (browsers cannot set
    headers on a WebSocket: openai-node's browser client sends its key, a client secret, this way)."""
    offered = request.headers.get("Sec-WebSocket-Protocol", "")
    for name in (p.strip() for p in offered.split(",")):
        if name.startswith(SUBPROTOCOL_KEY):
            return name[len(SUBPROTOCOL_KEY) :]
    return ""


def _voice_named(body: dict) -> bool:
    try:
        return bool(body["session"]["audio"]["output"]["voice"])
    except (KeyError, TypeError):
        return False


class Gateway:
    def __init__(self, config: Config):
        self.config = config
        self.section = config.gateway
        self.router_address = self.section.router or config.router.address
        self.channel: grpc.aio.Channel | None = None
        self.sessions: set[web.WebSocketResponse] = set()
        self.calls: dict[str, tuple[asyncio.Task, webrtc.WebRTCTransport]] = {}  # WebRTC calls by id
        self._voices: tuple[float, list[str]] = (0.0, [])
        self.client_secrets = ClientSecrets(self.section.client_secret_seconds, self.section.max_client_secrets)

    # --- life ----------------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.section.max_upload_bytes)
        app.router.add_get("/", self.page)
        app.router.add_static("/static/", STATIC_DIR, show_index=False)
        app.router.add_get("/v1/conversation", self.conversation)
        app.router.add_get("/v1/realtime", self.realtime)
        app.router.add_post("/v1/realtime/client_secrets", self.mint_client_secret)
        app.router.add_post("/v1/realtime/calls", self.realtime_calls)
        app.router.add_get("/v1/realtime/ice_servers", self.realtime_ice_servers)
        app.router.add_post("/v1/realtime/calls/{call_id}/hangup", self.realtime_hangup)
        app.router.add_post("/v1/audio/speech", self.speech)
        app.router.add_post("/v1/audio/transcriptions", self.transcriptions)
        app.router.add_get("/v1/audio/voices", self.voices)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.on_startup.append(self._open_channel)
        app.on_shutdown.append(self._close_sessions)
        app.on_cleanup.append(self._close_channel)
        return app

    async def _open_channel(self, _app) -> None:
        # The fleet channel: TLS when configured, and the fleet token (never logged) so the router serves the
        # gateway as a fleet service; clients' own bearer tokens are forwarded per call.
        self.channel = security.fleet_channel(self.router_address)

    async def _close_sessions(self, _app) -> None:
        for ws in list(self.sessions):
            await ws.close(code=1001, message=b"gateway shutting down")
        for _, transport in list(self.calls.values()):
            transport.hang_up()
        if self.calls:
            await asyncio.wait([task for task, _ in self.calls.values()], timeout=5)

    def at_capacity(self) -> bool:
        return len(self.sessions) + len(self.calls) >= self.section.max_sessions

    async def _close_channel(self, _app) -> None:
        if self.channel is not None:
            await self.channel.close()

    # --- access control ------------------------------------------------------------------------------------------
    def origin_allowed(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:
            return True  # not a browser: the bearer token (when configured) is what guards it
        allowed = self.section.allowed_origins
        if "*" in allowed or origin in allowed:
            return True
        return origin in (f"http://{request.host}", f"https://{request.host}")  # the gateway's own page

    def client_token(self, request: web.Request) -> str:
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[len("Bearer ") :]
        # Browsers cannot set headers on a WebSocket: the page passes the token in the query (never logged).
        return request.query.get("access_token", "")

    def refuse(self, request: web.Request, token: str | None = None) -> web.Response | None:
        """Origin and token checks (``token``: the request's own, client_token, unless given); a response when
        refused (the endpoint is counted by the caller)."""
        if not self.origin_allowed(request):
            GATEWAY_REFUSALS.labels("origin").inc()
            return api_error(403, "origin not allowed: add it to gateway.allowed_origins", code="origin")
        tokens = security.settings().bearer_tokens
        if tokens:
            token = self.client_token(request) if token is None else token
            if not any(hmac.compare_digest(token, t) for t in tokens):
                GATEWAY_REFUSALS.labels("unauthenticated").inc()
                return api_error(
                    401,
                    "missing or unknown bearer token: send 'Authorization: Bearer <token>' (security.bearer_tokens)",
                    code="unauthenticated",
                )
        return None

    def metadata(self, request: web.Request) -> tuple:
        token = self.client_token(request)
        return (("authorization", f"Bearer {token}"),) if token else ()

    def authorize_realtime(self, request: web.Request) -> RealtimeAuth:
        """The access check of the Realtime routes (the WebSocket /v1/realtime, and the WebRTC /v1/realtime/calls):
        the origin, then the bearer token: one of ``security.bearer_tokens``, or a live client secret (``ek_...``,
        POST /v1/realtime/client_secrets), whose session settings the session opens with and whose minting token
        goes to the router. A wrong or expired secret is refused (401) even on a gateway without bearer tokens:
        before any audio is taken."""
        if not self.origin_allowed(request):
            return RealtimeAuth(self.refuse(request))
        token = self.client_token(request) or _subprotocol_key(request)
        tokens = security.settings().bearer_tokens
        if token.startswith(client_secrets.PREFIX) and not any(hmac.compare_digest(token, t) for t in tokens):
            try:
                secret = self.client_secrets.check(token)
                settings = ClientSecrets.session_for(secret, request.query.get("model", ""))
            except SecretRefused as e:
                GATEWAY_REFUSALS.labels("unauthenticated").inc()
                return RealtimeAuth(api_error(401, e.message, code=e.code))
            except RealtimeError as e:
                GATEWAY_REFUSALS.labels("bad_input").inc()
                return RealtimeAuth(api_error(400, e.message, param=e.param, code=e.code))
            metadata = (("authorization", f"Bearer {secret.token}"),) if secret.token else ()
            return RealtimeAuth(None, metadata, settings)
        if (refused := self.refuse(request, token)) is not None:
            return RealtimeAuth(refused)
        return RealtimeAuth(None, (("authorization", f"Bearer {token}"),) if token else ())

    # --- POST /v1/realtime/client_secrets ---------------------------------------------------------------------------
    async def mint_client_secret(self, request: web.Request) -> web.Response:
        """OpenAI's client secrets: the real bearer token buys a short-lived ``ek_`` key and the session it opens."""
        if (refused := self.refuse(request)) is not None:
            return self._count("client_secrets", refused)
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return self._count("client_secrets", api_error(400, "the body must be a JSON object"))
        try:
            body = client_secrets.check_request(body)
            # The fleet's voices, to check a voice against (None: not named, or the router could not say).
            voices = (await self.voice_ids(self.metadata(request))) or None if _voice_named(body) else None
            settings = client_secrets.request_session(body, voices, self.section.max_text_chars)
            secret = self.client_secrets.mint(body, self.client_token(request), settings)
        except RealtimeError as e:
            GATEWAY_REFUSALS.labels("bad_input").inc()
            return self._count("client_secrets", api_error(400, e.message, param=e.param, code=e.code))
        except SecretsFull as e:
            GATEWAY_REFUSALS.labels("max_client_secrets").inc()
            return self._count("client_secrets", api_error(429, str(e), code="too_many_client_secrets"))
        shown = {**secret.settings.as_event(), "expires_at": secret.expires_at}
        body = {"value": secret.value, "expires_at": secret.expires_at, "session": shown}
        return self._count("client_secrets", web.json_response(body))

    # --- simple routes -------------------------------------------------------------------------------------------
    async def page(self, _request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    async def healthz(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "SERVING"})

    async def readyz(self, _request: web.Request) -> web.Response:
        try:
            reply = await health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        except grpc.aio.AioRpcError as e:
            status = e.code().name
        return web.json_response(
            {"router": self.router_address, "status": status}, status=200 if status == "SERVING" else 503
        )

    async def voices(self, request: web.Request) -> web.Response:
        if (refused := self.refuse(request)) is not None:
            return self._count("voices", refused)
        stub = synthesizer_pb2_grpc.SynthesizerStub(self.channel)
        try:
            reply = await stub.ListVoices(
                synthesizer_pb2.ListVoicesRequest(language=request.query.get("language", "")),
                timeout=10,
                metadata=self.metadata(request),
            )
        except grpc.aio.AioRpcError as e:
            return self._count("voices", self._grpc_error(e))
        voices = [
            {
                "id": v.id,
                "name": v.display_name or v.id,
                "languages": list(v.languages),
                "service": v.service,
                "engine": v.engine,
                "sample_rate": v.native_sample_rate_hz,
            }
            for v in reply.voices
        ]
        # vLLM-Omni answers {"voices": [names]}; the details ride along in "data".
        return self._count("voices", web.json_response({"voices": [v["id"] for v in voices], "data": voices}))

    def _count(self, endpoint: str, response: web.StreamResponse) -> web.StreamResponse:
        GATEWAY_REQUESTS.labels(endpoint, str(response.status)).inc()
        return response

    def _grpc_error(self, e: grpc.aio.AioRpcError) -> web.Response:
        status = HTTP_STATUS.get(e.code(), 502)
        return api_error(status, f"{e.code().name}: {e.details()}", code=e.code().name)

    # --- POST /v1/audio/speech ------------------------------------------------------------------------------------
    async def speech(self, request: web.Request) -> web.StreamResponse:
        received = time.perf_counter()
        if (refused := self.refuse(request)) is not None:
            return self._count("speech", refused)
        try:
            body = await request.json()
        except ValueError:
            return self._count("speech", api_error(400, "the body must be a JSON object"))
        try:
            synth_request, response_format, rate = self._speech_request(body)
        except ProtocolError as e:
            GATEWAY_REFUSALS.labels("bad_input").inc()
            return self._count("speech", api_error(400, e.reason, param=e.reason.split(":")[0]))
        stub = synthesizer_pb2_grpc.SynthesizerStub(self.channel)
        call = stub.Synthesize(
            synth_request, timeout=self.section.request_timeout_seconds, metadata=self.metadata(request)
        )
        called = time.perf_counter()
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as e:
            return self._count("speech", self._grpc_error(e))
        router_first = time.perf_counter() - called
        if first is grpc.aio.EOF:
            return self._count("speech", api_error(502, "the router returned no audio"))
        content_type = "audio/wav" if response_format == "wav" else "audio/pcm"
        response = web.StreamResponse(headers={"Content-Type": content_type, "X-Request-Id": synth_request.request_id})
        response.enable_chunked_encoding()
        await response.prepare(request)
        head = wav_header(rate) if response_format == "wav" else b""
        await response.write(head + first.audio.data)
        GATEWAY_ADDED.labels("speech").observe(max(0.0, time.perf_counter() - received - router_first))
        sent = len(first.audio.data)
        try:
            while (reply := await call.read()) is not grpc.aio.EOF:
                await response.write(reply.audio.data)
                sent += len(reply.audio.data)
        except grpc.aio.AioRpcError as e:
            # Audio already went out with 200: cut the connection so the client sees a broken stream, not a short
            # file that looks complete.
            log.warning("speech %s failed after %d bytes: %s", synth_request.request_id, sent, e.code().name)
            GATEWAY_BYTES.labels("out", "speech").inc(sent)
            GATEWAY_REQUESTS.labels("speech", e.code().name).inc()
            if request.transport is not None:
                request.transport.close()
            return response
        except (ConnectionResetError, asyncio.CancelledError):
            call.cancel()  # the client went away: stop the synthesis at once
            GATEWAY_BYTES.labels("out", "speech").inc(sent)
            GATEWAY_REQUESTS.labels("speech", "client_closed").inc()
            raise
        GATEWAY_BYTES.labels("out", "speech").inc(sent)
        await response.write_eof()
        return self._count("speech", response)

    def _speech_request(self, body) -> tuple[synthesizer_pb2.SynthesizeRequest, str, int]:
        if not isinstance(body, dict):
            raise ProtocolError(protocol.BAD_JSON, "body: must be a JSON object")
        unknown = sorted(set(body) - set(SPEECH_FIELDS))
        if unknown:
            raise ProtocolError(protocol.BAD_FIELD, f"{unknown[0]}: unknown field; known: {', '.join(SPEECH_FIELDS)}")
        text = body.get("input")
        if not isinstance(text, str) or not text.strip():
            raise ProtocolError(protocol.BAD_FIELD, "input: required, the text to say")
        if len(text) > self.section.max_text_chars:
            raise ProtocolError(protocol.BAD_FIELD, f"input: longer than {self.section.max_text_chars} characters")
        model = body.get("model", "")
        voice = body.get("voice", "")
        if not isinstance(model, str) or not isinstance(voice, str):
            raise ProtocolError(
                protocol.BAD_FIELD,
                "model: must be a string" if not isinstance(model, str) else "voice: must be a string",
            )
        response_format = body.get("response_format", "wav")
        if response_format not in ("wav", "pcm"):
            raise ProtocolError(
                protocol.BAD_FIELD, f"response_format: {str(response_format)[:20]!r} is not served; use wav or pcm"
            )
        stream_format = body.get("stream_format", "audio")
        if stream_format != "audio":
            raise ProtocolError(protocol.BAD_FIELD, "stream_format: only 'audio' (raw audio streamed) is served")
        speed = body.get("speed", 1.0)
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not 0.5 <= speed <= 2.0:
            raise ProtocolError(protocol.BAD_FIELD, f"speed: must be a number 0.5..2.0, got {json.dumps(speed)[:20]}")
        rate = body.get("sample_rate", OPENAI_RATE)
        if isinstance(rate, bool) or not isinstance(rate, int) or not audio.MIN_RATE_HZ <= rate <= audio.MAX_RATE_HZ:
            raise ProtocolError(protocol.BAD_FIELD, f"sample_rate: must be {audio.MIN_RATE_HZ}..{audio.MAX_RATE_HZ} Hz")
        if not isinstance(body.get("instructions", ""), str):
            raise ProtocolError(protocol.BAD_FIELD, "instructions: must be a string")
        request = synthesizer_pb2.SynthesizeRequest(
            request_id=f"gw-{uuid.uuid4().hex[:12]}",
            text=text,
            config=synthesizer_pb2.SynthesisConfig(
                voice=voice,
                output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1),
                speaking_rate=float(speed),
                # A fleet backend's name as the model pins it; OpenAI's model names (tts-1, ...) take the default route.
                routing=routing_pb2.Routing(engine=model if model in TTS_BACKENDS else ""),
            ),
        )
        return request, response_format, rate

    # --- POST /v1/audio/transcriptions ----------------------------------------------------------------------------
    async def transcriptions(self, request: web.Request) -> web.Response:
        if (refused := self.refuse(request)) is not None:
            return self._count("transcriptions", refused)
        fields: dict[str, str] = {}
        data = bytearray()
        limit = self.section.max_upload_bytes
        too_big = api_error(413, f"file: larger than gateway.max_upload_bytes ({limit})", param="file")
        if (request.content_length or 0) > limit:
            GATEWAY_REFUSALS.labels("too_big").inc()
            return self._count("transcriptions", too_big)
        try:
            reader = await request.multipart()
            async for part in reader:
                if part.name == "file":
                    # Read in chunks against the limit: a chunked upload has no Content-Length to refuse up front.
                    while chunk := await part.read_chunk():
                        data += chunk
                        if len(data) > limit:
                            GATEWAY_REFUSALS.labels("too_big").inc()
                            return self._count("transcriptions", too_big)
                elif part.name:
                    fields[part.name] = await part.text()
        except (ValueError, AssertionError, KeyError):
            return self._count("transcriptions", api_error(400, "send multipart/form-data with a 'file' part"))
        if not data:
            return self._count("transcriptions", api_error(400, "file: required, a 16-bit PCM WAV", param="file"))
        try:
            pcm, rate = audio.read_wav(bytes(data))
            if not audio.MIN_RATE_HZ <= rate <= audio.MAX_RATE_HZ:
                raise ValueError(f"{rate} Hz is outside {audio.MIN_RATE_HZ}..{audio.MAX_RATE_HZ} Hz")
        except (ValueError, EOFError) as e:
            return self._count("transcriptions", api_error(400, f"file: not a usable 16-bit PCM WAV ({e})", "file"))
        except Exception as e:  # noqa: BLE001 - wave.Error and struct errors from a malformed header
            return self._count("transcriptions", api_error(400, f"file: not a 16-bit PCM WAV ({e})", param="file"))
        response_format = fields.get("response_format", "json")
        if response_format not in ("json", "text"):
            return self._count(
                "transcriptions",
                api_error(400, "response_format: json or text are served", param="response_format"),
            )
        GATEWAY_BYTES.labels("in", "transcriptions").inc(len(pcm))
        config = recognizer_pb2.RecognitionConfig(
            input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1),
            language=fields.get("language", ""),
            interim_results=False,
        )

        async def requests():
            yield recognizer_pb2.StreamingRecognizeRequest(request_id=f"gw-{uuid.uuid4().hex[:12]}", config=config)
            for chunk in audio.split_pcm(pcm, rate * audio.BYTES_PER_SAMPLE):  # 1 s pieces, under any message limit
                yield recognizer_pb2.StreamingRecognizeRequest(audio=chunk)

        stub = recognizer_pb2_grpc.RecognizerStub(self.channel)
        finals = []
        try:
            async for reply in stub.StreamingRecognize(
                requests(), timeout=self.section.request_timeout_seconds, metadata=self.metadata(request)
            ):
                if reply.WhichOneof("event") == "result" and reply.result.is_final and reply.result.transcript:
                    finals.append(reply.result.transcript.strip())
        except grpc.aio.AioRpcError as e:
            return self._count("transcriptions", self._grpc_error(e))
        text = " ".join(finals)
        if response_format == "text":
            return self._count("transcriptions", web.Response(text=text))
        return self._count("transcriptions", web.json_response({"text": text}))

    # --- GET /v1/conversation (WebSocket) ---------------------------------------------------------------------------
    async def conversation(self, request: web.Request) -> web.StreamResponse:
        if (refused := self.refuse(request)) is not None:
            return self._count("conversation", refused)
        ws = web.WebSocketResponse(max_msg_size=self.section.max_message_bytes, autoping=True)
        await ws.prepare(request)
        if len(self.sessions) >= self.section.max_sessions:
            GATEWAY_REFUSALS.labels("max_sessions").inc()
            await close_socket(
                ws, protocol.AT_CAPACITY, f"gateway at capacity (max_sessions={self.section.max_sessions})"
            )
            return ws
        self.sessions.add(ws)
        GATEWAY_SESSIONS.inc()
        try:
            code = await Session(self.section, self.channel, self.metadata(request), ws).run()
        except Exception:  # a bug of ours: this session ends, the gateway and the other sessions go on
            log.exception("conversation session failed")
            code = await close_socket(ws, 1011, "gateway error (logged)")
        finally:
            self.sessions.discard(ws)
            GATEWAY_SESSIONS.dec()
        GATEWAY_REQUESTS.labels("conversation", str(code)).inc()
        return ws

    # --- GET /v1/realtime (WebSocket, OpenAI Realtime) --------------------------------------------------------------
    async def voice_ids(self, metadata: tuple) -> list[str]:
        """The fleet's voice ids (ListVoices through the router), kept VOICES_TTL_S; [] when the router cannot say."""
        at, ids = self._voices
        if ids and time.monotonic() - at < VOICES_TTL_S:
            return ids
        try:
            reply = await synthesizer_pb2_grpc.SynthesizerStub(self.channel).ListVoices(
                synthesizer_pb2.ListVoicesRequest(), timeout=10, metadata=metadata
            )
        except grpc.aio.AioRpcError as e:
            log.warning("realtime: could not list voices to check a session's voice: %s", e.code().name)
            return ids
        ids = sorted({v.id for v in reply.voices})
        self._voices = (time.monotonic(), ids)
        return ids

    async def realtime(self, request: web.Request) -> web.StreamResponse:
        auth = self.authorize_realtime(request)
        if auth.refused is not None:
            return self._count("realtime", auth.refused)
        # Browsers offer the "realtime" subprotocol (OpenAI's browser snippet); the SDKs send none.
        # Pinged every idle_timeout_seconds: a client that stops answering is gone (no pong in half that) and closed.
        ws = web.WebSocketResponse(
            max_msg_size=self.section.max_message_bytes,
            autoping=True,
            heartbeat=self.section.idle_timeout_seconds,
            protocols=("realtime",),
        )
        await ws.prepare(request)
        if self.at_capacity():
            GATEWAY_REFUSALS.labels("max_sessions").inc()
            message = f"gateway at capacity (max_sessions={self.section.max_sessions}); retry shortly"
            error = {"type": "server_error", "code": "at_capacity", "message": message, "param": None}
            await ws.send_json({"type": "error", "event_id": f"event_{uuid.uuid4().hex[:20]}", "error": error})
            await close_socket(ws, protocol.AT_CAPACITY, message)
            return ws
        self.sessions.add(ws)
        GATEWAY_SESSIONS.inc()
        metadata = auth.metadata
        try:
            connection = RealtimeConnection(
                self.section,
                self.channel,
                metadata,
                WebSocketTransport(ws),
                request.query.get("model", ""),
                lambda: self.voice_ids(metadata),
                intent=request.query.get("intent", ""),
                settings=auth.settings,
            )
            code = await connection.run()
        except Exception:  # a bug of ours: this session ends, the gateway and the other sessions go on
            log.exception("realtime session failed")
            code = await close_socket(ws, 1011, "gateway error (logged)")
        finally:
            self.sessions.discard(ws)
            GATEWAY_SESSIONS.dec()
        GATEWAY_REQUESTS.labels("realtime", str(code)).inc()
        return ws

    # --- POST /v1/realtime/calls (WebRTC, OpenAI Realtime) ---------------------------------------------------------
    async def _call_offer(self, request: web.Request) -> tuple[str, dict | None]:
        """(the SDP offer, the multipart form's session object or None); CallError naming the field."""
        kind = request.content_type
        if kind == "application/sdp":
            return await request.text(), None
        if kind in ("multipart/form-data", "application/x-www-form-urlencoded"):
            try:
                form = await request.post()
            except (ValueError, AssertionError, KeyError):
                raise webrtc.CallError("sdp", "the form could not be read: send 'sdp' (and 'session')") from None
            fields = {}
            for name in ("sdp", "session"):
                value = form.get(name)
                if isinstance(value, web.FileField):  # a part with a file name
                    value = value.file.read()
                if isinstance(value, (bytes, bytearray)):  # a part with a content type of its own (application/sdp)
                    value = bytes(value).decode("utf-8", "replace")
                if value is not None:
                    fields[name] = value
            if "sdp" not in fields:
                raise webrtc.CallError("sdp", "sdp: required, the SDP offer as the form's 'sdp' field")
            session = webrtc.session_field(fields["session"]) if "session" in fields else None
            return fields["sdp"], session
        raise webrtc.CallError(
            "Content-Type",
            f"Content-Type: {kind or 'none'} is not served; send the SDP offer as application/sdp (or a form,"
            " multipart/form-data, with 'sdp' and 'session')",
        )

    async def realtime_calls(self, request: web.Request) -> web.Response:
        auth = self.authorize_realtime(request)  # a bearer token, or a client secret and the session it opens
        if auth.refused is not None:
            return self._count("realtime_calls", auth.refused)
        try:
            sdp, session = await self._call_offer(request)
            webrtc.check_offer(sdp)
        except webrtc.CallError as e:
            GATEWAY_REFUSALS.labels("bad_input").inc()
            status = 415 if e.param == "Content-Type" else 400
            return self._count("realtime_calls", api_error(status, e.message, param=e.param, code="invalid_value"))
        if self.at_capacity():
            GATEWAY_REFUSALS.labels("max_sessions").inc()
            message = f"gateway at capacity (max_sessions={self.section.max_sessions}); retry shortly"
            return self._count("realtime_calls", api_error(429, message, code="at_capacity"))
        metadata = auth.metadata
        model = request.query.get("model", "") or (session or {}).get("model") or ""
        call_id = webrtc.new_call_id()
        transport = webrtc.WebRTCTransport(webrtc.peer_connection(self.section.webrtc_ice_servers), call_id)
        connection = RealtimeConnection(
            self.section,
            self.channel,
            metadata,
            transport,
            model if isinstance(model, str) else "",
            lambda: self.voice_ids(metadata),
            settings=auth.settings,
        )
        try:
            if session is not None:
                out = (session.get("audio") or {}).get("output") if isinstance(session.get("audio"), dict) else None
                voices = (
                    (await self.voice_ids(metadata)) or None if isinstance(out, dict) and out.get("voice") else None
                )
                connection.settings = apply_update(
                    connection.settings, session, False, voices, self.section.max_text_chars
                )
            answer = await transport.answer(sdp)
        except RealtimeError as e:
            await transport.close(1000, "refused")
            GATEWAY_REFUSALS.labels("bad_input").inc()
            param = e.param if (e.param or "").startswith("session") else f"session.{e.param}" if e.param else "session"
            return self._count("realtime_calls", api_error(400, e.message, param=param, code=e.code))
        except Exception as e:  # noqa: BLE001 - aiortc refusing the offer (ValueError, its own errors)
            await transport.close(1000, "refused")
            GATEWAY_REFUSALS.labels("bad_input").inc()
            message = f"sdp: the offer could not be answered: {type(e).__name__}: {str(e)[:160]}"
            return self._count("realtime_calls", api_error(400, message, param="sdp", code="invalid_value"))
        transport.attach(connection)
        task = asyncio.create_task(self._run_call(call_id, transport, connection), name=f"call-{call_id}")
        self.calls[call_id] = (task, transport)
        GATEWAY_SESSIONS.inc()
        location = f"/v1/realtime/calls/{call_id}"
        response = web.Response(status=201, text=answer, content_type="application/sdp", headers={"Location": location})
        return self._count("realtime_calls", response)

    async def realtime_ice_servers(self, request: web.Request) -> web.Response:
        """The ICE servers a WebRTC client should create its peer connection with (gateway.webrtc_client_ice_servers,
        as RTCIceServer dictionaries, TURN credentials included), for whoever may place a call: the same checks as
        POST /v1/realtime/calls. Not an OpenAI route: OpenAI's servers need no relay to be reached; ours may."""
        auth = self.authorize_realtime(request)
        if auth.refused is not None:
            return self._count("realtime_ice_servers", auth.refused)
        servers = [server.for_client() for server in self.section.webrtc_client_ice_servers]
        response = web.json_response({"ice_servers": servers}, headers={"Cache-Control": "no-store"})
        return self._count("realtime_ice_servers", response)

    async def _run_call(self, call_id: str, transport, connection: RealtimeConnection) -> None:
        try:
            code = await connection.run()
        except Exception:  # a bug of ours: this call ends, the gateway and the other sessions go on
            log.exception("realtime call %s failed", call_id)
            code = 1011
            await transport.close(code, "gateway error (logged)")
        finally:
            self.calls.pop(call_id, None)
            GATEWAY_SESSIONS.dec()
        GATEWAY_REQUESTS.labels("realtime_webrtc", str(code)).inc()

    async def realtime_hangup(self, request: web.Request) -> web.Response:
        if (refused := self.refuse(request)) is not None:
            return self._count("realtime_hangup", refused)
        call = self.calls.get(request.match_info["call_id"])
        if call is None:
            return self._count("realtime_hangup", api_error(404, "no such call", param="call_id", code="not_found"))
        call[1].hang_up()
        return self._count("realtime_hangup", web.json_response({}))
