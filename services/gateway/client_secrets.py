"""Realtime client secrets: short-lived keys a browser or phone app opens Realtime sessions with, so it never holds
the real bearer token (OpenAI's ``POST /v1/realtime/client_secrets``; docs/gateway.md#client-secrets).

An app's backend mints one with its real token: ``{"expires_after": {"anchor": "created_at", "seconds": 600},
"session": {...}}`` -> ``{"value": "ek_...", "expires_at": <unix s>, "session": {...}}``. The session is checked as a
``session.update`` is (realtime_config.apply_update: a bad field is refused naming its param) and is the settings of
every session the secret opens. As OpenAI's, a secret opens any number of sessions until it expires; a session it
opened lives on after that. Secrets live in this process only (the gateway is one process; a restart forgets them,
and a replica knows only its own), at most ``gateway.max_client_secrets`` at once.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from services.gateway.realtime_config import RealtimeError, RealtimeSession, apply_update

PREFIX = "ek_"  # what OpenAI's client secrets look like; a bearer token with it is checked as a client secret
MIN_SECONDS, MAX_SECONDS = 10, 7200  # expires_after.seconds, as OpenAI bounds it
REQUEST_FIELDS = ("expires_after", "session")


@dataclass(frozen=True)
class ClientSecret:
    value: str
    expires_at: int  # unix seconds, as the response says it
    deadline: float  # monotonic: when it stops opening sessions
    settings: RealtimeSession  # the session it opens (a fresh id each time: ClientSecrets.session_for)
    token: str  # the bearer token it was minted with: forwarded to the router for the sessions it opens
    model_fixed: bool = False  # its session named a model: a connection's URL may not name another


class SecretRefused(Exception):
    """A client secret that opens nothing: ``code`` is ``invalid_client_secret`` or ``expired_client_secret``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class ClientSecrets:
    """The live client secrets of this gateway process, bounded; expired ones are dropped as new ones come."""

    def __init__(
        self,
        default_seconds: float,
        limit: int,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self.default_seconds = default_seconds
        self.limit = limit
        self.clock = clock
        self.wall = wall
        self._live: OrderedDict[str, ClientSecret] = OrderedDict()  # in order of deadline when TTLs are alike

    def __len__(self) -> int:
        self._drop_expired()
        return len(self._live)

    def _drop_expired(self) -> None:
        now = self.clock()
        for value in [v for v, s in self._live.items() if s.deadline <= now]:
            del self._live[value]

    def mint(self, body: dict, token: str, settings: RealtimeSession) -> ClientSecret:
        """A new secret for a request ``body`` whose session was already checked into ``settings``
        (``request_session``). RealtimeError naming the param for a bad expires_after; SecretsFull when at the
        limit."""
        seconds = expiry_seconds(body, self.default_seconds)
        self._drop_expired()
        if len(self._live) >= self.limit:
            raise SecretsFull(self.limit)
        now_wall, now = self.wall(), self.clock()
        secret = ClientSecret(
            value=PREFIX + secrets.token_urlsafe(24),
            expires_at=math.ceil(now_wall + seconds),
            deadline=now + seconds,
            settings=dataclasses.replace(settings, session_id=_session_id()),
            token=token,
            model_fixed=isinstance(body.get("session"), dict) and bool(body["session"].get("model")),
        )
        self._live[secret.value] = secret
        return secret

    def check(self, value: str) -> ClientSecret:
        """The live secret ``value`` names; SecretRefused when it is unknown or expired."""
        secret = self._live.get(value)
        if secret is None:
            raise SecretRefused(
                "invalid_client_secret",
                "unknown client secret: mint one with POST /v1/realtime/client_secrets (it lives in the gateway that"
                " minted it, until it expires or the gateway restarts)",
            )
        if secret.deadline <= self.clock():
            del self._live[value]
            raise SecretRefused(
                "expired_client_secret",
                f"client secret expired at {secret.expires_at} (unix s): mint a new one with"
                " POST /v1/realtime/client_secrets",
            )
        return secret

    @staticmethod
    def session_for(secret: ClientSecret, url_model: str) -> RealtimeSession:
        """The settings of one new session the secret opens (its own session id). The model is the secret's when its
        session named one (a URL naming another is refused: RealtimeError, param model), else the URL's."""
        model = secret.settings.model
        if url_model and url_model != model:
            if secret.model_fixed:
                raise RealtimeError(
                    f"Invalid value for 'model': the client secret's session runs {model!r}; connect with"
                    f" model={model} (or without a model)",
                    "model",
                )
            model = url_model
        return dataclasses.replace(secret.settings, model=model, session_id=_session_id())


def _session_id() -> str:
    return f"sess_{uuid.uuid4().hex[:20]}"


class SecretsFull(Exception):
    def __init__(self, limit: int):
        super().__init__(f"{limit} client secrets are live (gateway.max_client_secrets); retry when some expire")


def check_request(body) -> dict:
    """The request body as an object with known fields only; RealtimeError naming the field otherwise."""
    if not isinstance(body, dict):
        raise RealtimeError('the body must be a JSON object: {"expires_after": {...}, "session": {...}}', None)
    for name in body:
        if name not in REQUEST_FIELDS:
            raise RealtimeError(
                f"Unknown parameter: '{name}'; known: {', '.join(REQUEST_FIELDS)}.", name, "unknown_parameter"
            )
    return body


def expiry_seconds(body: dict, default_seconds: float) -> float:
    """``expires_after`` -> seconds (OpenAI's shape: anchor created_at, seconds 10..7200); the default when absent."""
    expires = body.get("expires_after")
    if expires is None:
        return default_seconds
    if not isinstance(expires, dict):
        raise RealtimeError(
            "Invalid type for 'expires_after': an object {anchor, seconds}.", "expires_after", "invalid_type"
        )
    for name in expires:
        if name not in ("anchor", "seconds"):
            raise RealtimeError(
                f"Unknown parameter: 'expires_after.{name}'.", f"expires_after.{name}", "unknown_parameter"
            )
    if expires.get("anchor", "created_at") != "created_at":
        raise RealtimeError(
            "Invalid value for 'expires_after.anchor': only 'created_at' is supported.", "expires_after.anchor"
        )
    if "seconds" not in expires:
        return default_seconds
    seconds = expires["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise RealtimeError(
            f"Invalid value for 'expires_after.seconds': an integer {MIN_SECONDS}..{MAX_SECONDS}, got {seconds!r:.20}.",
            "expires_after.seconds",
        )
    return float(seconds)


def request_session(body: dict, voices: list[str] | None, max_text_chars: int) -> RealtimeSession:
    """The settings a secret's sessions open with: its ``session`` checked like a first session.update (a realtime
    session with the defaults when absent). ``session.model`` is the model its sessions run (any name but a fleet
    backend's takes the default route, as in the URL)."""
    session = body.get("session")
    if session is None:
        session = {"type": "realtime"}
    if not isinstance(session, dict):
        raise RealtimeError("Invalid type for 'session': an object.", "session", "invalid_type")
    model = session.get("model") or "gpt-realtime"
    if not isinstance(model, str) or len(model) > 100:
        raise RealtimeError("Invalid value for 'session.model': a model name.", "session.model")
    return apply_update(RealtimeSession(model=model, session_id=""), session, False, voices, max_text_chars)
