"""The local fleet as processes: start every enabled service, wait for SERVING, stop them all cleanly.

Used by ``voicefleet up`` and by the integration tests, so tests start the fleet the way users do.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from services.common.config import Config, load_config
from services.common.health_probe import member_status
from services.common.server import SUPERVISOR_PID_ENV


class FleetError(RuntimeError):
    pass


@dataclass
class Member:
    name: str
    address: str
    metrics_port: int
    process: subprocess.Popen
    log_path: Path | None

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path and self.log_path.exists():
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(output went to the terminal)"


# glibc's malloc, for every member unless the caller's environment says otherwise. Its threshold for serving a large
# block from mmap (returned to the kernel at free) rises by default to the largest block freed, up to 32 MiB; after
# that, the brain's per-request buffers (prompt-cache states, logits) came from the heap and stayed as fragments: the
# brain alone grew 239 -> 486 MB PSS over 100 chat turns, 239 -> 349 MB with the threshold fixed at 1 MiB (2-core
# AMD EPYC, 2026-11-29, docs/architecture.md#memory). The images set the same (services/*/Dockerfile).
MEMBER_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1048576"}

# The module that runs a fleet member that is not services.<name> (the lease authority: the residency layer's entry
# point).
MODULES = {"lease_authority": "services.residency"}


# Ports handed out by this process: never handed out twice.
_HANDED_OUT: set[int] = set()


@functools.cache
def _ephemeral_floor() -> int:
    """The lowest port the kernel gives to outgoing connections (Linux: net.ipv4.ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now, below the ephemeral range.

    A port the kernel picks with bind(0) lies in the ephemeral range, where every outgoing connection also takes its
    local port: between this call and the service's bind, a client socket elsewhere in the test run could take it
    (CI saw ``Address already in use`` for a metrics port). Below that range only listeners bind.
    """
    floor = _ephemeral_floor()
    low = max(1024, min(20000, floor - 4096))
    for _ in range(1000):
        port = random.randrange(low, floor)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise FleetError(f"no free loopback port in {low}-{floor - 1}")


def write_ephemeral_config(directory: Path, services=("cosyvoice_tts", "router"), **sections) -> Path:
    """A config file giving every service free loopback ports (tests, benchmarks); ``sections`` merge over it."""
    raw = {"fleet": {"services": list(services), "start_timeout_seconds": 90, "supervisor_port": free_port()}}
    for name, section in Config.model_fields.items():
        if "port" in section.annotation.model_fields:  # fleet members only
            grace = 5 if name == "router" else 10
            raw[name] = {"port": free_port(), "metrics_port": free_port(), "grace_seconds": grace}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    path = Path(directory) / "voicefleet.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


class LocalFleet:
    def __init__(self, config: Config, config_path: str | None = None, log_dir: Path | None = None, env=None):
        self.config = config
        self.config_path = config_path
        self.log_dir = log_dir
        self.env = dict(os.environ if env is None else env)
        self.members: dict[str, Member] = {}

    def spawn(self, name: str) -> Member:
        section = getattr(self.config, name)
        cmd = [sys.executable, "-m", MODULES.get(name, f"services.{name}")]
        if self.config_path:
            cmd += ["--config", str(self.config_path)]
        log_path = None
        out = None
        if self.log_dir:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"{name}.log"
            out = open(log_path, "ab")  # noqa: SIM115 - owned by the child for its life
        # No preexec_fn: the child execs at once (vfork), and arms its own parent-death signal (die_with_supervisor).
        env = {**MEMBER_MALLOC_ENV, **self.env, SUPERVISOR_PID_ENV: str(os.getpid())}
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if out else None, env=env)
        if out:
            out.close()
        member = Member(name, section.address, section.metrics_port, process, log_path)
        self.members[name] = member
        return member

    def start(self) -> None:
        """Start every enabled service and wait until each reports SERVING (or fail with its log)."""
        for name in self.config.fleet.services:
            self.spawn(name)
        try:
            self.wait_serving(list(self.members), self.config.fleet.start_timeout_seconds)
        except BaseException:
            self.stop()
            raise

    def wait_serving(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending:
            for name in sorted(pending):
                m = self.members[name]
                if m.process.poll() is not None:
                    raise FleetError(f"{name} exited with code {m.process.returncode} while starting:\n{m.log_tail()}")
                status = member_status(
                    name, m.address, timeout=0.5, settings=self.config.security, fleet=set(self.config.fleet.services)
                )
                if status == "SERVING":
                    pending.discard(name)
            if pending and time.monotonic() > deadline:
                raise FleetError(f"not SERVING after {timeout:.0f}s: {', '.join(sorted(pending))}")
            if pending:
                time.sleep(0.1)

    @classmethod
    def on_free_ports(cls, directory: Path, services=("cosyvoice_tts", "router"), **sections) -> LocalFleet:
        """Start a fleet on free loopback ports with logs under ``directory/logs`` (tests and benchmarks)."""
        path = write_ephemeral_config(directory, services, **sections)
        fleet = cls(load_config(path), str(path), log_dir=Path(directory) / "logs")
        fleet.start()
        return fleet

    def dead_members(self) -> list[Member]:
        return [m for m in self.members.values() if m.process.poll() is not None]

    def stop(self, timeout: float | None = None) -> dict[str, int]:
        """SIGTERM all (router first, so it stops taking requests), wait, SIGKILL what is left. Exit codes."""
        order = sorted(self.members.values(), key=lambda m: m.name != "router")
        for m in order:
            if m.process.poll() is None:
                m.process.send_signal(signal.SIGTERM)
        grace = timeout if timeout is not None else max(getattr(self.config, m.name).grace_seconds for m in order) + 5
        deadline = time.monotonic() + grace
        codes = {}
        for m in order:
            try:
                codes[m.name] = m.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                m.process.kill()
                codes[m.name] = m.process.wait()
        return codes
