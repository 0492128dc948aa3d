"""The ``gateway`` config section: the browser and HTTP front door (composed into the fleet config by
services/common/config/__init__.py; docs/gateway.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.config.base import check, is_host_port


@dataclass
class GatewayConfig:
    """An HTTP server (aiohttp) in front of the router: the conversation WebSocket, OpenAI-compatible audio endpoints
    and the page. It is an HTTP member like the brain, so it has only the server fields it uses."""

    host: str = "127.0.0.1"
    port: int = 8080
    metrics_port: int = 9307
    grace_seconds: float = 5.0
    log_level: str = "INFO"
    # The router it talks to (host:port); "" = router.host:router.port of this config (the local fleet).
    router: str = ""
    # Conversation WebSockets open at once; one more is closed at once with code 4029 (and counted).
    max_sessions: int = 64
    # A socket that sends nothing (no audio, no control) this long is closed with code 4008. A live microphone sends
    # a frame every 20-40 ms, so this only catches clients that went away without closing.
    idle_timeout_seconds: float = 30.0
    # Largest WebSocket message; a bigger one closes the socket with 1009 (aiohttp enforces it before reading it).
    max_message_bytes: int = 256 * 1024
    # Largest audio frame in ms of audio at the session's input rate (a frame of up to 1 s is fine; bigger: 4003).
    max_frame_ms: int = 1000
    # Events and audio queued for one slow client; past it interim transcripts are dropped and, for anything else,
    # the socket is closed with 4010 (both counted), so a slow client never grows the gateway's memory.
    send_queue_messages: int = 256
    # Largest request body of the HTTP endpoints (an uploaded file for transcription), in bytes.
    max_upload_bytes: int = 25 * 1024 * 1024
    # Longest text /v1/audio/speech takes (the router has its own limit too).
    max_text_chars: int = 5000
    # Browser origins allowed to open the WebSocket and call the API ("https://app.example.com"); "*" = any. Empty:
    # only the gateway's own page (Origin equal to the Host it was served from). Requests without an Origin header
    # (non-browser clients) are not affected; they authenticate with a bearer token when security.bearer_tokens is set.
    allowed_origins: list[str] = field(default_factory=list)
    # Deadline of one /v1/audio call through the router, in seconds.
    request_timeout_seconds: float = 120.0

    def validate(self, path: str) -> None:
        check(path, "port", 1 <= self.port <= 65535, f"must be 1..65535, got {self.port}")
        check(path, "metrics_port", 0 <= self.metrics_port <= 65535, f"must be 0..65535, got {self.metrics_port}")
        check(path, "metrics_port", self.metrics_port != self.port, "must differ from port")
        check(path, "grace_seconds", self.grace_seconds >= 0, "must be >= 0")
        check(
            path,
            "log_level",
            self.log_level.upper() in ("DEBUG", "INFO", "WARNING", "ERROR"),
            f"must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}",
        )
        check(path, "router", not self.router or is_host_port(self.router), f"must be host:port, got {self.router!r}")
        check(path, "max_sessions", 1 <= self.max_sessions <= 100_000, f"must be 1..100000, got {self.max_sessions}")
        check(path, "idle_timeout_seconds", 1 <= self.idle_timeout_seconds <= 3600, "must be 1..3600")
        check(path, "max_message_bytes", 4096 <= self.max_message_bytes <= 16 * 1024 * 1024, "must be 4096..16777216")
        check(path, "max_frame_ms", 10 <= self.max_frame_ms <= 5000, f"must be 10..5000, got {self.max_frame_ms}")
        check(path, "send_queue_messages", 8 <= self.send_queue_messages <= 100_000, "must be 8..100000")
        check(path, "max_upload_bytes", 1024 <= self.max_upload_bytes <= 1024**3, "must be 1024..1073741824")
        check(path, "max_text_chars", self.max_text_chars >= 1, "must be >= 1")
        for origin in self.allowed_origins:
            check(
                path,
                "allowed_origins",
                origin == "*" or (origin.startswith(("http://", "https://")) and not origin.endswith("/")),
                f"each must be '*' or scheme://host[:port] without a trailing slash, got {origin!r}",
            )
        check(path, "request_timeout_seconds", self.request_timeout_seconds > 0, "must be > 0")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"
