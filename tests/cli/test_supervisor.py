"""`voicefleet up` is a supervisor, not a tripwire: a member that dies is restarted while the rest keep serving.

Real processes on loopback, started the way a user starts them (`voicefleet --config F up`), killed with SIGKILL.
What is checked is what a user sees: speech keeps coming through the router, the killed member is ready again,
`voicefleet status` shows its restart, a crash-looping member is given up while the rest serve, Ctrl-C still stops
everything. Time bounds here are the generous limits of "came back at all"; how fast is measured in `make bench`
(bench/supervisor.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import grpc
import pytest

from tests.supervised import FULL_FLEET, SpeakingCaller, UpProcess
from voice.v1 import synthesizer_pb2, synthesizer_pb2_grpc

pytestmark = [pytest.mark.timeout(900), pytest.mark.resilience]

# Generous "it came back" bound for one member on a loaded 2-core machine (measured: bench/supervisor.py).
BACK_WITHIN_SECONDS = 120


def status_output(up: UpProcess) -> str:
    cli = [sys.executable, "-m", "services.cli.main", "--config", str(up.config_path), "status"]
    return subprocess.run(cli, capture_output=True, text=True, timeout=60).stdout


def status_row(output: str, member: str) -> list[str]:
    """The supervisor table's row for ``member``: [name, state, uptime, restarts, PSS MB, last exit...]."""
    table = output.split("\nmember ", 1)[1]
    return next(line.split() for line in table.splitlines()[1:] if line.split()[:1] == [member])


@pytest.fixture(scope="module")
def full_fleet(tmp_path_factory):
    up = UpProcess(tmp_path_factory.mktemp("supervised"), FULL_FLEET)
    try:
        up.wait_up()
        up.wait_all_routable(120)
        yield up
    finally:
        code = up.stop()
        print(up.output()[-3000:])
        assert code == 0, f"voicefleet up exited {code} on Ctrl-C"


def test_every_member_killed_in_turn_comes_back_and_speech_keeps_flowing(full_fleet):
    up = full_fleet
    caller = SpeakingCaller(up.config.router.address).start()
    try:
        # The router last: while it is down the caller waits for it (wait-for-ready) instead of failing.
        for name in ("brain", "qwen_tts", "asr", "cosyvoice_tts", "moss_sts", "router"):
            before = up.members()[name]["restarts"]
            served_before = len(caller.outcomes)
            up.kill(name)
            back = up.wait_member(
                name, lambda m, n=before: m["restarts"] == n + 1 and m["state"] == "ready", BACK_WITHIN_SECONDS
            )
            assert back["last_exit"] == "signal SIGKILL", back
            up.wait_all_routable(BACK_WITHIN_SECONDS)
            deadline = time.monotonic() + 60
            while len(caller.outcomes) < served_before + 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(caller.outcomes) >= served_before + 3, f"no requests finished after {name} came back"
    finally:
        outcomes = caller.stop()

    assert caller.failed_before_audio() == [], "requests failed before any audio while a member restarted"
    ok = [o for o in outcomes if o.code == "OK"]
    # Only the router's own death can cut a stream that already had audio; nothing else may fail.
    cut = [o for o in outcomes if o.code != "OK"]
    assert len(cut) <= 1, f"more than the one stream in flight at the router's kill failed: {cut}"
    assert {o.served_by.split("/")[0] for o in ok} >= {"moss_sts", "cosyvoice_tts"}, (
        "the caller was never failed over to cosyvoice_tts while moss_sts was down (or never served by moss_sts)"
    )

    members = up.members()
    assert all(m["state"] == "ready" and m["restarts"] == 1 for m in members.values()), members
    output = status_output(up)
    for name in FULL_FLEET:
        row = status_row(output, name)
        assert row[1] == "ready" and row[3] == "1" and "SIGKILL" in " ".join(row[5:]), (name, row, output)
        assert float(row[4]) > 0, f"{name}: no memory shown in {row}"  # its processes' PSS, in MB


def test_a_member_that_exits_at_every_start_is_given_up_and_the_rest_keep_serving(tmp_path):
    """qwen_tts cannot bind its port (something else holds it), so it exits at once on every start."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    up = None
    try:
        up = UpProcess(
            tmp_path,
            ("cosyvoice_tts", "qwen_tts", "router"),
            fleet={"restart": {"backoff_initial_seconds": 0.2, "crash_loop_exits": 3, "crash_loop_window_seconds": 60}},
            qwen_tts={"port": blocker.getsockname()[1]},
        )
        gave_up = up.wait_member("qwen_tts", lambda m: m["state"] == "gave-up", 120)
        assert gave_up["restarts"] == 2 and gave_up["exits_in_window"] == 3, gave_up
        assert "exit code" in gave_up["last_exit"], gave_up
        up.wait_member("cosyvoice_tts", lambda m: m["state"] == "ready", 120)
        up.wait_member("router", lambda m: m["state"] == "ready", 120)
        assert "is up" not in up.output(), "the fleet said it was up while qwen_tts never served"
        assert "given up (crash loop)" in up.output()

        with grpc.insecure_channel(up.config.router.address) as channel:
            chunks = list(
                synthesizer_pb2_grpc.SynthesizerStub(channel).Synthesize(
                    synthesizer_pb2.SynthesizeRequest(text="Still serving."), timeout=60, wait_for_ready=True
                )
            )
        assert sum(len(c.audio.data) for c in chunks) > 0 and chunks[0].served_by.startswith("cosyvoice_tts")

        time.sleep(1.0)  # several backoff periods: a given-up member is not started again
        assert up.members()["qwen_tts"]["restarts"] == 2
        output = status_output(up)
        row = status_row(output, "qwen_tts")
        assert row[1] == "gave-up" and row[3] == "2", row
        assert "ready: Synthesizer SERVING" in output, output  # cosyvoice_tts still serves speech
    finally:
        blocker.close()
        if up is not None:
            assert up.stop() == 0


def test_ctrl_c_stops_every_member(tmp_path):
    up = UpProcess(tmp_path, ("cosyvoice_tts", "router"))
    up.wait_up()
    pids = [m["pid"] for m in up.members().values()]
    assert up.stop() == 0
    assert "voicefleet: stopped" in up.output()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"member pid {pid} still runs after Ctrl-C")


def test_members_stop_when_voicefleet_up_itself_is_killed(tmp_path):
    """kill -9 of `voicefleet up` leaves no member behind holding the fleet's ports (each gets SIGTERM and drains)."""
    up = UpProcess(tmp_path, ("cosyvoice_tts", "router"))
    up.wait_up()
    pids = [m["pid"] for m in up.members().values()]
    up.process.kill()
    up.process.wait()

    def running(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its reaper has stopped too
            return stat.read().split(")")[-1].split()[0] != "Z"

    deadline = time.monotonic() + 60
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if running(p)], "members outlived the supervisor"
    with socket.socket() as s:  # the router's port is free for the next `voicefleet up`
        s.bind(("127.0.0.1", up.config.router.port))
    up.stop()
