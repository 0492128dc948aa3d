"""Transport security and access control for every fleet port (docs/security.md).

- TLS: with ``security.tls_cert``/``tls_key`` set, every service listens with TLS; ``tls_ca`` is the fleet's CA
  that clients verify servers with. ``mtls: true`` makes model services require client certificates signed by it.
- Public port: with ``security.bearer_tokens`` set, the router's public RPCs need ``authorization: Bearer <token>``
  (UNAUTHENTICATED otherwise). Health and reflection stay open for probes.
- Fleet-only RPCs: with ``security.fleet_token`` set, GpuLeases and ModelControl need the fleet token in
  ``x-voicefleet-fleet-token`` (PERMISSION_DENIED otherwise), and every other RPC on a model service needs it too,
  so only the router and fleet services reach them. Fleet clients (the router's backends, lease holders) add it.

Settings are process-wide: ``configure()`` runs once at process start (services.common.server.run_service).
"""

from __future__ import annotations

import collections
from pathlib import Path

import grpc

from services.common.config.base import ConfigError
from services.common.config.security import SecurityConfig

FLEET_TOKEN_HEADER = "x-voicefleet-fleet-token"
OPEN_SERVICES = (
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
)
FLEET_ONLY_SERVICES = ("voice.v1.GpuLeases", "voice.v1.ModelControl")

_settings = SecurityConfig()


def configure(settings: SecurityConfig) -> None:
    global _settings
    _settings = settings


def settings() -> SecurityConfig:
    return _settings


def _read(field: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"security.{field}: cannot read {path}: {e.strerror}") from None


def server_credentials(require_client_cert: bool) -> grpc.ServerCredentials | None:
    s = _settings
    if not s.tls_cert:
        return None
    ca = _read("tls_ca", s.tls_ca) if s.tls_ca else None
    return grpc.ssl_server_credentials(
        [(_read("tls_key", s.tls_key), _read("tls_cert", s.tls_cert))],
        root_certificates=ca if require_client_cert else None,
        require_client_auth=require_client_cert,
    )


def channel_credentials(settings: SecurityConfig | None = None) -> grpc.ChannelCredentials | None:
    s = settings or _settings
    if not (s.tls_ca or s.tls_cert):
        return None
    ca = _read("tls_ca", s.tls_ca) if s.tls_ca else None
    if s.tls_cert:  # present our certificate too (mTLS between fleet services)
        return grpc.ssl_channel_credentials(ca, _read("tls_key", s.tls_key), _read("tls_cert", s.tls_cert))
    return grpc.ssl_channel_credentials(ca)


class _FleetToken(grpc.AuthMetadataPlugin):
    """Puts the fleet token on every call of a channel. (Call credentials, not a client interceptor: grpc aio drops
    interceptor-added metadata on stream-stream calls, such as the lease stream.)"""

    def __init__(self, token: str):
        self.token = token

    def __call__(self, context, callback):
        callback(((FLEET_TOKEN_HEADER, self.token),), None)


def fleet_channel(address: str, options=None) -> grpc.aio.Channel:
    """An aio channel from one fleet service to another: TLS when configured, the fleet token when set.

    The token rides on call credentials, which need a secure transport: TLS, or (without TLS) gRPC's local TCP
    credentials, which only connect to loopback addresses — a fleet token never crosses a network in plain text.
    """
    creds = channel_credentials()
    if _settings.fleet_token:
        transport = creds or grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        creds = grpc.composite_channel_credentials(
            transport, grpc.metadata_call_credentials(_FleetToken(_settings.fleet_token))
        )
    if creds is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, creds, options=options)


def client_channel(address: str, token: str | None = None, settings: SecurityConfig | None = None) -> grpc.Channel:
    """A blocking channel for the CLI and the fleet launcher: TLS when configured; the bearer token (default: the
    first configured one, since the CLI runs beside the fleet's config) on every call. ``settings`` overrides the
    process-wide settings (the launcher checks fleets with their own config)."""
    s = settings or _settings
    token = token if token is not None else (s.bearer_tokens[0] if s.bearer_tokens else "")
    creds = channel_credentials(s)
    channel = grpc.insecure_channel(address) if creds is None else grpc.secure_channel(address, creds)
    if token:
        channel = grpc.intercept_channel(channel, _SyncBearer(token))
    return channel


class _SyncBearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, token: str):
        self.pair = ("authorization", f"Bearer {token}")

    def _with(self, details):
        return _CallDetails(
            details.method,
            details.timeout,
            [*(details.metadata or ()), self.pair],
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._with(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._with(details), request_iterator)


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


def check_files() -> None:
    """Fail at start, naming the field, when a configured PEM file cannot be read."""
    for field in ("tls_cert", "tls_key", "tls_ca"):
        if getattr(_settings, field):
            _read(field, getattr(_settings, field))


def _deny(handler, code: grpc.StatusCode, message: str):
    async def abort(_request, context):
        await context.abort(code, message)

    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(abort, handler.request_deserializer, handler.response_serializer)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(abort, handler.request_deserializer, handler.response_serializer)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(abort, handler.request_deserializer, handler.response_serializer)
    return grpc.stream_stream_rpc_method_handler(abort, handler.request_deserializer, handler.response_serializer)


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """Bearer tokens on the public port, the fleet token on fleet-only RPCs and on internal ports."""

    def __init__(self, public: bool):
        self.public = public

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        s = _settings
        if handler is None or not (s.bearer_tokens or s.fleet_token):
            return handler
        service = details.method.split("/")[1] if details.method.count("/") >= 2 else ""
        if service in OPEN_SERVICES:
            return handler
        metadata = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        is_fleet = bool(s.fleet_token) and metadata.get(FLEET_TOKEN_HEADER) == s.fleet_token
        if service in FLEET_ONLY_SERVICES or not self.public:
            if s.fleet_token and not is_fleet:
                return _deny(
                    handler,
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"{service} is for fleet services only: send the fleet token in {FLEET_TOKEN_HEADER}",
                )
            return handler
        if s.bearer_tokens and not is_fleet:
            auth = metadata.get("authorization", "")
            if not any(auth == f"Bearer {token}" for token in s.bearer_tokens):
                return _deny(
                    handler,
                    grpc.StatusCode.UNAUTHENTICATED,
                    "missing or unknown bearer token: send 'authorization: Bearer <token>' (security.bearer_tokens)",
                )
        return handler
