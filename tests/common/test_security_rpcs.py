"""Every voice.v1 RPC on every gRPC port of the fleet, tried from outside with tokens set (docs/security.md).

The RPCs come from the generated voice.v1 file descriptors (gen/python) and which server serves which service from
each server's reflection, so a new RPC or service is covered by itself. Each server starts once (the CPU fleet's
engines; no brain: no call here asks for a reply), with bearer tokens and a fleet token:

- without credentials every RPC is refused before any work: a streaming request that never sends a message is still
  refused (the check does not wait for input), an empty (invalid) request gets the refusal rather than the
  servicer's INVALID_ARGUMENT, and no servicer counted the call in voicefleet_requests_total;
- with them every RPC is served: its servicer answers (OK, or its own status for the empty request);
- a valid bearer token does not open the fleet-only RPCs (GpuLeases, ModelControl) or model services;
- health and reflection stay open (answered without a token).

A missing PEM file stopping a service (naming the field) is checked here too: one short process start.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
import threading

import grpc
import pytest
import yaml
from google.protobuf import message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import voice.v1
from services.common import security
from services.common.config import Config
from services.common.config.base import ConfigError
from services.common.config.security import SecurityConfig
from services.common.security import FLEET_TOKEN_HEADER
from tests.conftest import start_fleet, wait_until

TOKEN = "speak-friend-and-enter"
FLEET_TOKEN = "fleet-internal-secret"
# Every gRPC member of the fleet (the brain and the gateway speak HTTP: the gateway's tokens are in test_gateway.py).
MEMBERS = ("router", "cosyvoice_tts", "qwen_tts", "asr", "moss_sts", "lease_authority")
HTTP_MEMBERS = ("brain", "gateway")
PUBLIC = "router"  # the one port where bearer tokens open the public RPCs
FLEET_ONLY = ("voice.v1.GpuLeases", "voice.v1.ModelControl")
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
CALL_TIMEOUT_S = 10.0

pytestmark = pytest.mark.timeout(300)


def voice_services() -> dict:
    """Every service in the generated voice.v1 modules: full name -> ServiceDescriptor."""
    services = {}
    for module in pkgutil.iter_modules(voice.v1.__path__):
        if module.name.endswith("_pb2"):
            descriptor = importlib.import_module(f"voice.v1.{module.name}").DESCRIPTOR
            services.update({s.full_name: s for s in descriptor.services_by_name.values()})
    return services


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = start_fleet(
        tmp_path_factory.mktemp("tokens"),
        services=MEMBERS,
        security={"bearer_tokens": [TOKEN], "fleet_token": FLEET_TOKEN},
    )
    yield running
    running.fleet.stop()


def served(address: str) -> list[str]:
    """The services a server lists through reflection, asked without any token (reflection stays open)."""
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = next(iter(stub.ServerReflectionInfo(iter([request]), timeout=CALL_TIMEOUT_S)))
    return [s.name for s in reply.list_services_response.service]


def call(channel: grpc.Channel, method, metadata, send_nothing: threading.Event | None = None):
    """One call of ``method`` with an empty request (a stream: one empty message; with ``send_nothing``, a stream
    that sends no message at all until the event is set). The status code and details."""
    request = message_factory.GetMessageClass(method.input_type)()
    path = f"/{method.containing_service.full_name}/{method.name}"
    kwargs = {
        "request_serializer": type(request).SerializeToString,
        "response_deserializer": message_factory.GetMessageClass(method.output_type).FromString,
    }

    def requests():
        if send_nothing is not None:
            send_nothing.wait(CALL_TIMEOUT_S + 5)
            return
        yield request

    try:
        if method.client_streaming and method.server_streaming:
            for _ in channel.stream_stream(path, **kwargs)(requests(), metadata=metadata, timeout=CALL_TIMEOUT_S):
                pass
        elif method.client_streaming:
            channel.stream_unary(path, **kwargs)(requests(), metadata=metadata, timeout=CALL_TIMEOUT_S)
        elif method.server_streaming:
            for _ in channel.unary_stream(path, **kwargs)(request, metadata=metadata, timeout=CALL_TIMEOUT_S):
                pass
        else:
            channel.unary_unary(path, **kwargs)(request, metadata=metadata, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def matrix(fleet) -> list[tuple[str, object]]:
    """(member, method) for every voice.v1 RPC of every service each member serves."""
    services = voice_services()
    pairs = []
    for name in MEMBERS:
        for service in served(fleet.address(name)):
            if service.startswith("voice."):
                assert service in services, f"{name} serves {service}, which gen/python's voice.v1 does not define"
                pairs += [(name, m) for m in services[service].methods]
    return pairs


def test_every_rpc_refuses_a_call_without_credentials_and_serves_one_with_them(fleet):
    # A new fleet member (a config section with a port) is one this test must start.
    members = {n for n, f in Config.model_fields.items() if "port" in f.annotation.model_fields}
    assert members - set(HTTP_MEMBERS) == set(MEMBERS)
    pairs = matrix(fleet)
    # Every voice.v1 service is served somewhere here: a new service without a server in this fleet fails.
    assert {m.containing_service.full_name for _, m in pairs} == set(voice_services())
    kinds = {(m.client_streaming, m.server_streaming) for _, m in pairs}
    assert kinds == {(False, False), (False, True), (True, True)}, kinds  # voice.v1 has no client-streaming-only RPC

    problems = []
    channels = {name: grpc.insecure_channel(fleet.address(name)) for name in MEMBERS}
    for name, method in pairs:
        fleet_only = name != PUBLIC or method.containing_service.full_name in FLEET_ONLY
        expected = grpc.StatusCode.PERMISSION_DENIED if fleet_only else grpc.StatusCode.UNAUTHENTICATED
        where = f"{name} {method.full_name}"
        tries = [[]]  # no credentials
        if fleet_only:  # a valid public token is not the fleet token
            tries.append([("authorization", f"Bearer {TOKEN}")])
        for metadata in tries:
            code, details = call(channels[name], method, metadata)
            if code != expected:
                problems.append(f"{where} {metadata}: {code.name} {details!r}, expected {expected.name}")
        if method.client_streaming:  # refused before the first message: the check waits for no input
            nothing = threading.Event()
            code, details = call(channels[name], method, [], send_nothing=nothing)
            nothing.set()
            if code != expected:
                problems.append(f"{where} (no message sent): {code.name} {details!r}, expected {expected.name}")
    assert not problems, "\n".join(problems)

    credentials = {
        True: [(FLEET_TOKEN_HEADER, FLEET_TOKEN)],
        False: [("authorization", f"Bearer {TOKEN}")],
    }
    answers = {}
    try:
        for name, method in pairs:
            fleet_only = name != PUBLIC or method.containing_service.full_name in FLEET_ONLY
            code, details = call(channels[name], method, credentials[fleet_only])
            answers[(name, method.full_name)] = code
            if code in REFUSED or code in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.DEADLINE_EXCEEDED):
                problems.append(f"{name} {method.full_name} with credentials: {code.name} {details!r}")
            # Served: the servicer ran and counted the call with the code the client got (an abort sends the
            # status before the servicer's bookkeeping ends: wait for the count).
            counted = wait_until(
                lambda name=name, method=method, code=code: (
                    fleet.metric(name, "voicefleet_requests_total", method=method.name, code=code.name) >= 1
                ),
                timeout=10,
            )
            if not counted:
                problems.append(f"{name} {method.full_name}: {code.name} not counted by its servicer")
    finally:
        for channel in channels.values():
            channel.close()
    assert not problems, "\n".join(problems)

    # No refused call reached a servicer (checked last, so that a late count would be seen): the servicer counts
    # every call it sees with its final code.
    for name in MEMBERS:
        for code in REFUSED:
            assert fleet.metric(name, "voicefleet_requests_total", code=code.name) == 0, (name, code.name)
    print(f"\n{len(pairs)} RPC x server pairs: " + ", ".join(f"{n} {m}={c.name}" for (n, m), c in answers.items()))


def test_health_and_reflection_stay_open(fleet):
    """Probes carry no token: grpc.health and reflection answer on every port without one."""
    for name in MEMBERS:
        assert "grpc.reflection.v1alpha.ServerReflection" in served(fleet.address(name)), name
        with grpc.insecure_channel(fleet.address(name)) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=CALL_TIMEOUT_S).status
            assert status == health_pb2.HealthCheckResponse.SERVING, name


def test_a_missing_pem_file_stops_the_service_naming_the_field(tmp_path):
    """A real service start for one field (exit code 2, the message naming it); the same start-up check for the other
    two in process (one process start is what costs here)."""
    present = tmp_path / "present.pem"
    present.write_text("-----BEGIN CERTIFICATE-----\n")  # readable: the check at start is that each file reads
    missing = tmp_path / "missing.pem"

    def settings(field: str) -> dict:
        return {**{f: str(present) for f in ("tls_cert", "tls_key", "tls_ca")}, field: str(missing)}

    config = tmp_path / "voicefleet.yaml"
    config.write_text(yaml.safe_dump({"security": settings("tls_cert")}))
    result = subprocess.run(
        [sys.executable, "-m", "services.cosyvoice_tts", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert f"security.tls_cert: cannot read {missing}" in result.stderr, result.stderr

    before = security.settings()
    try:
        for field in ("tls_key", "tls_ca"):
            security.configure(SecurityConfig(**settings(field)))
            with pytest.raises(ConfigError, match=re.escape(f"security.{field}: cannot read {missing}")):
                security.check_files()
    finally:
        security.configure(before)
