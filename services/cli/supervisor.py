"""The supervisor behind ``voicefleet up``: one member's crash never stops the fleet.

A member that exits while the fleet is not stopping (a crash, ``kill -9``, a non-zero or even a zero exit) is started
again after a backoff that doubles with each exit inside the crash-loop window (like compose
``restart: unless-stopped`` and systemd ``Restart=on-failure`` with ``StartLimitBurst``). A member that exits
``crash_loop_exits`` times within ``crash_loop_window_seconds`` is given up and reported; the rest keep serving, and the
router's health Watch + outlier ejection route around the gap (failover before first audio, next sentence, turn
replay). Exit code 2 is a bad configuration (services/common/server.py): restarting cannot fix it, so it is not
restarted (systemd's ``RestartPreventExitStatus``).

The supervisor serves ``/members`` (JSON: state, restarts, last exit, uptime, memory (PSS of the member's processes) —
what ``voicefleet status`` prints) and ``/metrics`` on 127.0.0.1:``fleet.supervisor_port``.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.cli.fleet import LocalFleet
from services.cli.memory import member_pss
from services.common.config.fleet import RestartConfig
from services.common.health_probe import member_status
from services.common.metrics import SUPERVISOR_GAVE_UP, SUPERVISOR_MEMBER_READY, SUPERVISOR_RESTARTS

BAD_CONFIG_EXIT = 2  # services exit 2 when their configuration is invalid (services/common/server.py)

# A member's states: starting (process runs, not ready yet), ready, backoff (exited, restart scheduled),
# gave-up (crash loop), exited (restart policy "no", or a bad configuration), stopped (the fleet is stopping).
STARTING, READY, BACKOFF, GAVE_UP, EXITED, STOPPED = "starting", "ready", "backoff", "gave-up", "exited", "stopped"


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


@dataclass
class MemberState:
    name: str
    state: str = STARTING
    started_at: float = 0.0  # monotonic, of the current process
    ready_at: float | None = None  # monotonic, when the current process first reported ready
    restarts: int = 0
    exits: deque = field(default_factory=deque)  # monotonic times of exits inside the crash-loop window
    last_exit: str = ""
    last_exit_at: float | None = None  # monotonic
    restart_at: float = 0.0
    next_check: float = 0.0

    def to_json(self, now: float, pid: int | None = None) -> dict:
        return {
            "name": self.name,
            "state": self.state,
            "pid": pid if self.state in (STARTING, READY) else None,
            "restarts": self.restarts,
            "uptime_seconds": round(now - self.started_at, 3) if self.state in (STARTING, READY) else None,
            "ready_after_seconds": (round(self.ready_at - self.started_at, 3) if self.ready_at is not None else None),
            "last_exit": self.last_exit or None,
            "last_exit_seconds_ago": round(now - self.last_exit_at, 3) if self.last_exit_at is not None else None,
            "restart_in_seconds": round(max(0.0, self.restart_at - now), 3) if self.state == BACKOFF else None,
            "exits_in_window": len(self.exits),
        }


class Supervisor:
    """Starts every member of ``fleet``, restarts the ones that exit, and reports their states."""

    def __init__(
        self,
        fleet: LocalFleet,
        policy: RestartConfig | None = None,
        log: Callable[[str], None] = lambda message: None,
        poll_seconds: float = 0.1,
        ready_check_seconds: float = 0.25,
    ):
        self.fleet = fleet
        self.policy = policy or fleet.config.fleet.restart
        self.log = log
        self.poll_seconds = poll_seconds
        self.ready_check_seconds = ready_check_seconds
        self.states: dict[str, MemberState] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._http: ThreadingHTTPServer | None = None

    # --- life ------------------------------------------------------------------------------------------------------
    def start(self) -> None:
        now = time.monotonic()
        for name in self.fleet.config.fleet.services:
            self.fleet.spawn(name)
            self.states[name] = MemberState(name, started_at=now)
            SUPERVISOR_GAVE_UP.labels(name).set(0)
            SUPERVISOR_MEMBER_READY.labels(name).set(0)
        self._thread = threading.Thread(target=self._run, name="voicefleet-supervisor", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> dict[str, int]:
        """Stop supervising (nothing is restarted from here on), then drain and stop every member."""
        self._stopping.set()
        if self._thread:
            self._thread.join()
        if self._http:
            self._http.shutdown()
            self._http.server_close()
        for st in self.states.values():
            st.state = STOPPED
        return self.fleet.stop(timeout)

    def wait_ready(self, timeout: float, interrupted: threading.Event | None = None) -> bool:
        """True once every member is ready; False at the timeout, when interrupted, or once every member that is
        not ready has been given up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (interrupted and interrupted.is_set()):
            states = self.snapshot()
            if all(s["state"] == READY for s in states):
                return True
            if all(s["state"] in (READY, GAVE_UP, EXITED) for s in states):
                return False
            time.sleep(0.1)
        return False

    # --- the loop --------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.wait(self.poll_seconds):
            # Only this thread changes member states and spawns; stop() joins it before stopping the members.
            for st in self.states.values():
                if self._stopping.is_set():
                    return
                self._step(st, time.monotonic())

    def _step(self, st: MemberState, now: float) -> None:
        member = self.fleet.members[st.name]
        if st.state in (STARTING, READY):
            code = member.process.poll()
            if code is not None:
                self._exited(st, code, now)
            elif st.state == STARTING and now >= st.next_check:
                st.next_check = now + self.ready_check_seconds
                config = self.fleet.config
                status = member_status(
                    st.name, member.address, timeout=0.5, settings=config.security, fleet=set(config.fleet.services)
                )
                if status == "SERVING":
                    st.state, st.ready_at = READY, time.monotonic()
                    SUPERVISOR_MEMBER_READY.labels(st.name).set(1)
                    if st.restarts:
                        self.log(
                            f"{st.name} is ready again, {st.ready_at - st.started_at:.1f}s after restart {st.restarts}"
                        )
        elif st.state == BACKOFF and now >= st.restart_at:
            self.fleet.spawn(st.name)
            st.state, st.started_at, st.ready_at, st.next_check = STARTING, now, None, now
            st.restarts += 1
            SUPERVISOR_RESTARTS.labels(st.name).inc()

    def _exited(self, st: MemberState, code: int, now: float) -> None:
        p = self.policy
        st.last_exit, st.last_exit_at = describe_exit(code), now
        st.exits.append(now)
        while st.exits and st.exits[0] < now - p.crash_loop_window_seconds:
            st.exits.popleft()
        SUPERVISOR_MEMBER_READY.labels(st.name).set(0)
        if p.policy == "no":
            st.state = EXITED
            self.log(f"{st.name} exited ({st.last_exit}); restart policy is 'no': it stays down, the rest keep serving")
        elif code == BAD_CONFIG_EXIT:
            st.state = EXITED
            self.log(f"{st.name} exited with a bad configuration ({st.last_exit}); not restarted: fix it and restart")
        elif len(st.exits) >= p.crash_loop_exits:
            st.state = GAVE_UP
            SUPERVISOR_GAVE_UP.labels(st.name).set(1)
            self.log(
                f"{st.name} exited {len(st.exits)} times within {p.crash_loop_window_seconds:.0f}s ({st.last_exit});"
                " given up (crash loop), the rest keep serving. Its log says why; restart the fleet once fixed."
            )
        else:
            delay = min(p.backoff_max_seconds, p.backoff_initial_seconds * 2 ** (len(st.exits) - 1))
            st.state, st.restart_at = BACKOFF, now + delay
            self.log(f"{st.name} exited ({st.last_exit}); restarting in {delay:.1f}s")

    # --- reporting -------------------------------------------------------------------------------------------------
    def snapshot(self, memory: bool = False) -> list[dict]:
        """Each member's state; ``memory``: with ``pss_bytes``, its processes' PSS (reads /proc: only on request)."""
        now = time.monotonic()
        members = self.fleet.members
        states = [st.to_json(now, members[st.name].process.pid) for st in list(self.states.values())]
        if memory:
            pss = member_pss({s["name"]: s["pid"] for s in states})
            for s in states:
                s["pss_bytes"] = pss[s["name"]]
        return states

    def serve_http(self, port: int, host: str = "127.0.0.1") -> None:
        """/members (JSON) and /metrics on host:port, from a background thread (port 0: not served)."""
        if not port:
            return
        supervisor = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path == "/members":
                    body, kind = json.dumps({"members": supervisor.snapshot(memory=True)}).encode(), "application/json"
                elif self.path == "/metrics":
                    body, kind = generate_latest(), CONTENT_TYPE_LATEST
                else:
                    self.send_error(404, "try /members or /metrics")
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # no access log on the terminal of `voicefleet up`
                pass

        try:
            self._http = ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            self.log(f"supervisor status not served on {host}:{port} ({e}); set fleet.supervisor_port")
            return
        threading.Thread(target=self._http.serve_forever, name="voicefleet-supervisor-http", daemon=True).start()


def fetch_members(port: int, timeout: float = 1.0) -> list[dict] | None:
    """The supervisor's /members on 127.0.0.1:port, or None when no supervisor answers there."""
    import urllib.error
    import urllib.request

    if not port:
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/members", timeout=timeout) as reply:
            return json.loads(reply.read())["members"]
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return None
