"""`voicefleet up` as a user runs it (a real process tree on loopback), and a caller that keeps speaking through it.

Shared by tests/cli/test_supervisor.py and bench/supervisor.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from services.cli.fleet import write_ephemeral_config
from services.cli.supervisor import fetch_members
from services.common.config import load_config
from voice.v1 import fleet_pb2, fleet_pb2_grpc, routing_pb2, synthesizer_pb2, synthesizer_pb2_grpc

# What a client of the fleet should set (docs/router.md#clients): wait for the router while it (re)starts, and let
# gRPC retry UNAVAILABLE transparently. gRPC retries only attempts that received no response yet, i.e. before the
# first audio chunk, so audio is never duplicated.
CLIENT_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": "voice.v1.Synthesizer"}],
                "waitForReady": True,
                "retryPolicy": {
                    "maxAttempts": 5,
                    "initialBackoff": "0.2s",
                    "maxBackoff": "2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)
CLIENT_OPTIONS = [("grpc.service_config", CLIENT_SERVICE_CONFIG), ("grpc.enable_retries", 1)]

FULL_FLEET = ("cosyvoice_tts", "qwen_tts", "asr", "brain", "moss_sts", "router")
# Router health tight enough that a restarted backend is routable again within seconds (docs/router.md#health).
FAST_HEALTH = {
    "eject_after_failures": 1,
    "ejection_seconds": 0.5,
    "max_ejection_seconds": 2.0,
    "recovery_probes": 2,
    "probe_interval_seconds": 0.3,
    "probe_timeout_ms": 3000,
    "deep_probe_interval_seconds": 2.0,
    "deep_probe_deadline_ms": 5000,
}


class UpProcess:
    """``voicefleet --config PATH up`` in a child process; its members' states come from the supervisor's /members."""

    def __init__(self, directory: Path, services=FULL_FLEET, **sections):
        sections.setdefault("fleet", {}).setdefault("restart", {"backoff_initial_seconds": 0.2})
        router = sections.setdefault("router", {})
        router.setdefault("health", FAST_HEALTH)
        self.config_path = write_ephemeral_config(directory, services, **sections)
        self.config = load_config(self.config_path)
        self.log_path = Path(directory) / "voicefleet-up.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - the child's stdout/stderr for its whole life
        self.process = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "--config", str(self.config_path), "up"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a SIGINT to the test runner is not a Ctrl-C to the fleet
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_up(self, timeout: float = 240.0) -> float:
        t0 = time.monotonic()
        while "voicefleet is up" not in self.output():
            if self.process.poll() is not None:
                raise AssertionError(f"voicefleet up exited ({self.process.returncode}):\n{self.output()[-4000:]}")
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"voicefleet up not up after {timeout:.0f}s:\n{self.output()[-4000:]}")
            time.sleep(0.2)
        return time.monotonic() - t0

    def members(self) -> dict[str, dict]:
        """The supervisor's /members by name ({} while `voicefleet up` is still starting its HTTP endpoint)."""
        members = fetch_members(self.config.fleet.supervisor_port, timeout=2.0)
        return {m["name"]: m for m in members or []}

    def wait_member(self, name: str, predicate, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            member = self.members().get(name)
            if member is not None and predicate(member):
                return member
            if self.process.poll() is not None:
                raise AssertionError(f"voicefleet up exited ({self.process.returncode}):\n{self.output()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} did not reach the expected state in {timeout:.0f}s: {member}")
            time.sleep(0.1)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        pid = self.members()[name]["pid"]
        assert pid, f"{name} has no running process"
        os.kill(pid, sig)
        return pid

    def routable(self) -> dict[str, bool]:
        """The router's view: backend name -> routable (empty while the router is down)."""
        try:
            with grpc.insecure_channel(self.config.router.address) as channel:
                reply = fleet_pb2_grpc.FleetStub(channel).GetFleetStatus(fleet_pb2.GetFleetStatusRequest(), timeout=2)
        except grpc.RpcError:
            return {}
        return {b.name: b.routable for b in reply.backends}

    def wait_all_routable(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            view = self.routable()
            if view and all(view.values()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"backends not all routable after {timeout:.0f}s: {view}")
            time.sleep(0.2)

    def stop(self, timeout: float = 60.0) -> int:
        """Ctrl-C, as a user stops it: drain, stop every member; the exit code of `voicefleet up`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
        return self.process.returncode


@dataclass
class Outcome:
    started: float  # monotonic
    ended: float
    code: str  # OK or the gRPC status name
    got_audio: bool
    served_by: str = ""
    detail: str = ""


@dataclass
class SpeakingCaller:
    """Keeps sending one-sentence REALTIME Synthesize requests through the router (moss_sts, failing over to
    cosyvoice_tts), one after another, until stopped; records every outcome."""

    router: str
    text: str = "The fleet keeps talking."
    timeout: float = 30.0
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> SpeakingCaller:
        self._thread.start()
        return self

    def stop(self) -> list[Outcome]:
        self._stop.set()
        self._thread.join(self.timeout + 10)
        return self.outcomes

    def _run(self) -> None:
        config = synthesizer_pb2.SynthesisConfig(routing=routing_pb2.Routing(mode=routing_pb2.ROUTE_MODE_REALTIME))
        with grpc.insecure_channel(self.router, options=CLIENT_OPTIONS) as channel:
            stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
            while not self._stop.is_set():
                t0, got_audio, served_by = time.monotonic(), False, ""
                try:
                    for chunk in stub.Synthesize(
                        synthesizer_pb2.SynthesizeRequest(text=self.text, config=config), timeout=self.timeout
                    ):
                        got_audio = got_audio or bool(chunk.audio.data)
                        served_by = chunk.served_by or served_by
                    code, detail = ("OK", "") if got_audio else ("NO_AUDIO", "the call ended without audio")
                except grpc.RpcError as e:
                    code, detail = e.code().name, e.details() or ""
                self.outcomes.append(Outcome(t0, time.monotonic(), code, got_audio, served_by, detail))
                time.sleep(0.05)

    def failed_before_audio(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.code != "OK" and not o.got_audio]
