"""Supervisor: member SIGKILLed -> ready again, and requests failed while it restarts.

The whole CPU fleet is started the way a user starts it (`voicefleet up`, tests/supervised.py). One caller keeps
sending one-sentence REALTIME Synthesize requests through the router (moss_sts, failing over to cosyvoice_tts) with
the client settings docs/router.md recommends (wait-for-ready + gRPC's transparent retry of UNAVAILABLE). Each member
is SIGKILLed in turn, ROUNDS times. Measured per member: kill -> the supervisor sees it ready again (process up and
its readiness check passing: gRPC health SERVING, or one real completion for the brain), and kill -> the router
routes to it again (routable in GetFleetStatus). Counted over the whole run: requests that failed before any audio
(goal 0) and streams cut after audio had started (only the router's own death can do that).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.harness import Row
from tests.supervised import FULL_FLEET, SpeakingCaller, UpProcess

ROUNDS = 3
ORDER = ("brain", "qwen_tts", "asr", "cosyvoice_tts", "moss_sts", "router")


def run():
    ready_rows = {name: Row(f"{name} SIGKILL -> ready", "s") for name in ORDER}
    routable_rows = {name: Row(f"{name} SIGKILL -> routable by the router", "s") for name in ORDER if name != "brain"}
    with tempfile.TemporaryDirectory() as tmp:
        up = UpProcess(Path(tmp), FULL_FLEET)
        try:
            up.wait_up()
            up.wait_all_routable(120)
            caller = SpeakingCaller(up.config.router.address).start()
            for _ in range(ROUNDS):
                for name in ORDER:
                    before = up.members()[name]["restarts"]
                    t0 = time.monotonic()
                    up.kill(name)
                    up.wait_member(name, lambda m, n=before: m["restarts"] == n + 1 and m["state"] == "ready", 300)
                    ready_rows[name].samples.append(time.monotonic() - t0)
                    up.wait_all_routable(300)
                    if name in routable_rows:
                        routable_rows[name].samples.append(time.monotonic() - t0)
                    time.sleep(1.0)  # a few requests on the healed fleet before the next kill
            outcomes = caller.stop()
        finally:
            up.stop()
    failed_before = [o for o in outcomes if o.code != "OK" and not o.got_audio]
    cut_after = [o for o in outcomes if o.code != "OK" and o.got_audio]
    served = {}
    for o in outcomes:
        if o.code == "OK":
            backend = o.served_by.split("/")[0]
            served[backend] = served.get(backend, 0) + 1
    rows = [*ready_rows.values(), *routable_rows.values()]
    rows.append(Row("requests failed before any audio (goal 0)", "count", [float(len(failed_before))]))
    rows.append(Row("streams cut after audio started", "count", [float(len(cut_after))]))
    extra = {
        "requests": len(outcomes),
        "served_by": served,
        "failures": [f"{o.code}: {o.detail}" for o in failed_before + cut_after][:20],
        "kills": f"{ROUNDS} rounds x {len(ORDER)} members, SIGKILL",
    }
    return rows, extra
