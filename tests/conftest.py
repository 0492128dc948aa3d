"""Fixtures: a real CPU fleet (router + cosyvoice_tts) on free loopback ports, started like `voicefleet up`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc
import pytest

from bench.harness import scrape, total
from services.cli.fleet import LocalFleet
from voice.v1 import synthesizer_pb2_grpc


class RunningFleet:
    def __init__(self, fleet: LocalFleet, config_path: Path):
        self.fleet = fleet
        self.config = fleet.config
        self.config_path = config_path

    def address(self, name: str) -> str:
        return getattr(self.config, name).address

    def channel(self, name: str) -> grpc.Channel:
        return grpc.insecure_channel(self.address(name))

    def metric(self, name: str, metric: str, **labels) -> float:
        """Sum of a metric's samples matching ``labels``, scraped from the service's real /metrics endpoint."""
        return total(scrape(getattr(self.config, name).metrics_port), metric, **labels)


def cli_replies(stdout: str) -> list[str]:
    """The reply texts ``voicefleet converse`` reports, one per turn ("        reply:      'text'")."""
    import ast
    import re

    replies = [ast.literal_eval(m) for m in re.findall(r"^\s+reply:\s+('.*'|\".*\")", stdout, re.MULTILINE)]
    assert replies, stdout
    return replies


def start_fleet(directory: Path, services=("cosyvoice_tts", "router"), **sections) -> RunningFleet:
    fleet = LocalFleet.on_free_ports(directory, services, **sections)
    return RunningFleet(fleet, Path(fleet.config_path))


@pytest.fixture(scope="session")
def cpu_fleet(tmp_path_factory):
    running = start_fleet(tmp_path_factory.mktemp("fleet"))
    yield running
    running.fleet.stop()


@pytest.fixture(scope="session")
def router_tts(cpu_fleet):
    with cpu_fleet.channel("router") as channel:
        yield synthesizer_pb2_grpc.SynthesizerStub(channel)


@pytest.fixture(scope="session")
def direct_tts(cpu_fleet):
    with cpu_fleet.channel("cosyvoice_tts") as channel:
        yield synthesizer_pb2_grpc.SynthesizerStub(channel)


@pytest.fixture(scope="session")
def tts_fleet(tmp_path_factory):
    """cosyvoice_tts + qwen_tts + router with the default config (tests/cli/test_tts_cli.py and
    tests/qwen_tts/test_qwen_tts_service.py): both CPU voices through the router. Tests read metrics as deltas."""
    running = start_fleet(tmp_path_factory.mktemp("tts-fleet"), services=("cosyvoice_tts", "qwen_tts", "router"))
    yield running
    running.fleet.stop()


@pytest.fixture(scope="session")
def asr_fleet(tmp_path_factory):
    """asr + cosyvoice_tts + router (tests/test_asr_*.py); short idle timeout and stream limit so their tests are quick."""
    running = start_fleet(
        tmp_path_factory.mktemp("asr-fleet"),
        services=("cosyvoice_tts", "asr", "router"),
        asr={"idle_timeout_seconds": 2.0, "max_stream_seconds": 30},
    )
    yield running
    running.fleet.stop()


@pytest.fixture(scope="session")
async def speakers():
    """piper joe and espeak-ng en-US in process (bench/evaluation.py), started once for the session: every module
    that makes test speech in process shares them (each sentence is synthesized once, seeded: the same samples)."""
    from bench.evaluation import Speakers

    speakers = Speakers()
    await speakers.start()
    yield speakers
    await speakers.close()


@pytest.fixture(scope="session")
async def asr_speakers(speakers):
    """Every evaluation sentence said once by piper joe and espeak-ng en-US, in process (bench/evaluation.py)."""
    await speakers.say_all()
    return speakers


@pytest.fixture(scope="session")
async def asr_engine():
    """The asr CPU engine in process with its defaults (bench/evaluation.py ``cpu_engine``), started once for the
    session (whisper, VAD, turn model, pass-1 decoders and their warm-up): tests/asr/test_asr_noise.py and
    tests/conversation/test_echo.py share it. Each test opens streams of its own; finals are deterministic."""
    from bench.evaluation import cpu_engine

    engine = await cpu_engine()
    yield engine
    await engine.close()


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def engine_steps(fleet: RunningFleet, service: str, **labels) -> float:
    """``voicefleet_engine_steps_total`` of ``service`` (one per engine step: a sentence, a callback)."""
    return fleet.metric(service, "voicefleet_engine_steps_total", service=service, **labels)


def settled_steps(fleet: RunningFleet, service: str, quiet: float = 0.5, timeout: float = 15.0, **labels) -> float:
    """``service``'s engine steps once they stop changing for ``quiet`` seconds (the step in flight may finish after
    a cancel); fails when they never do: the engine kept working."""
    deadline = time.monotonic() + timeout
    last = engine_steps(fleet, service, **labels)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = engine_steps(fleet, service, **labels)
        if now == last:
            return now
        last = now
    raise AssertionError(f"{service}'s engine steps never settled: the engine kept working")


def pytest_collection_modifyitems(config, items):
    """`make test` runs two lanes at once (scripts/test-lanes.sh): TEST_LANE=background keeps only the
    tests marked ``background``, =main only the others. Unset (plain pytest): every test, one after another."""
    lane = os.environ.get("TEST_LANE", "")
    if lane not in ("background", "main"):
        return
    keep, drop = [], []
    for item in items:
        (keep if (item.get_closest_marker("background") is not None) == (lane == "background") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    """A loud line when the real-Prometheus or real-browser tests did not run: a green run without them proves less."""
    browser = [
        r
        for r in terminalreporter.stats.get("skipped", [])
        if "test_gateway_browser.py" in r.nodeid or "test_realtime_webrtc.py" in r.nodeid
    ]
    if browser:
        terminalreporter.write_sep(
            "!",
            f"BROWSER TESTS SKIPPED ({len(browser)}): no chromium or no playwright; the gateway's page (Talk, barge-in,"
            " Speak, WebRTC calls) was NOT checked in a browser. Install Debian's chromium (make test does it when run as root).",
            red=True,
            bold=True,
        )
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "test_prometheus.py" in r.nodeid]
    if skipped:
        terminalreporter.write_sep(
            "!",
            f"PROMETHEUS TESTS SKIPPED ({len(skipped)}): no prometheus/promtool on PATH; the SLO rules and the live "
            "scrape were NOT checked. Install Debian's prometheus (make test does it when run as root).",
            red=True,
            bold=True,
        )


@pytest.fixture(scope="session")
def gateway_fleet(tmp_path_factory):
    """asr + brain + moss_sts + router + gateway (tests/gateway/test_gateway*.py): the conversation cascade, speech from moss_sts's
    piper (the router's default TTS here), transcription by asr, all through the gateway's HTTP port. A small
    max_sessions and idle timeout so their limits are quick to reach."""
    running = start_fleet(
        tmp_path_factory.mktemp("gateway-fleet"),
        services=("asr", "brain", "moss_sts", "router", "gateway"),
        router={"default_tts_backend": "moss_sts"},
        moss_sts={"default_max_tokens": 40, "max_concurrent_sessions": 6},
        gateway={"max_sessions": 4, "idle_timeout_seconds": 3},
    )
    yield running
    running.fleet.stop()
