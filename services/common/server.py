"""Server bootstrap shared by every service: grpc.aio server, grpc.health.v1, reflection, /metrics, drain.

Life of a service process:
  1. config loaded and validated (a bad field stops the process here, exit code 2, message naming it);
  2. port bound, health NOT_SERVING (but ``voicefleet.liveness`` SERVING: the process is alive), reflection and
     metrics up;
  3. ``start()`` loads and warms the engines; then health SERVING for the service and each gRPC service name, and
     from then on it stays true (services/common/health.py): a model service's deep probe turns it NOT_SERVING while
     its engine is wedged; the router's per-service names follow its backends;
  4. SIGTERM/SIGINT: health NOT_SERVING at once, a short notice for watchers, then in-flight streams get up to
     ``grace_seconds`` to finish before the server stops and ``stop()`` releases the engines.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.common import security
from services.common.config import Config, ConfigError, load_config
from services.common.config.base import ServerConfig
from services.common.health import LIVENESS, DeepProbe, Health, HealthServicer, Readiness, hang_while_file_exists
from services.common.metrics import start_metrics_server
from services.common.rpc import ParseRequests, RequestIdFilter, wrap_servicer

log = logging.getLogger("voicefleet.server")


@dataclass
class Servicer:
    """One gRPC service implementation and how to add it to a server."""

    add_to_server: Callable[[object, grpc.aio.Server], None]
    implementation: object
    full_name: str  # e.g. "voice.v1.Synthesizer"


async def _noop() -> None:
    return None


@dataclass
class ServiceParts:
    """What a service brings to the shared bootstrap."""

    servicers: list[Servicer]
    start: Callable[[], Awaitable[None]] = _noop
    stop: Callable[[], Awaitable[None]] = _noop
    extra: dict = field(default_factory=dict)
    # Model services: a tiny real request through the engine, run by the deep probe (services/common/health.py);
    # returns a reason when it skipped (the model is off its device), None when it passed.
    probe: Callable[[], Awaitable[str | None]] | None = None
    # The engines that serve requests: a chaos drill (chaos_hang_file) wedges their calls.
    engines: list = field(default_factory=list)
    # Readiness the service computes itself for some of its names (the router: from its backends).
    readiness: Readiness | None = None


def log_handler(service: str, stream=None) -> logging.Handler:
    """The process's log lines (stderr by default); a line written while serving an RPC names its request
    (" request_id=..." after the logger's name)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(logging.Formatter(f"%(asctime)s {service} %(levelname)s %(name)s%(request)s: %(message)s"))
    return handler


def setup_logging(service: str, level: str) -> None:
    logging.basicConfig(level=level.upper(), handlers=[log_handler(service)])


def add_servicers(server: grpc.aio.Server, name: str, servicers: list[Servicer]) -> None:
    """Register each servicer with every RPC it implements wrapped by ``rpc`` (errors, metrics, request ids; the RPC
    names come from the generated service descriptors), labelled ``name`` in metrics."""
    for s in servicers:
        s.add_to_server(wrap_servicer(name, s.implementation, s.full_name), server)


async def serve(name: str, server_config: ServerConfig, parts: ServiceParts) -> None:
    options = [
        ("grpc.max_receive_message_length", server_config.max_message_bytes),
        ("grpc.max_send_message_length", server_config.max_message_bytes),
        ("grpc.so_reuseport", 0),
        # The router keeps its backend channels alive with a ping every 10 s, also while only a health Watch (no
        # data) is open. gRPC's server default (one ping per 5 min without data, 2 strikes) answers that with GOAWAY
        # "too_many_pings" after ~30 s, which drops every call in flight on that channel (seen on long Converse
        # streams). Accept pings every 5 s.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
        ("grpc.http2.min_ping_interval_without_data_ms", 5000),
    ]
    if server_config.max_connection_age_seconds:
        # No grace limit: a Converse session or recognition stream on an aged connection runs to its end.
        options.append(("grpc.max_connection_age_ms", int(server_config.max_connection_age_seconds * 1000)))
    interceptors = [security.AccessInterceptor(public=name == "router"), ParseRequests(name)]
    server = grpc.aio.server(options=options, interceptors=interceptors)
    health_servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [s.full_name for s in parts.servicers]
    add_servicers(server, name, parts.servicers)
    status = Health(name, health_servicer, names)
    await status.publish()  # NOT_SERVING until warmed up
    await health_servicer.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
    if server_config.chaos_hang_file:
        hang_while_file_exists(server_config.chaos_hang_file, parts.engines, name)
        log.warning("%s: chaos drills on: engine calls wait while %s exists", name, server_config.chaos_hang_file)
    reflection.enable_server_reflection(
        (*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
    )
    try:
        # mTLS (when on) is for model services' ports; the router's public port takes bearer tokens instead.
        credentials = security.server_credentials(require_client_cert=security.settings().mtls and name != "router")
        if credentials is None:
            server.add_insecure_port(server_config.address)
        else:
            server.add_secure_port(server_config.address, credentials)
    except RuntimeError as e:
        raise SystemExit(
            f"{name}: cannot listen on {server_config.address} ({e}); is the port in use? set {name}.port"
        ) from None
    await server.start()
    health_only = await _serve_health_only(health_servicer, server_config, name)
    start_metrics_server(server_config.metrics_port, server_config.host)
    log.info("%s listening on %s (metrics :%s); warming up", name, server_config.address, server_config.metrics_port)

    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)

    starting = asyncio.create_task(parts.start())
    waiting = asyncio.create_task(stop_requested.wait())
    done, _ = await asyncio.wait({starting, waiting}, return_when=asyncio.FIRST_COMPLETED)
    probing = None
    if starting in done:
        starting.result()  # a failed warm-up stops the process with its error
        if parts.readiness is not None:
            status.follow(parts.readiness)
        status.started = True
        await status.publish()
        log.info("%s SERVING on %s", name, server_config.address)
        if parts.probe is not None and server_config.health_probe_interval_seconds > 0:
            probe = DeepProbe(
                status,
                parts.probe,
                server_config.health_probe_interval_seconds,
                server_config.health_probe_deadline_ms / 1000,
                server_config.health_probe_failures,
            )
            probing = asyncio.create_task(probe.run(), name=f"deep-probe-{name}")
        await waiting
    else:
        starting.cancel()
    if probing is not None:
        probing.cancel()

    log.info("%s draining: NOT_SERVING, %.1fs grace for in-flight streams", name, server_config.grace_seconds)
    await health_servicer.enter_graceful_shutdown()
    await asyncio.sleep(server_config.drain_notice_seconds)
    await server.stop(server_config.grace_seconds)
    if health_only is not None:
        await health_only.stop(0)
    await parts.stop()
    log.info("%s stopped", name)


async def _serve_health_only(health_servicer, server_config: ServerConfig, name: str):
    """``health_port``: the same grpc.health statuses on a plaintext port of their own (Kubernetes' gRPC probes
    cannot speak TLS); nothing else is served there."""
    if not server_config.health_port:
        return None
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    address = f"{server_config.host}:{server_config.health_port}"
    try:
        server.add_insecure_port(address)
    except RuntimeError as e:
        raise SystemExit(
            f"{name}: cannot listen on {address} ({e}); is the port in use? set {name}.health_port"
        ) from None
    await server.start()
    return server


SUPERVISOR_PID_ENV = "VOICEFLEET_SUPERVISOR_PID"


def die_with_supervisor() -> None:
    """A fleet member started by `voicefleet up` (which sets VOICEFLEET_SUPERVISOR_PID) gets SIGTERM, a normal drain,
    when that process dies, so a supervisor killed with -9 leaves no members holding the fleet's ports. Linux prctl
    (PR_SET_PDEATHSIG, kept across exec); elsewhere a no-op. Set here, in the child, rather than in a preexec_fn: a
    fork that runs Python while gRPC threads run in the parent can abort the child."""
    parent = os.environ.get(SUPERVISOR_PID_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # the supervisor died before the signal was armed
        raise SystemExit(f"the voicefleet supervisor (pid {parent}) is gone; not starting")


def load_service_config(name: str, argv: list[str] | None = None) -> Config:
    """The start of every fleet process ``python -m services.<name> [--config PATH]``: die with the supervisor, read
    the config and the security files; a bad one exits 2 naming the field."""
    die_with_supervisor()
    main = sys.modules.get("__main__")
    module = getattr(getattr(main, "__spec__", None), "parent", "") or f"services.{name}"  # services.residency runs one
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=f"voicefleet {name} service")
    parser.add_argument("--config", help="fleet config file (default: VOICEFLEET_CONFIG or the bundled default)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        security.configure(config.security)
        security.check_files()
    except ConfigError as e:
        print(f"{name}: bad configuration: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    return config


def run_service(name: str, build: Callable[[Config], ServiceParts], argv: list[str] | None = None) -> None:
    """Entry point of a service process: ``python -m services.<name> [--config PATH]``."""
    config = load_service_config(name, argv)
    section: ServerConfig = getattr(config, name)
    setup_logging(name, section.log_level)

    async def main() -> None:
        parts = build(config)
        await serve(name, section, parts)

    asyncio.run(main())
