"""A short smoke of the soak suite (`make soak` runs the long profiles): mixed traffic through the router on the whole
CPU fleet for ~20 s; every workload is served, nothing fails that was not meant to, and the report holds what a soak
reports (latency per workload, each process's RSS and open file descriptors at start and end)."""

from __future__ import annotations

import pytest

from bench import soak

pytestmark = pytest.mark.timeout(600)


def test_soak_smoke_mixed_traffic_through_the_router(tmp_path):
    fleet = soak.start_fleet(tmp_path)
    try:
        rep = soak.run_profile(soak.PROFILES["smoke"], fleet, "smoke")
    finally:
        fleet.stop()
    print(soak.markdown(rep))
    workloads = rep["workloads"]
    assert set(workloads) == {"synthesize", "stream", "asr", "converse"}
    for name, w in workloads.items():
        assert w["codes"].get("OK", 0) >= 1, (name, w)
        assert w["latency_n"] >= 1, (name, w)
    assert rep["errors"] == 0, {n: w["codes"] for n, w in workloads.items()}
    assert set(rep["processes"]) == set(soak.FLEET)
    for name, p in rep["processes"].items():
        assert p["rss_mb_end"] is not None and p["fds_end"] is not None, name  # still running at the end
