"""The ``gateway`` config section: the browser and HTTP front door (composed into the fleet config by
services/common/config/__init__.py; docs/gateway.md)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator

from services.common.config.base import (
    FieldValueError,
    Level,
    Names,
    Section,
    bounded,
    check,
    comma_list,
    is_host_port,
)

# What aiortc 1.16 parses (aiortc/rtcicetransport.py STUN_REGEX, TURN_REGEX) less what it would drop in silence:
# "stuns:" (never used), a turn: transport other than udp/tcp, a turns: transport other than tcp, an IPv6 literal.
ICE_URL = re.compile(
    r"(?P<scheme>stun|turn|turns):(?P<host>[^?:/\[\]\s]+)(:(?P<port>[0-9]{1,5}))?(\?transport=(?P<transport>udp|tcp))?"
)
ICE_URL_FORMS = "stun:host[:port], turn:host[:port][?transport=udp|tcp] or turns:host[:port][?transport=tcp]"


def _one_or_a_list(schema: dict[str, Any]) -> None:
    # urls: one URL string or a list of them, as in RTCIceServer (Names takes both).
    items = schema.pop("items")
    schema.pop("type")
    schema["anyOf"] = [items, {"type": "array", "items": items}]


class IceServer(Section):
    """One STUN or TURN server of WebRTC calls, as WebRTC's RTCIceServer: its URLs and, for TURN, the long-term
    credential. A URL string alone is a server without credentials (STUN)."""

    # stun:host[:port], turn:host[:port][?transport=udp|tcp] or turns:host[:port] (TLS); one URL or a list.
    urls: Names = Field(default_factory=list, json_schema_extra=_one_or_a_list)
    # The TURN user; turn: and turns: URLs need it.
    username: str = ""
    # The TURN user's password; turn: and turns: URLs need it. Shown nowhere: repr, logs and dumps print '**********'.
    credential: SecretStr = SecretStr("")

    @model_validator(mode="before")
    @classmethod
    def _url_or_mapping(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"urls": [data]}
        if isinstance(data, dict):
            data = dict(data)
            for name in ("username", "credential"):
                value = data.get(name)
                if isinstance(value, bool) or (value is not None and not isinstance(value, (str, int))):
                    # The value is not echoed: it may be the secret.
                    raise FieldValueError(name, "must be a string")
                if isinstance(value, int):
                    data[name] = str(value)
        return data

    @model_validator(mode="after")
    def _urls_and_credential(self):
        check("urls", bool(self.urls), f"required: a URL ({ICE_URL_FORMS}) or a list of them")
        for url in self.urls:
            m = ICE_URL.fullmatch(url)
            check("urls", m is not None, f"each must be {ICE_URL_FORMS}, got {url!r}")
            check("urls", m["port"] is None or 1 <= int(m["port"]) <= 65535, f"port must be 1..65535, got {url!r}")
            check("urls", m["scheme"] != "stun" or m["transport"] is None, f"a stun: URL has no transport, got {url!r}")
            check("urls", m["scheme"] != "turns" or m["transport"] != "udp", f"turns: is TLS over TCP, got {url!r}")
        if self.turn:
            what = "required for turn: and turns: URLs (the TURN server's long-term credential)"
            check("username", bool(self.username), what)
            check("credential", bool(self.credential.get_secret_value()), what)
        return self

    @property
    def turn(self) -> bool:
        return any(url.startswith("turn") for url in self.urls)

    def for_client(self) -> dict[str, Any]:
        """The server as a browser's RTCIceServer dictionary (``new RTCPeerConnection({iceServers: [...]})``), the
        credential included."""
        out: dict[str, Any] = {"urls": list(self.urls)}
        if self.username or self.credential.get_secret_value():
            out |= {"username": self.username, "credential": self.credential.get_secret_value()}
        return out


def _url_or_server(schema: dict[str, Any]) -> None:
    # Each entry is a URL string or a server object (IceServer takes both): what editors check the file with.
    schema["items"] = {"anyOf": [{"type": "string", "description": ICE_URL_FORMS}, schema["items"]]}


# STUN/TURN servers: URL strings (a list, or "a,b") and {urls, username, credential} objects.
IceServers = Annotated[list[IceServer], BeforeValidator(comma_list), Field(json_schema_extra=_url_or_server)]


class GatewayConfig(Section):
    """An HTTP server (aiohttp) in front of the router: the conversation WebSocket, OpenAI-compatible audio endpoints
    and the page. It is an HTTP member like the brain, so it has only the server fields it uses."""

    host: str = "127.0.0.1"
    port: int = bounded(8080, ge=1, le=65535)
    metrics_port: int = bounded(9307, ge=0, le=65535)
    grace_seconds: float = bounded(5.0, ge=0)
    log_level: Level = "INFO"
    # The router it talks to (host:port); "" = router.host:router.port of this config (the local fleet).
    router: str = ""
    # Conversation WebSockets open at once; one more is closed at once with code 4029 (and counted).
    max_sessions: int = bounded(64, ge=1, le=100_000)
    # A socket that sends nothing (no audio, no control) this long is closed with code 4008. A live microphone sends
    # a frame every 20-40 ms, so this only catches clients that went away without closing.
    idle_timeout_seconds: float = bounded(30.0, ge=1, le=3600)
    # Largest WebSocket message; a bigger one closes the socket with 1009 (aiohttp enforces it before reading it).
    max_message_bytes: int = bounded(256 * 1024, ge=4096, le=16 * 1024 * 1024)
    # Largest audio frame in ms of audio at the session's input rate (a frame of up to 1 s is fine; bigger: 4003).
    max_frame_ms: int = bounded(1000, ge=10, le=5000)
    # Events and audio queued for one slow client; past it interim transcripts are dropped and, for anything else,
    # the socket is closed with 4010 (both counted), so a slow client never grows the gateway's memory.
    send_queue_messages: int = bounded(256, ge=8, le=100_000)
    # Largest request body of the HTTP endpoints (an uploaded file for transcription), in bytes.
    max_upload_bytes: int = bounded(25 * 1024 * 1024, ge=1024, le=1024**3)
    # Longest text /v1/audio/speech takes (the router has its own limit too).
    max_text_chars: int = bounded(5000, ge=1)
    # Browser origins allowed to open the WebSocket and call the API ("https://app.example.com"); "*" = any. Empty:
    # only the gateway's own page (Origin equal to the Host it was served from). Requests without an Origin header
    # (non-browser clients) are not affected; they authenticate with a bearer token when security.bearer_tokens is set.
    allowed_origins: Names = Field(default_factory=list)
    # Deadline of one /v1/audio call through the router, in seconds.
    request_timeout_seconds: float = bounded(120.0, gt=0)
    # Realtime client secrets (POST /v1/realtime/client_secrets): how long one is good for opening sessions when the
    # request gives no expires_after (OpenAI's default, 600 s; a request may ask for 10..7200 s), and how many may be
    # live at once in this process (past it, minting is refused with 429 until some expire).
    client_secret_seconds: float = bounded(600.0, gt=0, le=7200)
    max_client_secrets: int = bounded(10_000, ge=1, le=1_000_000)
    # The ICE servers of the gateway's own WebRTC peer (POST /v1/realtime/calls): "stun:stun.example.org:3478", or
    # {urls: "turn:turn.example.org:3478", username: ..., credential: ...} for a TURN relay (its address becomes one of
    # the answer's candidates). Empty: the gateway offers its host addresses only (no public STUN server is asked).
    # aiortc uses one STUN and one TURN URL, so at most one of each.
    webrtc_ice_servers: IceServers = Field(default_factory=list)
    # The ICE servers WebRTC clients are given (GET /v1/realtime/ice_servers, credentials included; the page uses
    # them): the same kinds of entries, with the addresses clients reach them at. A client that can reach none of the
    # gateway's addresses needs a TURN relay of its own here (docs/gateway.md#webrtc-post-v1realtimecalls). Empty: none.
    webrtc_client_ice_servers: IceServers = Field(default_factory=list)

    @field_validator("router")
    @classmethod
    def _router(cls, v: str) -> str:
        if v and not is_host_port(v):
            raise ValueError(f"must be host:port, got {v!r}")
        return v

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            if not (origin == "*" or (origin.startswith(("http://", "https://")) and not origin.endswith("/"))):
                raise ValueError(f"each must be '*' or scheme://host[:port] without a trailing slash, got {origin!r}")
        return origins

    @field_validator("webrtc_ice_servers")
    @classmethod
    def _one_stun_one_turn(cls, servers: list[IceServer]) -> list[IceServer]:
        # aiortc takes the first STUN URL and the first TURN URL and drops the others in silence: refuse them instead.
        urls = [url for server in servers for url in server.urls]
        for kind, prefix in (("STUN", "stun"), ("TURN", "turn")):
            given = [url for url in urls if url.startswith(prefix)]
            if len(given) > 1:
                raise ValueError(f"at most one {kind} URL (aiortc uses only the first), got {given}")
        return servers

    @model_validator(mode="after")
    def _ports(self):
        check("metrics_port", self.metrics_port != self.port, "must differ from port")
        return self

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"
