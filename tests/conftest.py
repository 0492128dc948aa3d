"""Fixtures: a real CPU fleet (router + cosyvoice_tts) on free loopback ports, started like `voicefleet up`."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import grpc
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from voice.v1 import synthesizer_pb2_grpc

from services.cli.fleet import LocalFleet
from services.common.config import load_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_fleet_config(directory: Path, services=("cosyvoice_tts", "router"), **sections) -> Path:
    """A config file with free ports for every service; ``sections`` merge over the defaults."""
    raw = {
        "fleet": {"services": list(services), "start_timeout_seconds": 90},
        "router": {"port": free_port(), "metrics_port": free_port(), "grace_seconds": 5},
        "cosyvoice_tts": {"port": free_port(), "metrics_port": free_port(), "grace_seconds": 10},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    path = directory / "voicefleet.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


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
        import urllib.request

        port = getattr(self.config, name).metrics_port
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == metric and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total


def start_fleet(directory: Path, services=("cosyvoice_tts", "router"), **sections) -> RunningFleet:
    path = write_fleet_config(directory, services, **sections)
    fleet = LocalFleet(load_config(path), str(path), log_dir=directory / "logs")
    fleet.start()
    return RunningFleet(fleet, path)


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


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
