"""A short smoke of the soak suite (`make soak` runs the long profiles): 9 s of mixed arrivals through the router on
the whole CPU fleet; every workload is served with something in it (a call that ends OK with no audio, no final, an
empty final or a turn with no reply audio is an error, ``EMPTY:...``), nothing fails that was not meant to, and the
report holds what a soak reports (latency per workload, each process's RSS and open file descriptors at start and
end). A call refused by admission with a retry hint is tried again after it (bench/soak.py): refusing what cannot be
served in real time is the fleet working, on a 2-core machine that also runs the conversation's models."""

from __future__ import annotations

import grpc
import pytest

from bench import soak
from services.common.errors import RETRY_PUSHBACK_KEY
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


class Refused(grpc.RpcError):
    """A status as a gRPC client raises it (the soak's retry logic reads only code() and trailing_metadata())."""

    def __init__(self, code, trailers=()):
        self._code, self._trailers = code, trailers

    def code(self):
        return self._code

    def trailing_metadata(self):
        return self._trailers


def test_a_refusal_with_a_retry_hint_is_tried_again_and_one_without_is_an_error():
    hint = ((RETRY_PUSHBACK_KEY, "10"),)
    outcomes = [Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, hint), "served"]

    def call():
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    stats = soak.Stats()
    assert soak.served("synthesize", stats, call) == "served"
    assert stats.deliberate["synthesize"] == {"refused with a retry hint, tried again": 1}
    # No hint, another code, a conversation (it would replay its turns), or the last try: the error is the outcome.
    for workload, error in [
        ("synthesize", Refused(grpc.StatusCode.RESOURCE_EXHAUSTED)),
        ("synthesize", Refused(grpc.StatusCode.UNAVAILABLE, hint)),
        ("converse", Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, hint)),
    ]:
        outcomes[:] = [error, "served"]
        with pytest.raises(Refused):
            soak.served(workload, stats, call)
    outcomes[:] = [Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, hint)] * soak.MAX_TRIES
    with pytest.raises(Refused):
        soak.served("stream", stats, call)
    assert stats.deliberate["stream"] == {"refused with a retry hint, tried again": soak.MAX_TRIES - 1}


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
