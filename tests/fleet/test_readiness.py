"""Readiness that means it, against real processes on loopback (docs/architecture.md#health, docs/router.md#health).

One fleet for the module: cosyvoice_tts, qwen_tts, asr and the router. It is launched the way a user's script meets
it: the router first, and at once a client (the CLI, ``voicefleet speak --wait``) and a caller listing voices, then
the model services. Then:

* the client that started calling with the fleet is served after waiting, not refused; ListVoices right after the
  fleet is up lists every TTS service's voices; calls that reached backends while they warmed up ejected none;
* the router's health per service name: a backend stopped turns its name NOT_SERVING (Watch sees it), the others
  stay SERVING; back, SERVING again and callable;
* the deep probe: cosyvoice_tts's engine wedged (its chaos drill file) turns it NOT_SERVING, the router fails over to
  qwen_tts; unwedged, SERVING again and routed to again.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.cli.fleet import LocalFleet, write_ephemeral_config
from services.common import audio
from services.common.config import load_config
from services.common.health_probe import router_readiness
from tests.conftest import RunningFleet, wait_until
from tests.speech import INTELLIGIBLE, intelligible, wer
from voice.v1 import (
    audio_pb2,
    fleet_pb2,
    fleet_pb2_grpc,
    recognizer_pb2,
    recognizer_pb2_grpc,
    routing_pb2,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)

pytestmark = pytest.mark.timeout(300)

SENTENCE = "hello world this is a test"
BROADCAST = routing_pb2.Routing(mode=routing_pb2.ROUTE_MODE_BROADCAST)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# Faults show within seconds: one failure ejects, two recovery probes in a row re-admit.
ROUTER_HEALTH = {
    "eject_after_failures": 1,
    "ejection_seconds": 1.0,
    "max_ejection_seconds": 4.0,
    "recovery_probes": 2,
    "probe_interval_seconds": 0.3,
    "probe_timeout_ms": 3000,
}


LIST_VOICES_FOREVER = """
import sys, time, grpc
from voice.v1 import synthesizer_pb2, synthesizer_pb2_grpc
stub = synthesizer_pb2_grpc.SynthesizerStub(grpc.insecure_channel(sys.argv[1]))
while True:
    try:
        reply = stub.ListVoices(synthesizer_pb2.ListVoicesRequest(), timeout=5)
        print(",".join(sorted({v.service for v in reply.voices})) or "-", flush=True)
    except grpc.RpcError as e:
        print(e.code().name, flush=True)
    time.sleep(0.1)
"""


WATCH_UNTIL_BACK = """
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(sys.argv[1]))
seen = []
for answer in stub.Watch(health_pb2.HealthCheckRequest(service=sys.argv[2]), timeout=150):
    seen.append(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
    print(seen[-1], flush=True)
    if seen[-2:] == ["NOT_SERVING", "SERVING"]:
        break
"""


@dataclass
class Launch:
    running: RunningFleet
    wedge: Path
    cli: subprocess.CompletedProcess | None = None
    cli_output: Path | None = None
    voices_at_up: list = field(default_factory=list)
    warmup_answers: list[str] = field(default_factory=list)  # what ListVoices answered while the fleet warmed up


def check(address: str, service: str) -> int | str:
    with grpc.insecure_channel(address) as channel:
        try:
            request = health_pb2.HealthCheckRequest(service=service)
            return health_pb2_grpc.HealthStub(channel).Check(request, timeout=3).status
        except grpc.RpcError as e:
            return e.code().name


def backends(address: str) -> dict[str, fleet_pb2.BackendStatus]:
    with grpc.insecure_channel(address) as channel:
        reply = fleet_pb2_grpc.FleetStub(channel).GetFleetStatus(fleet_pb2.GetFleetStatusRequest(), timeout=5)
    return {b.name: b for b in reply.backends}


# What the wedge test has spoken: a sentence both CPU voices say clearly (tests/speech.py), checked by the listener.
SPOKEN = "the children are playing in the garden"


def speak(address: str, text: str = SPOKEN, routing=None) -> tuple[bytes, str]:
    with grpc.insecure_channel(address) as channel:
        request = synthesizer_pb2.SynthesizeRequest(
            text=text,
            config=synthesizer_pb2.SynthesisConfig(
                routing=routing, output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=16000)
            ),
        )
        pcm, served_by = b"", ""
        for reply in synthesizer_pb2_grpc.SynthesizerStub(channel).Synthesize(request, timeout=60):
            pcm += reply.audio.data
            served_by = reply.served_by
    return pcm, served_by


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    directory = tmp_path_factory.mktemp("readiness")
    wedge = directory / "wedge-cosyvoice"
    path = write_ephemeral_config(
        directory,
        services=("cosyvoice_tts", "qwen_tts", "asr", "router"),
        cosyvoice_tts={
            "chaos_hang_file": str(wedge),
            "health_probe_interval_seconds": 0.5,
            "health_probe_deadline_ms": 3000,
            "health_probe_failures": 1,
        },
        router={"health": ROUTER_HEALTH, "routes": {"broadcast": ["cosyvoice_tts", "qwen_tts"]}},
    )
    fleet = LocalFleet(load_config(path), str(path), log_dir=directory / "logs")
    result = Launch(RunningFleet(fleet, path), wedge)
    router = fleet.config.router.address
    try:
        fleet.spawn("router")
        assert wait_until(lambda: router_readiness(router)[""] == "SERVING", 60), "router not live"

        # A caller listing voices all through the warm-up (every TTS backend is asked, warming or not). It runs in its
        # own process, like the CLI below: this process forks the members, and a fork while gRPC is busy in another
        # thread here can abort the child before it execs (gRPC's fork handlers: "epoll_wait error").
        lister = subprocess.Popen(
            [sys.executable, "-c", LIST_VOICES_FOREVER, router], stdout=subprocess.PIPE, text=True, bufsize=1
        )
        result.warmup_answers.append(lister.stdout.readline().strip())
        assert result.warmup_answers[0], "ListVoices never answered"
        # ... and the CLI, started before any model service runs; it waits (--wait) instead of failing at once.
        result.cli_output = directory / "early.wav"
        cli = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "--config", str(path), "--wait", "180"]
            + ["speak", SENTENCE, "--rate", "16000", "-o", str(result.cli_output)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in ("cosyvoice_tts", "qwen_tts", "asr"):
            fleet.spawn(name)
        fleet.wait_serving(list(fleet.members), 180)
        with grpc.insecure_channel(router) as channel:  # the moment the fleet says it is up
            reply = synthesizer_pb2_grpc.SynthesizerStub(channel).ListVoices(
                synthesizer_pb2.ListVoicesRequest(), timeout=10
            )
        result.voices_at_up = list(reply.voices)
        lister.terminate()
        result.warmup_answers += lister.communicate(timeout=30)[0].split()
        out, _ = cli.communicate(timeout=180)
        result.cli = subprocess.CompletedProcess(cli.args, cli.returncode, out)
        yield result
    finally:
        wedge.unlink(missing_ok=True)
        fleet.stop()


def test_a_client_started_with_the_fleet_is_served_after_waiting(launch):
    assert launch.cli.returncode == 0, launch.cli.stdout
    assert "served by cosyvoice_tts" in launch.cli.stdout
    pcm, rate = audio.read_wav(str(launch.cli_output))
    error, heard = intelligible(SENTENCE, pcm, rate)
    assert error <= INTELLIGIBLE, heard


def test_list_voices_right_after_up_lists_every_tts_service(launch):
    services = {v.service for v in launch.voices_at_up}
    assert {"cosyvoice_tts", "qwen_tts"} <= services, services
    assert "joe" in {v.id for v in launch.voices_at_up if v.service == "cosyvoice_tts"}


def test_calls_during_warm_up_eject_no_backend(launch):
    # The caller listed voices before any model service ran (the router said UNAVAILABLE, or listed fewer services).
    assert launch.warmup_answers[0] != "cosyvoice_tts,qwen_tts", launch.warmup_answers[:5]
    router = launch.running.address("router")
    for name, b in backends(router).items():
        assert b.ejections == 0, f"{name} was ejected while warming up: {b.detail}"
    log = launch.running.fleet.members["router"].log_path.read_text()
    assert " ejected for " not in log


@pytest.mark.resilience
def test_router_health_per_service_name_follows_its_backends(launch):
    running, fleet = launch.running, launch.running.fleet
    router = running.address("router")
    assert {n: check(router, n) for n in ("", "voice.v1.Synthesizer", "voice.v1.Recognizer")} == {
        "": SERVING,
        "voice.v1.Synthesizer": SERVING,
        "voice.v1.Recognizer": SERVING,
    }
    # Watch in its own process (this one forks asr again below; see the fixture on forks while gRPC is busy).
    watcher = subprocess.Popen(
        [sys.executable, "-c", WATCH_UNTIL_BACK, router, "voice.v1.Recognizer"], stdout=subprocess.PIPE, text=True
    )
    assert watcher.stdout.readline().strip() == "SERVING"

    asr = fleet.members["asr"].process
    asr.terminate()
    asr.wait(30)
    assert wait_until(lambda: check(router, "voice.v1.Recognizer") == NOT_SERVING, 15)
    assert check(router, "voice.v1.Synthesizer") == SERVING and check(router, "") == SERVING
    # The router's fallback cascade for conversations needs asr too.
    assert check(router, "voice.v1.Conversation") == NOT_SERVING

    fleet.spawn("asr")
    fleet.wait_serving(["asr"], 120)
    assert wait_until(lambda: check(router, "voice.v1.Recognizer") == SERVING, 30)
    seen, _ = watcher.communicate(timeout=30)
    assert seen.split() == ["NOT_SERVING", "SERVING"], seen

    # SERVING means callable: the early CLI's speech, recognized through the router.
    pcm, rate = audio.read_wav(str(launch.cli_output))
    config = recognizer_pb2.RecognitionConfig(
        input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1), language="en"
    )
    requests = [recognizer_pb2.StreamingRecognizeRequest(config=config)]
    requests += [recognizer_pb2.StreamingRecognizeRequest(audio=p) for p in audio.split_pcm(pcm, rate // 5 * 2)]
    with grpc.insecure_channel(router) as channel:
        replies = recognizer_pb2_grpc.RecognizerStub(channel).StreamingRecognize(iter(requests), timeout=60)
        finals = [r.result.transcript for r in replies if r.WhichOneof("event") == "result" and r.result.is_final]
    # The asr service (whisper tiny.en) hears piper's "hello world this is a test" word-perfect (measured 2026-11-25,
    # in process and through the router: WER 0; against another sentence 1.0). No word of margin: one word of six
    # changed ("hello word ...") is a near miss the bound must fail, so the listener's word-perfect bound holds.
    error = wer(SENTENCE, " ".join(finals))
    print(f"\nasr through the router: WER {error:.2f}: {finals}")
    assert error <= INTELLIGIBLE, finals


@pytest.mark.resilience
def test_a_wedged_engine_turns_not_serving_the_router_fails_over_and_it_comes_back(launch):
    running = launch.running
    router, cosyvoice = running.address("router"), running.address("cosyvoice_tts")
    assert wait_until(lambda: backends(router)["cosyvoice_tts"].routable, 30)
    pcm, served_by = speak(router, routing=BROADCAST)
    assert served_by.startswith("cosyvoice_tts")
    assert_said(pcm)

    launch.wedge.touch()  # chaos drill: every engine call of cosyvoice_tts now hangs
    assert wait_until(lambda: check(cosyvoice, "") == NOT_SERVING, 30), "the deep probe did not notice the wedge"
    assert check(cosyvoice, "voice.v1.Synthesizer") == NOT_SERVING
    assert wait_until(lambda: not backends(router)["cosyvoice_tts"].routable, 10)
    assert check(router, "voice.v1.Synthesizer") == SERVING  # qwen_tts still serves it
    pcm, served_by = speak(router, routing=BROADCAST)
    assert served_by.startswith("qwen_tts"), served_by
    assert_said(pcm)
    failovers = backends_failovers(router)
    assert ("cosyvoice_tts", "qwen_tts") in failovers, failovers

    launch.wedge.unlink()
    assert wait_until(lambda: check(cosyvoice, "") == SERVING, 30), "the deep probe did not see it recover"
    assert wait_until(lambda: backends(router)["cosyvoice_tts"].routable, 30)
    pcm, served_by = speak(router, routing=BROADCAST)
    assert served_by.startswith("cosyvoice_tts")
    assert_said(pcm)

    log = running.fleet.members["cosyvoice_tts"].log_path.read_text()
    assert "deep probe failed" in log and "deep probe passed again: SERVING" in log
    assert "Traceback" not in log
    assert running.metric("cosyvoice_tts", "voicefleet_deep_probes_total", outcome="failed") >= 1


def assert_said(pcm: bytes, rate: int = 16000) -> None:
    error, heard = intelligible(SPOKEN, pcm, rate)
    assert error <= INTELLIGIBLE, heard


def backends_failovers(address: str) -> list[tuple[str, str]]:
    with grpc.insecure_channel(address) as channel:
        reply = fleet_pb2_grpc.FleetStub(channel).GetFleetStatus(fleet_pb2.GetFleetStatusRequest(), timeout=5)
    return [(f.from_backend, f.to_backend) for f in reply.recent_failovers]
