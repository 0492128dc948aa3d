"""The ``gateway`` config section: the browser and HTTP front door (composed into the fleet config by
services/common/config/__init__.py; docs/gateway.md)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from services.common.config.base import Level, Names, Section, bounded, check, is_host_port


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
    # STUN servers of WebRTC calls (POST /v1/realtime/calls), "stun:stun.example.org:3478". Empty: the gateway offers
    # its host addresses only, so the browser must reach them (the same host or network); behind NAT, add a STUN server
    # (TURN, which needs credentials, is not configurable yet).
    webrtc_ice_servers: Names = Field(default_factory=list)

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
    def _ice_servers(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith("stun:"):
                raise ValueError(f"each must be a stun: URL (stun:host:port), got {url!r}")
        return urls

    @model_validator(mode="after")
    def _ports(self):
        check("metrics_port", self.metrics_port != self.port, "must differ from port")
        return self

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"
