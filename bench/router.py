"""Router: failover added latency (preferred backend SIGKILLed before first audio) and router-added latency per chunk.

Fleet: cosyvoice_tts (piper) + qwen_tts (espeak) + router on loopback, CPU engines. The REALTIME chain is set to
qwen_tts -> cosyvoice_tts for this benchmark: the killed backend has to be restarted for every run, and qwen_tts
(espeak) restarts in about a second where a CPU moss_sts (which loads the asr models) takes 15-30 s; the router's
failover path is the same whichever backend dies.

Failover: the preferred backend is SIGSTOPped, a REALTIME Synthesize is sent (it reaches the backend and waits),
then the backend is SIGKILLed; the router sees the call fail and retries on cosyvoice_tts. Measured: kill -> first
audio at the client; that minus cosyvoice_tts's own time to first audio through the router measured just before
(BROADCAST, no failover) = what the failover adds; and kill -> the router's failover decision (its log line).

Per chunk: ``voicefleet_router_chunk_relay_seconds`` (the router's time from a backend chunk received to the
caller's chunk written) over long syntheses, percentiles interpolated in its buckets (50 us .. 10 ms); and end to
end, (wall via router - wall direct) / chunks over the same long text, alternating, medians. On a small machine the
relay's tail is the router waiting for a core while the backend synthesizes, so the relay is measured once more with
the router pinned to a core of its own (Linux sched_setaffinity; skipped below 2 cores).
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
import threading
import time

import grpc

from bench.harness import UNCACHED_TTS, Row, bucket_quantile, buckets, scrape
from services.cli.fleet import LocalFleet
from voice.v1 import fleet_pb2, fleet_pb2_grpc, routing_pb2, synthesizer_pb2, synthesizer_pb2_grpc

TEXT = "Hello, thanks for calling. Your order shipped this morning."
LONG_TEXT = " ".join(f"This is sentence number {i} of a long announcement." for i in range(1, 11))
FAILOVER_RUNS = 15
TTFA_RUNS = 20
CHUNK_RUNS = 10
REALTIME = routing_pb2.Routing(mode=routing_pb2.ROUTE_MODE_REALTIME)
BROADCAST = routing_pb2.Routing(mode=routing_pb2.ROUTE_MODE_BROADCAST)


def _request(text, routing=None):
    config = synthesizer_pb2.SynthesisConfig(routing=routing) if routing else None
    return synthesizer_pb2.SynthesizeRequest(text=text, config=config)


def _first_audio(stub, request, t0=None) -> tuple[float, str, int]:
    """(seconds from t0 to the first chunk, served_by, chunks)."""
    t0 = time.perf_counter() if t0 is None else t0
    first, served, chunks = None, "", 0
    for reply in stub.Synthesize(request, timeout=30):
        if first is None:
            first = time.perf_counter() - t0
            served = reply.served_by
        chunks += 1
    return first, served, chunks


def _routable(fleet: LocalFleet, name: str) -> bool:
    with grpc.insecure_channel(fleet.config.router.address) as ch:
        reply = fleet_pb2_grpc.FleetStub(ch).GetFleetStatus(fleet_pb2.GetFleetStatusRequest(), timeout=5)
    return any(b.name == name and b.routable for b in reply.backends)


def _wait(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for the fleet")
        time.sleep(0.1)


def _log_time(path, needle: str) -> float | None:
    """Wall time (s since the epoch) of the first log line holding ``needle`` (the log's ms resolution)."""
    import datetime

    with open(path, errors="replace") as f:
        for line in f:
            if needle in line:
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                return stamp.timestamp()
    return None


def _failover_runs(fleet: LocalFleet, stub) -> tuple[list[float], list[float], list[float]]:
    """Per run: SIGKILL -> first audio at the client; SIGKILL -> the router's failover decision (its log); the
    fallback's own time to first audio through the router, measured just before (paired baseline)."""
    to_audio, to_decision, baseline = [], [], []
    log_path = fleet.log_dir / "router.log"
    for i in range(FAILOVER_RUNS):
        member = fleet.members["qwen_tts"]
        if member.process.poll() is not None:
            fleet.spawn("qwen_tts")
            fleet.wait_serving(["qwen_tts"], 60)
        _wait(lambda: _routable(fleet, "qwen_tts"), 60)
        baseline.append(_first_audio(stub, _request(TEXT, BROADCAST))[0])
        _, served, _ = _first_audio(stub, _request("Ready.", REALTIME))  # served by qwen_tts; its voices cached
        assert served.startswith("qwen_tts"), served
        request_id = f"bench-failover-{os.getpid()}-{i}"
        pid = fleet.members["qwen_tts"].process.pid
        os.kill(pid, signal.SIGSTOP)
        result: dict = {}

        def call(result=result, request_id=request_id):
            t0 = time.perf_counter()
            request = _request(TEXT, REALTIME)
            request.request_id = request_id
            result["first"], result["served"], _ = _first_audio(stub, request, t0)
            result["t0"] = t0

        worker = threading.Thread(target=call)
        worker.start()
        time.sleep(0.1)  # the request is at qwen_tts, which is stopped: no audio
        killed, killed_wall = time.perf_counter(), time.time()
        os.kill(pid, signal.SIGKILL)
        worker.join(30)
        fleet.members["qwen_tts"].process.wait(10)
        assert result["served"].startswith("cosyvoice_tts"), result
        to_audio.append(result["t0"] + result["first"] - killed)
        decided = _log_time(log_path, f"(unavailable) request {request_id}")
        if decided is not None:
            to_decision.append(max(0.0, decided - killed_wall))
    return to_audio, to_decision, baseline


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of a process onto ``cpus`` (Linux)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def _relay_pinned(fleet: LocalFleet, stub) -> tuple[float, float, int] | None:
    """Relay percentiles with the router alone on CPU 1 and cosyvoice_tts (and this client) on CPU 0: what the
    router costs when it does not share a core with the synthesis."""
    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        return None
    mine = os.sched_getaffinity(0)
    _pin(fleet.members["cosyvoice_tts"].process.pid, {0})
    _pin(fleet.members["router"].process.pid, {1})
    os.sched_setaffinity(0, {0})
    try:
        port = fleet.config.router.metrics_port
        labels = {"method": "Synthesize"}
        before = buckets(scrape(port), "voicefleet_router_chunk_relay_seconds", **labels)
        for _ in range(CHUNK_RUNS):
            _wall(stub, LONG_TEXT, BROADCAST)
        after = buckets(scrape(port), "voicefleet_router_chunk_relay_seconds", **labels)
    finally:
        os.sched_setaffinity(0, mine)
    p50, n = bucket_quantile(before, after, 0.50)
    p99, _ = bucket_quantile(before, after, 0.99)
    return p50, p99, n


def _wall(stub, text, routing=None) -> tuple[float, int]:
    t0 = time.perf_counter()
    chunks = sum(1 for _ in stub.Synthesize(_request(text, routing), timeout=60))
    return time.perf_counter() - t0, chunks


def run():
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(
            tmp,
            services=("cosyvoice_tts", "qwen_tts", "router"),
            router={"routes": {"realtime": ["qwen_tts", "cosyvoice_tts"]}},
            cosyvoice_tts=UNCACHED_TTS,
        )
        try:
            with (
                grpc.insecure_channel(fleet.config.router.address) as rch,
                grpc.insecure_channel(fleet.config.cosyvoice_tts.address) as dch,
            ):
                router = synthesizer_pb2_grpc.SynthesizerStub(rch)
                direct = synthesizer_pb2_grpc.SynthesizerStub(dch)
                for stub in (router, direct):
                    _first_audio(stub, _request("Warm up."))
                ttfa_router = [_first_audio(router, _request(TEXT, BROADCAST))[0] for _ in range(TTFA_RUNS)]
                ttfa_direct = [_first_audio(direct, _request(TEXT))[0] for _ in range(TTFA_RUNS)]
                kill_to_audio, kill_to_decision, paired = _failover_runs(fleet, router)

                port = fleet.config.router.metrics_port
                labels = {"method": "Synthesize"}
                before = buckets(scrape(port), "voicefleet_router_chunk_relay_seconds", **labels)
                walls_router, walls_direct, chunk_counts = [], [], []
                for _ in range(CHUNK_RUNS):
                    w, n = _wall(router, LONG_TEXT, BROADCAST)
                    walls_router.append(w)
                    chunk_counts.append(n)
                    walls_direct.append(_wall(direct, LONG_TEXT)[0])
                after = buckets(scrape(port), "voicefleet_router_chunk_relay_seconds", **labels)
                pinned = _relay_pinned(fleet, router)  # last: it pins the processes
        finally:
            fleet.stop()

    base = statistics.median(ttfa_router)
    added = [s - b for s, b in zip(kill_to_audio, paired, strict=True)]
    p50, n_chunks = bucket_quantile(before, after, 0.50)
    p99, _ = bucket_quantile(before, after, 0.99)
    chunks = statistics.median(chunk_counts)
    per_chunk_e2e = [(r - d) / chunks * 1000 for r, d in zip(walls_router, walls_direct, strict=True)]
    rows = [
        Row("failover: SIGKILL before first audio -> first audio from the fallback", "s", kill_to_audio),
        Row(
            "failover added latency: that minus the fallback's TTFA via router just before",
            "s",
            added,
            note="paired per run",
        ),
        Row(
            "failover: SIGKILL -> router's failover decision (its log, ms resolution)",
            "s",
            kill_to_decision,
        ),
        Row("TTFA cosyvoice_tts via router (no failover)", "s", ttfa_router),
        Row("TTFA cosyvoice_tts direct", "s", ttfa_direct),
        Row(
            "router relay per chunk p50 (histogram)",
            "ms",
            [p50 * 1000],
            note=f"{n_chunks} chunks; goal <= 0.5 ms",
        ),
        Row("router relay per chunk p99 (histogram)", "ms", [p99 * 1000], note="goal <= 2 ms"),
        Row(
            "end to end per chunk: (wall via router - wall direct) / chunks",
            "ms",
            per_chunk_e2e,
            note=f"{chunks:.0f} chunks of <= 200 ms per request; includes piper's run-to-run variation",
        ),
    ]
    if pinned is not None:
        rows += [
            Row(
                "router relay per chunk p50, router alone on a core",
                "ms",
                [pinned[0] * 1000],
                note=f"{pinned[2]} chunks",
            ),
            Row("router relay per chunk p99, router alone on a core", "ms", [pinned[1] * 1000]),
        ]
    extra = {
        "router_added_ttfa_median_ms": round((base - statistics.median(ttfa_direct)) * 1000, 2),
        "relay_p50_ms": round(p50 * 1000, 3),
        "relay_p99_ms": round(p99 * 1000, 3),
        "killed_backend": "qwen_tts (espeak) standing in for moss_sts; realtime chain qwen_tts -> cosyvoice_tts",
        "load_average_at_end": os.getloadavg()[0],
    }
    return rows, extra
