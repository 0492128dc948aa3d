"""Server bootstrap as operators see it: health (Check and Watch), reflection, drain on SIGTERM, bad config."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.cli.fleet import write_ephemeral_config
from tests.conftest import start_fleet, wait_until
from voice.v1 import synthesizer_pb2, synthesizer_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_health_per_service_and_reflection(cpu_fleet):
    with cpu_fleet.channel("cosyvoice_tts") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "voice.v1.Synthesizer"):
            assert health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status == SERVING
        with pytest.raises(grpc.RpcError) as err:  # a service this process does not serve must not report health
            health.Check(health_pb2.HealthCheckRequest(service="voice.v1.Recognizer"), timeout=5)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = list(
            reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        )
        names = {s.name for s in replies[0].list_services_response.service}
        assert {"voice.v1.Synthesizer", "grpc.health.v1.Health"} <= names


@pytest.mark.resilience
def test_sigterm_drains_in_flight_streams_then_exits(tmp_path):
    fleet = start_fleet(tmp_path, services=("cosyvoice_tts",))
    member = fleet.fleet.members["cosyvoice_tts"]
    text = " ".join(f"Sentence {i} of the stream that must finish." for i in range(12))
    with fleet.channel("cosyvoice_tts") as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
        seen = []

        def follow():
            try:
                for r in watch:
                    seen.append(r.status)
            except grpc.RpcError:
                pass  # the server went away at the end of the drain

        threading.Thread(target=follow, daemon=True).start()
        assert wait_until(lambda: SERVING in seen)

        call = stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text=text), timeout=60)
        chunks = [next(call)]
        member.process.send_signal(signal.SIGTERM)
        chunks += list(call)  # the in-flight stream completes
        assert call.code() == grpc.StatusCode.OK
        assert chunks[-1].text_span.end_char == len(text), "the stream was cut short"
        assert wait_until(lambda: NOT_SERVING in seen), f"Watch never said NOT_SERVING: {seen}"
        assert member.process.wait(timeout=20) == 0


def test_bad_config_fails_fast_naming_the_field(tmp_path):
    path = write_ephemeral_config(tmp_path, cosyvoice_tts={"port": 70000})
    result = subprocess.run(
        [sys.executable, "-m", "services.cosyvoice_tts", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "cosyvoice_tts.port: must be 1..65535, got 70000" in result.stderr


def test_env_override_reaches_the_process(tmp_path):
    import os

    path = write_ephemeral_config(tmp_path)
    env = {**os.environ, "VOICEFLEET_COSYVOICE_TTS__ENGINE": "tpu"}
    result = subprocess.run(
        [sys.executable, "-m", "services.cosyvoice_tts", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert result.returncode == 2
    assert "cosyvoice_tts.engine: must be 'cpu' or 'gpu', got 'tpu'" in result.stderr


@pytest.mark.resilience
def test_aged_connections_are_replaced_without_cutting_streams(tmp_path):
    """max_connection_age_seconds: after it, the server asks the client to reconnect (so a router balancing over DNS
    resolves again and finds replicas a scale-up added); a stream open across it is not cut."""
    fleet = start_fleet(tmp_path, services=("cosyvoice_tts",), cosyvoice_tts={"max_connection_age_seconds": 1})
    try:
        with fleet.channel("cosyvoice_tts") as channel:
            ready = []
            channel.subscribe(lambda state: ready.append(state) if state == grpc.ChannelConnectivity.READY else None)
            health = health_pb2_grpc.HealthStub(channel)
            watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=120)
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
            checks = []

            def check_until_reconnected_twice() -> bool:
                # unary calls keep working across reconnects: every one answers SERVING
                checks.append(health.Check(health_pb2.HealthCheckRequest(), timeout=5).status)
                return len(ready) >= 3  # the first connection and two replacements, counted by the channel

            assert wait_until(check_until_reconnected_twice, timeout=60, interval=0.2), len(ready)
            assert set(checks) == {health_pb2.HealthCheckResponse.SERVING}, checks
            assert watch.running() and not watch.done(), "the stream opened before the age was cut"
            watch.cancel()
    finally:
        fleet.fleet.stop()
