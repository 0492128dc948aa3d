"""A short smoke of the soak suite (`make soak` runs the long profiles): 9 s of mixed arrivals through the router on
the whole CPU fleet; every workload is served with something in it (a call that ends OK with no audio, no final, an
empty final or a turn with no reply audio is an error, ``EMPTY:...``), nothing fails that was not meant to, and the
report holds what a soak reports (latency per workload, each process's RSS and open file descriptors at start and
end)."""

from __future__ import annotations

import grpc
import pytest

from bench import soak
from voice.v1 import recognizer_pb2_grpc

pytestmark = [pytest.mark.timeout(600), pytest.mark.resilience]


def test_soak_smoke_mixed_traffic_through_the_router(tmp_path):
    fleet = soak.start_fleet(tmp_path)
    try:
        rep = soak.run_profile(soak.PROFILES["smoke"], fleet, "smoke")
        # The same asr workload on a second of silence: the recognizer hears nothing, and the soak counts that
        # as empty, not OK (what `empty == 0` below would miss if empties were still successes).
        silence = soak.Stats()
        with grpc.insecure_channel(fleet.config.router.address) as channel:
            soak.recognize(recognizer_pb2_grpc.RecognizerStub(channel), silence, bytes(soak.RATE * 2), 1.0)
    finally:
        fleet.stop()
    assert dict(silence.codes) == {"asr": {"EMPTY:no final": 1}} and silence.empty() == 1, silence.codes
    print(soak.markdown(rep))
    workloads = rep["workloads"]
    codes = {n: w["codes"] for n, w in workloads.items()}
    assert set(workloads) == {"synthesize", "stream", "asr", "converse"}
    # No empty success: each outcome with nothing in it is counted under its own EMPTY: code, and there are none.
    assert rep["empty"] == 0, codes
    assert rep["errors"] == 0, codes
    for name, w in workloads.items():
        assert w["codes"].get("OK", 0) >= 1, (name, w)
        assert w["latency_n"] >= 1, (name, w)
    assert set(rep["processes"]) == set(soak.FLEET)
    for name, p in rep["processes"].items():
        assert p["rss_mb_end"] is not None and p["fds_end"] is not None, name  # still running at the end


def test_soak_counts_an_empty_call_as_an_error_not_a_success():
    # The accounting the smoke's `empty == 0` relies on: an EMPTY: outcome is an error and is counted as empty.
    stats = soak.Stats()
    stats.ok("asr", 0.2)
    stats.error("asr", soak.EMPTY + "no final")
    stats.error("stream", "UNAVAILABLE")
    assert (stats.errors(), stats.empty()) == (2, 1)
    rep = soak.report("t", soak.PROFILES["smoke"], stats, {}, {}, {}, 1.0, 0)
    assert (rep["errors"], rep["empty"]) == (2, 1)
    assert rep["workloads"]["asr"]["codes"] == {"OK": 1, "EMPTY:no final": 1}
