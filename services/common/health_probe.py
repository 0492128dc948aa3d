"""Readiness probes of fleet members, one implementation for the launcher (services/cli/fleet.py), the CLI
(`voicefleet status`, `--wait`), the supervisor and container healthchecks: grpc.health.v1 for services (the router:
live, and every public service its backends serve callable), a real chat completion for the brain.

``python -m services.common.health_probe NAME [--config PATH]`` checks member NAME of the config on this host
(127.0.0.1 and its configured port) and exits 0 when it is ready, 1 otherwise: the compose healthcheck (the same
names Kubernetes' gRPC probes use), without a separate grpc_health_probe binary in every image.
"""

from __future__ import annotations

import argparse
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import security
from services.common.config import load_config


def check(channel: grpc.Channel, service: str, timeout: float, wait_for_ready: bool = False) -> str:
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout, wait_for_ready=wait_for_ready
        )
    except grpc.RpcError as e:
        return (
            "UNREACHABLE"
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            else e.code().name
        )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def health_status(address: str, timeout: float = 1.0, service: str = "", settings=None) -> str:
    """SERVING / NOT_SERVING / UNREACHABLE / ... for one address (``settings``: that fleet's security section)."""
    with security.client_channel(address, settings=settings) as channel:
        return check(channel, service, timeout)


def router_readiness(
    address: str, timeout: float = 1.0, settings=None, backends: set[str] | None = None
) -> dict[str, str]:
    """The router's health: "" (liveness) and, once it is live, each public service name that its backends serve
    (voice.v1.Synthesizer, ...) -> SERVING / NOT_SERVING / ... ``backends``: only the names these backends serve (the
    fleet's own members; a backend the fleet does not run is not waited for); None: every backend's."""
    from services.common.health import PUBLIC_SERVICES
    from voice.v1 import fleet_pb2, fleet_pb2_grpc

    with security.client_channel(address, settings=settings) as channel:
        answers = {"": check(channel, "", timeout)}
        if answers[""] != "SERVING":
            return answers
        try:
            fleet = fleet_pb2_grpc.FleetStub(channel).GetFleetStatus(fleet_pb2.GetFleetStatusRequest(), timeout=timeout)
        except grpc.RpcError as e:
            return {**answers, "voice.v1.Fleet": e.code().name}
        served = {name for b in fleet.backends if backends is None or b.name in backends for name in b.services}
        for name in PUBLIC_SERVICES:
            if name in served:
                answers[name] = check(channel, name, timeout)
    return answers


def wait_ready(channel: grpc.Channel, service: str, wait_s: float) -> str:
    """Wait up to ``wait_s`` for ``service``'s health on ``channel`` to say SERVING, connecting included (gRPC
    wait-for-ready): a client started with the fleet waits out its warm-up instead of being refused. Returns the
    last status seen (SERVING, or why not)."""
    deadline = time.monotonic() + wait_s
    status = "UNREACHABLE"
    while (remaining := deadline - time.monotonic()) > 0:
        status = check(channel, service, timeout=min(remaining, 2.0), wait_for_ready=True)
        if status not in ("NOT_SERVING", "UNREACHABLE", "SERVICE_UNKNOWN"):
            return status  # SERVING, or an answer that waiting will not change (NOT_FOUND, UNAUTHENTICATED, ...)
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    return status


# Fleet members that are not gRPC services (readiness: a real chat completion; the gateway's /readyz).
HTTP_MEMBERS = {"brain", "gateway"}


def gateway_status(address: str, timeout: float = 1.0, settings=None) -> str:
    """SERVING when the gateway answers /readyz with 200 (it is up and its router answers health SERVING)."""
    import ssl
    import urllib.error
    import urllib.request

    scheme, context = "http", None
    if settings is not None and settings.tls_cert:
        scheme = "https"
        context = ssl.create_default_context(cafile=settings.tls_ca or None)
        context.check_hostname = False  # probes ask 127.0.0.1; the certificate names the service
    try:
        with urllib.request.urlopen(f"{scheme}://{address}/readyz", timeout=max(timeout, 2.0), context=context) as r:
            return "SERVING" if r.status == 200 else "NOT_SERVING"
    except urllib.error.HTTPError:
        return "NOT_SERVING"
    except (urllib.error.URLError, OSError, ValueError):
        return "UNREACHABLE"


def brain_status(address: str, timeout: float = 1.0) -> str:
    """SERVING once the brain has answered one real chat completion (a 1-token reply), not merely listened: a brain
    whose model cannot run (a CPU build it crashes on, say) never reports ready. UNREACHABLE / NOT_SERVING otherwise."""
    import json
    import urllib.error
    import urllib.request

    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}).encode()
    request = urllib.request.Request(
        f"http://{address}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=max(timeout, 5.0)) as reply:
            answer = json.loads(reply.read())
            return "SERVING" if reply.status == 200 and answer.get("choices") else "NOT_SERVING"
    except urllib.error.HTTPError:
        return "NOT_SERVING"
    except (urllib.error.URLError, OSError, ValueError):
        return "UNREACHABLE"


def member_status(name: str, address: str, timeout: float = 1.0, settings=None, fleet: set[str] | None = None) -> str:
    """Readiness of a fleet member: gRPC health for services, a real completion for the brain. The router is ready
    when it is live and every service its backends serve is callable (a backend for it is routable), so "is up"
    means ListVoices lists every TTS service's voices and a call is served."""
    if name == "gateway":
        return gateway_status(address, timeout, settings)
    if name in HTTP_MEMBERS:
        return brain_status(address, timeout)
    if name == "router":
        answers = router_readiness(address, timeout, settings, backends=fleet)
        waiting = [f"{n} {s}" for n, s in answers.items() if n and s != "SERVING"]
        if answers[""] != "SERVING" or not waiting:
            return answers[""]
        return f"NOT_SERVING ({', '.join(waiting)})"
    return health_status(address, timeout, settings=settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.common.health_probe", description=__doc__)
    parser.add_argument("name", help="fleet member to check (router, asr, brain, ...)")
    parser.add_argument("--config", help="fleet config file (default: VOICEFLEET_CONFIG or the bundled default)")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for each answer")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    address = f"127.0.0.1:{getattr(config, args.name).port}"  # a container's member listens on 0.0.0.0
    status = member_status(args.name, address, args.timeout, settings=config.security)
    print(f"{args.name} {address} {status}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
