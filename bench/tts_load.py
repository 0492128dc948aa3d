"""TTS under load: one sentence per request, N callers at once through the router (issue 10's table, side by side).

Fleet: cosyvoice_tts (piper, first-chunk-first scheduler, default config) + router on loopback. Per level N, N client
threads each send Synthesize requests back to back (closed loop) until REQUESTS requests are done (at least 2 per
client), in two ways:
  - callers arriving together: every client sends its first request at the same instant (issue 10's table). The
    first wave's N first segments then all need the cores before the last caller hears anything: on C cores its
    first audio comes after about N / C first-segment times, whatever the order;
  - callers arriving independently: each client's first request at its own moment, spread over STAGGER_S, then back
    to back (a fleet's normal traffic: callers do not synchronize).
Per request: TTFA (request sent -> first chunk), RTF (wall / audio) and the playback
gap: a player that starts at the first chunk and plays each chunk as it arrives stalls whenever the next chunk comes
after the audio already received has run out; the gap is the sum of those stalls (what the listener hears as
silence inside the reply). Per level: all chunks received / the level's wall time. Refusals (RESOURCE_EXHAUSTED) are
counted, not retried. The client shares the machine's cores with the fleet; quote ``uptime`` with the numbers (it is
in the JSON).

``python -m bench.tts_load`` runs it alone.
"""

from __future__ import annotations

import functools
import os
import random
import statistics
import sys
import tempfile
import threading
import time

import grpc

from bench.harness import UNCACHED_TTS, Row
from services.cli.fleet import LocalFleet
from voice.v1 import synthesizer_pb2 as pb
from voice.v1 import synthesizer_pb2_grpc

TEXT = "Hello, thanks for calling, your order shipped this morning and should arrive on Tuesday."
LEVELS = (1, 4, 8, 16)
REQUESTS = 32
# Callers arriving independently start within this long (about one reply's length at 8 callers).
STAGGER_S = 1.5
ARRIVALS = ("together", "independently")
# Issue 10, measured before the scheduler (2-core Intel Xeon VM, quiet, 16 requests per level): N -> (TTFA p50 ms,
# TTFA p95 ms, RTF p50, chunks/s).
BEFORE = {1: (158, 182, 0.045, 116), 4: (686, 733, 0.19, 111), 8: (1247, 1505, 0.34, 111), 16: (1938, 2707, 0.48, 113)}


def _one(stub, text: str) -> tuple[float, float, int, float]:
    """TTFA, RTF, chunks and playback gap (seconds of stall after the first chunk) of one request."""
    t0 = time.perf_counter()
    first, samples, rate, chunks = None, 0, 1, 0
    played_until, gap = 0.0, 0.0  # when the audio received so far runs out, on the perf_counter clock
    for reply in stub.Synthesize(pb.SynthesizeRequest(text=text), timeout=120):
        now = time.perf_counter()
        first = first or now - t0
        rate = reply.audio.format.sample_rate_hz
        n = len(reply.audio.data) // 2
        if chunks and now > played_until:
            gap += now - played_until
        played_until = max(played_until, now) + n / rate
        samples += n
        chunks += 1
    return first, (time.perf_counter() - t0) / (samples / rate), chunks, gap


def level(address: str, n: int, requests: int = REQUESTS, text: str = TEXT, stagger_s: float = 0.0) -> dict:
    """N closed-loop clients (the first requests spread over ``stagger_s``, 0 = all at once); returns ttfa, rtf
    lists, chunks/s, refusals by code."""
    total = max(requests, 2 * n)
    starts = [random.Random(n * 1000 + i).uniform(0, stagger_s) for i in range(n)]
    lock = threading.Lock()
    issued = [0]
    ttfa: list[float] = []
    rtf: list[float] = []
    gaps: list[float] = []
    chunks = [0]
    errors: dict[str, int] = {}
    barrier = threading.Barrier(n)

    def client(i: int):
        with grpc.insecure_channel(address) as channel:
            stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
            barrier.wait()
            time.sleep(starts[i])
            while True:
                with lock:
                    if issued[0] >= total:
                        return
                    issued[0] += 1
                try:
                    first, r, c, g = _one(stub, text)
                except grpc.RpcError as e:
                    with lock:
                        errors[e.code().name] = errors.get(e.code().name, 0) + 1
                    continue
                with lock:
                    ttfa.append(first)
                    rtf.append(r)
                    gaps.append(g)
                    chunks[0] += c

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"ttfa": ttfa, "rtf": rtf, "gaps": gaps, "chunks_per_s": chunks[0] / wall, "errors": errors}


def stalled(gaps: list[float]) -> int:
    """Requests whose playback stalled (a gap over 1 ms: below that it is timer noise, not silence one hears)."""
    return sum(g > 0.001 for g in gaps)


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(0.95 * len(xs)) - 1))] if xs else float("nan")


def _ms(xs: list[float], f) -> str:
    return f"{f(xs) * 1000:.0f}" if xs else "–"


def _was(before: tuple | None, i: int, spec: str) -> str:
    """Issue 10's figure ``i`` and an arrow, or nothing where the issue has no figure."""
    return f"{before[i]:{spec}} → " if before else ""


def side_by_side(results: dict[tuple[int, str], dict]) -> str:
    lines = [
        "| concurrent | callers arrive | TTFA p50 before → now | TTFA p95 before → now | RTF p50 before → now |"
        " RTF max now | chunks/s before → now | refused | requests with a playback gap | gap p95 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (n, arrival), r in results.items():
        # Issue 10's figures were measured with callers arriving together: only those rows have a "before".
        before = BEFORE.get(n) if arrival == "together" else None
        was = functools.partial(_was, before)

        rtf_p50 = f"{statistics.median(r['rtf']):.3f}" if r["rtf"] else "–"
        lines.append(
            f"| {n} | {arrival} | {was(0, '.0f')}{_ms(r['ttfa'], statistics.median)} ms"
            f" | {was(1, '.0f')}{_ms(r['ttfa'], p95)} ms"
            f" | {was(2, '.3f')}{rtf_p50} | {max(r['rtf'], default=float('nan')):.3f}"
            f" | {was(3, '.0f')}{r['chunks_per_s']:.0f} | {sum(r['errors'].values())}"
            f" | {stalled(r['gaps'])} of {len(r['gaps'])} | {_ms(r['gaps'], p95)} ms |"
        )
    return "\n".join(lines)


def run():
    uptime_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(tmp, cosyvoice_tts=UNCACHED_TTS)
        try:
            address = fleet.config.router.address
            level(address, 1, requests=3)  # warm the channels and the engine
            results = {}
            for n in LEVELS:
                for arrival in ARRIVALS:
                    r = results[n, arrival] = level(address, n, stagger_s=STAGGER_S if arrival != "together" else 0)
                    print(
                        f"  {n} concurrent, arriving {arrival}: TTFA p50 {_ms(r['ttfa'], statistics.median)} ms,"
                        f" p95 {_ms(r['ttfa'], p95)} ms, RTF max {max(r['rtf'], default=float('nan')):.3f},"
                        f" gaps {stalled(r['gaps'])}/{len(r['gaps'])}, errors {r['errors']}",
                        flush=True,
                    )
        finally:
            fleet.stop()
    rows = []
    for (n, arrival), r in results.items():
        rows.append(Row(f"piper TTFA via router, {n} concurrent, arriving {arrival}", "s", r["ttfa"]))
        rows.append(Row(f"piper RTF via router, {n} concurrent, arriving {arrival} (per request)", "x", r["rtf"]))
        rows.append(
            Row(f"piper playback gap via router, {n} concurrent, arriving {arrival} (per request)", "s", r["gaps"])
        )
    extra = {
        "text": TEXT,
        "requests_per_level": REQUESTS,
        "stagger_s": STAGGER_S,
        "table": "\n" + side_by_side(results),
        # Issue 10's criterion, both ways; "together" is bounded below by about N / cores (module doc).
        "ttfa_p95_8_over_1": {
            arrival: round(p95(results[8, arrival]["ttfa"]) / p95(results[1, arrival]["ttfa"]), 2)
            for arrival in ARRIVALS
        },
        "every_request_rtf_below_1": all(max(r["rtf"], default=0) < 1 for r in results.values()),
        "load_average_before_after": [round(x, 2) for x in (*uptime_before, *os.getloadavg())],
        "errors": {f"{n} {arrival}": r["errors"] for (n, arrival), r in results.items()},
    }
    return rows, extra


if __name__ == "__main__":
    from bench.harness import markdown, write

    rows, extra = run()
    print(markdown([write("tts_load", rows, extra)]))
    sys.exit(0)
