"""A fleet with mutual TLS, a bearer token on the router and a fleet token (real certificates made by openssl here):
clients without the token are refused with a clear status, fleet-only RPCs refuse outsiders, plaintext is refused,
and the fleet itself works (the router reaches TLS backends; model services hold GPU leases over the fleet channel; the
gateway serves HTTPS with the same certificate)."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from services.cli.fleet import free_port
from tests.conftest import start_fleet
from tests.speech import INTELLIGIBLE, intelligible
from voice.v1 import gpu_pb2, gpu_pb2_grpc, synthesizer_pb2, synthesizer_pb2_grpc

TOKEN = "speak-friend-and-enter"
FLEET_TOKEN = "fleet-internal-secret"


def make_pki(d: Path) -> dict[str, str]:
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=voicefleet-test-ca",
    )
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "svc.key", "-out", "svc.csr", "-subj", "/CN=localhost")
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    run(
        "x509",
        "-req",
        "-in",
        "svc.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "svc.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    )
    return {"tls_cert": str(d / "svc.pem"), "tls_key": str(d / "svc.key"), "tls_ca": str(d / "ca.pem")}


@pytest.fixture(scope="module")
def secure_fleet(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    pki = make_pki(d)
    fleet = start_fleet(
        d,
        services=("cosyvoice_tts", "router", "gateway"),
        security={**pki, "mtls": True, "bearer_tokens": [TOKEN], "fleet_token": FLEET_TOKEN},
        residency={"enabled": True},
        cosyvoice_tts={"health_port": free_port()},
        # Members hold GpuLeases streams open until the router ends them: a SIGTERMed router drains its whole
        # grace (5 s) at teardown. No test here stops the router while a call is in flight.
        router={"health_port": free_port(), "grace_seconds": 1},
    )
    yield fleet, pki
    fleet.fleet.stop()


def tls_channel(address: str, pki: dict, client_cert: bool = False) -> grpc.Channel:
    ca = Path(pki["tls_ca"]).read_bytes()
    if client_cert:
        creds = grpc.ssl_channel_credentials(ca, Path(pki["tls_key"]).read_bytes(), Path(pki["tls_cert"]).read_bytes())
    else:
        creds = grpc.ssl_channel_credentials(ca)
    return grpc.secure_channel(address, creds)


def synthesize(channel, metadata=()):
    stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
    return list(stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text="Hello there."), metadata=metadata, timeout=30))


def code_of(fn) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value.code(), err.value.details()


def test_bearer_token_on_the_public_port(secure_fleet):
    fleet, pki = secure_fleet
    with tls_channel(fleet.address("router"), pki) as channel:
        code, details = code_of(lambda: synthesize(channel))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "Bearer" in details
        code, _ = code_of(lambda: synthesize(channel, [("authorization", "Bearer wrong")]))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        # With the token, speech flows: the router reached its TLS backend over the fleet channel.
        replies = synthesize(channel, [("authorization", f"Bearer {TOKEN}")])
        assert b"".join(r.audio.data for r in replies)


def test_plaintext_is_refused(secure_fleet):
    fleet, _ = secure_fleet
    with grpc.insecure_channel(fleet.address("router")) as channel:
        code, _ = code_of(lambda: synthesize(channel, [("authorization", f"Bearer {TOKEN}")]))
    assert code == grpc.StatusCode.UNAVAILABLE


def test_health_port_tells_health_in_plaintext_and_nothing_else(secure_fleet):
    """Kubernetes' gRPC probes cannot speak TLS: health_port answers grpc.health in plaintext, and only that."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    fleet, _ = secure_fleet
    for name in ("cosyvoice_tts", "router"):
        with grpc.insecure_channel(f"127.0.0.1:{getattr(fleet.config, name).health_port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "voicefleet.liveness", "voice.v1.Synthesizer"):
                answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING, (name, service)
            code, _ = code_of(lambda channel=channel: synthesize(channel, [("authorization", f"Bearer {TOKEN}")]))
            assert code == grpc.StatusCode.UNIMPLEMENTED, name


def test_lease_rpcs_are_for_fleet_services_only(secure_fleet):
    fleet, pki = secure_fleet
    with tls_channel(fleet.address("router"), pki) as channel:
        leases = gpu_pb2_grpc.GpuLeasesStub(channel)
        auth = [("authorization", f"Bearer {TOKEN}")]  # a valid public token is not enough
        code, details = code_of(lambda: leases.ListLeases(gpu_pb2.ListLeasesRequest(), metadata=auth, timeout=10))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "fleet services only" in details
        table = leases.ListLeases(
            gpu_pb2.ListLeasesRequest(), metadata=[("x-voicefleet-fleet-token", FLEET_TOKEN)], timeout=10
        )
    # cosyvoice_tts holds its lease through the fleet channel (TLS + client cert + fleet token).
    assert [lease.holder for lease in table.leases] == ["cosyvoice_tts"]


def test_model_services_need_a_client_certificate_and_the_fleet_token(secure_fleet):
    fleet, pki = secure_fleet
    address = fleet.address("cosyvoice_tts")
    with tls_channel(address, pki, client_cert=False) as channel:  # mTLS: no client certificate, no connection
        code, _ = code_of(lambda: synthesize(channel))
        assert code == grpc.StatusCode.UNAVAILABLE
    with tls_channel(address, pki, client_cert=True) as channel:
        code, details = code_of(lambda: synthesize(channel, [("authorization", f"Bearer {TOKEN}")]))
        assert code == grpc.StatusCode.PERMISSION_DENIED  # only the router and fleet services call model services
        control = gpu_pb2_grpc.ModelControlStub(channel)
        code, _ = code_of(lambda: control.GetModelStatus(gpu_pb2.GetModelStatusRequest(), timeout=10))
        assert code == grpc.StatusCode.PERMISSION_DENIED
        status = control.GetModelStatus(
            gpu_pb2.GetModelStatusRequest(), metadata=[("x-voicefleet-fleet-token", FLEET_TOKEN)], timeout=10
        ).status
        assert status.residency == gpu_pb2.RESIDENCY_RESIDENT and status.lease_epoch > 0


def test_cli_uses_tls_and_the_token_from_the_config(secure_fleet, tmp_path):
    import sys

    fleet, _ = secure_fleet
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "--config",
            str(fleet.config_path),
            "speak",
            "Hello.",
            "-o",
            str(tmp_path / "o.wav"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "time to first audio" in result.stdout


def test_gateway_serves_https_with_the_fleet_certificate_and_reaches_the_tls_router(secure_fleet):
    """The gateway: HTTPS with security.tls_cert, the client's bearer token checked, and the router (TLS, mTLS, fleet
    token) reached through the fleet channel."""
    fleet, pki = secure_fleet
    address = fleet.address("gateway")
    context = ssl.create_default_context(cafile=pki["tls_ca"])
    text = "The weather today is sunny and warm."
    body = json.dumps({"input": text, "response_format": "pcm"}).encode()

    def speech(scheme: str, token: str | None):
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        request = urllib.request.Request(f"{scheme}://{address}/v1/audio/speech", data=body, headers=headers)
        with urllib.request.urlopen(request, timeout=60, context=context if scheme == "https" else None) as reply:
            return reply.status, reply.read()

    status, pcm = speech("https", TOKEN)
    assert status == 200 and len(pcm) > 24_000  # audio from cosyvoice_tts behind the TLS router
    error, heard = intelligible(text, pcm, 24_000)  # OpenAI's pcm: s16le mono at 24 kHz
    assert error <= INTELLIGIBLE, f"{text!r} heard as {heard!r} (WER {error:.2f})"
    with pytest.raises(urllib.error.HTTPError) as refused:
        speech("https", None)
    assert refused.value.code == 401
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        speech("http", TOKEN)  # plaintext HTTP on the TLS port is not served
