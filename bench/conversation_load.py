"""Conversations at once (issue 49): 1, 2, 4 ... callers, each in its own session through the router, saying complete
lines of the turn set (bench/turn_set.py) at the pace of real time, playing every reply to its end, then pausing
PAUSE_S before the next line, as people on a call do. Measured at the client: the line's last word spoken -> the first
reply audio received, per session (p50 / p95), and how calls ended: served, refused at once (RESOURCE_EXHAUSTED with
its retry hint) or failed. The callers are bench/turn_taking.py's (a microphone that sends 20 ms frames on schedule
and a speaker that plays what comes).

``python -m bench.conversation_load [OUT_DIR] [SESSIONS ...]`` runs it on a fresh CPU fleet (brain, asr, moss_sts,
router) at the shipped defaults, with one caller more than the capacity last, and prints the table;
``make bench conversation`` runs it as rows of the conversation benchmark. ``BENCH_FALLBACK=1`` runs it with no
moss_sts in the fleet: the router's fallback cascade serves every session (what callers get while moss_sts is down).
``BENCH_KILL_MOSS=1`` runs the sessions the capacity admits, each saying ``KILL_TURNS`` lines, and SIGKILLs moss_sts
once every caller has had ``KILL_AFTER`` replies: the router moves each session to its cascade (remote asr -> brain ->
cosyvoice_tts), and the table splits each session's latencies at the kill.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time

import grpc
import numpy as np

from bench import turn_taking
from bench.turn_set import TurnSet
from voice.v1 import recognizer_pb2

SESSIONS = (1, 2, 4)  # and one more than the capacity, whose extra caller must be refused at once
TURNS = 5  # lines each caller says
PAUSE_S = 1.0  # the caller's pause after a reply has played, before its next line
START_SPREAD_S = 1.5  # callers dial in over this long, not in one instant
KILL_TURNS = 8  # BENCH_KILL_MOSS=1: lines each caller says ...
KILL_AFTER = 3  # ... and moss_sts is killed once every caller has had this many replies


def _caller(channel, turn_set: TurnSet, index: int, seed: int, out: dict, turns: int = TURNS) -> None:
    lines = list(turn_set.complete)
    random.Random(seed * 100 + index).shuffle(lines)
    caller = turn_taking.Caller(
        channel, turn_taking.conversation_config(recognizer_pb2.EndpointingConfig.MODE_SEMANTIC)
    )
    latencies, timings, without_reply = [], [], 0
    spoken_at: list[float] = []  # when each measured line's speech ended (monotonic), to split at a kill
    out[index] = {"latencies": latencies, "spoken_at": spoken_at, "ending": "speaking"}
    try:
        for line_id in (lines * 2)[:turns]:
            line = turn_set.line(line_id)
            first_turn = caller.next_turn()
            said = caller.say(f"{index}:{line_id}", line.pcm)
            if not _played_out(caller, first_turn, said):
                break
            first_audio = caller.of("reply_audio", first_turn)
            if first_audio:
                latencies.append(first_audio[0][0] - said.spoken_at(line.speech_end_ms))
                spoken_at.append(said.spoken_at(line.speech_end_ms))
            else:
                without_reply += 1
            timings.extend(turn_taking._timings(e) for e in caller.turns_ended(first_turn).values())
            time.sleep(PAUSE_S)
    finally:
        caller.close()
    error = caller.error
    if isinstance(error, grpc.RpcError) and error.code() != grpc.StatusCode.CANCELLED:
        code = error.code()
        ending = "refused" if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not latencies else "failed"
        out[index] = {
            "latencies": latencies,
            "spoken_at": spoken_at,
            "timings": timings,
            "ending": ending,
            "status": f"{code.name}: {error.details()}",
        }
        return
    out[index] = {
        "latencies": latencies,
        "spoken_at": spoken_at,
        "timings": timings,
        "ending": "served",
        "without_reply": without_reply,
    }


def _played_out(caller: turn_taking.Caller, first_turn: int, said, timeout: float = 90.0) -> bool:
    """Wait until the line is said and every turn it caused has ended (its reply played); False if the call ended."""
    deadline = time.monotonic() + timeout
    while not said.done.wait(0.05):
        if caller.done.is_set() or time.monotonic() > deadline:
            return False
    while time.monotonic() < deadline:
        if caller.done.is_set():
            return False
        ended = caller.turns_ended(first_turn)
        if ended and not caller.open_turns(first_turn) and time.monotonic() - caller.last_activity(first_turn) > 0.5:
            return True
        time.sleep(0.05)
    return True


def measure(channel, turn_set: TurnSet, sessions: int, seed: int = 23) -> dict[int, dict]:
    """``sessions`` callers at once; per caller: latencies (s), ending (served / refused / failed), status."""
    out: dict[int, dict] = {}
    threads = []
    for i in range(sessions):
        thread = threading.Thread(target=_caller, args=(channel, turn_set, i, seed, out), name=f"caller-{i}")
        thread.start()
        threads.append(thread)
        time.sleep(START_SPREAD_S / max(1, sessions))
    for thread in threads:
        thread.join()
    return out


def measure_kill(fleet, channel, turn_set: TurnSet, sessions: int, seed: int = 23) -> dict:
    """``sessions`` callers saying KILL_TURNS lines each; moss_sts SIGKILLed once each has had KILL_AFTER replies.
    Per caller as ``measure``'s, and the kill's monotonic time."""
    import signal

    out: dict[int, dict] = {}
    threads = []
    for i in range(sessions):
        args = (channel, turn_set, i, seed, out, KILL_TURNS)
        thread = threading.Thread(target=_caller, args=args, name=f"caller-{i}")
        thread.start()
        threads.append(thread)
        time.sleep(START_SPREAD_S / max(1, sessions))
    while not all(len(out.get(i, {}).get("latencies", ())) >= KILL_AFTER for i in range(sessions)):
        if not any(t.is_alive() for t in threads):
            break
        time.sleep(0.05)
    moss = fleet.members["moss_sts"].process
    os.kill(moss.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    moss.wait(timeout=30)
    for thread in threads:
        thread.join()
    return {"killed_at": killed_at, "callers": out}


def kill_table(run: dict) -> str:
    """Per session: first reply audio p50 / p95 before and after moss_sts was killed, and how the call ended."""
    rows = ["| session | before the kill p50 / p95 (ms) | after it p50 / p95 (ms) | ending |", "|---|---|---|---|"]
    for i, c in sorted(run["callers"].items()):
        cells = []
        for after in (False, True):
            xs = [x for x, t in zip(c["latencies"], c["spoken_at"], strict=True) if (t > run["killed_at"]) == after]
            stats = p50_p95(xs)
            cells.append(f"{stats[0] * 1000:.0f} / {stats[1] * 1000:.0f} (n={len(xs)})" if stats else "-")
        rows.append(f"| {i} | {cells[0]} | {cells[1]} | {c['ending']} {c.get('status', '')[:120]} |")
    return "\n".join(rows)


def p50_p95(xs: list[float]) -> tuple[float, float] | None:
    if not xs:
        return None
    xs = sorted(xs)
    return float(np.median(xs)), xs[min(len(xs) - 1, max(0, round(0.95 * len(xs)) - 1))]


def table(results: dict[int, dict[int, dict]]) -> str:
    """The markdown table: one row per number of sessions, each served session's p50 / p95 (ms)."""
    rows = [
        "| sessions at once | first reply audio p50 / p95 per served session (ms) | served | refused | failed |",
        "|---|---|---|---|---|",
    ]
    for n, callers in sorted(results.items()):
        per = []
        for i in sorted(callers):
            c = callers[i]
            stats = p50_p95(c["latencies"])
            if c["ending"] == "served" and stats:
                per.append(f"{stats[0] * 1000:.0f} / {stats[1] * 1000:.0f} (n={len(c['latencies'])})")
        endings = [c["ending"] for c in callers.values()]
        rows.append(
            f"| {n} | {'; '.join(per) or '-'} | {endings.count('served')} | {endings.count('refused')} |"
            f" {endings.count('failed')} |"
        )
    return "\n".join(rows)


def rows(results: dict[int, dict[int, dict]]) -> list:
    """Harness rows: per number of sessions, every served session's latencies pooled, per-session p95s and the
    endings in the note."""
    from bench.harness import Row

    out = []
    for n, callers in sorted(results.items()):
        served = [c for c in callers.values() if c["ending"] == "served"]
        p95s = [f"{p50_p95(c['latencies'])[1] * 1000:.0f}" for c in served if c["latencies"]]
        endings = [c["ending"] for c in callers.values()]
        refusals = [c["status"] for c in callers.values() if c["ending"] == "refused"]
        note = (
            f"{TURNS} real-time lines each, replies played; per-session p95 ms: {', '.join(p95s) or '-'};"
            f" served {endings.count('served')}, refused {endings.count('refused')}, failed {endings.count('failed')}"
            + (f"; refused with: {refusals[0][:160]}" if refusals else "")
        )
        latencies = [x for c in served for x in c["latencies"]]
        out.append(
            Row(f"{n} conversation(s) at once: line's speech end -> first reply audio (caller)", "s", latencies, note)
        )
    return out


def run_all(sessions: tuple[int, ...] = SESSIONS) -> dict[int, dict[int, dict]]:
    """A fresh fleet at the shipped defaults (replies up to moss_sts.default_max_tokens), each number of sessions in
    turn, then one caller more than the capacity."""
    from bench.turn_set import build
    from services.common.config import load_config
    from services.common.sts_servicer import StsLimits

    turn_set = build(23)
    capacity = StsLimits.from_config(load_config().moss_sts).max_concurrent_sessions
    results = {}
    overrides = json.loads(os.environ.get("BENCH_OVERRIDES", "{}"))  # config sections, e.g. {"brain": {...}}
    # the shipped reply length (conversation_fleet caps it at 48 otherwise)
    overrides.setdefault("moss_sts", {}).setdefault("default_max_tokens", load_config().moss_sts.default_max_tokens)
    # BENCH_FALLBACK=1: no moss_sts in the fleet, so the router's own cascade (its fallback: remote asr -> brain ->
    # cosyvoice_tts) serves every session, at the same capacity (the router admits by the moss_sts section's).
    services = ("brain", "asr", "cosyvoice_tts", "router") if os.environ.get("BENCH_FALLBACK") == "1" else None
    if os.environ.get("BENCH_KILL_MOSS") == "1":
        services = ("brain", "asr", "moss_sts", "cosyvoice_tts", "router")
        with turn_taking.conversation_fleet_and_channel(overrides, services) as (fleet, channel):
            return {"kill": measure_kill(fleet, channel, turn_set, capacity), "capacity": capacity}
    with turn_taking.conversation_fleet(overrides, **({"services": services} if services else {})) as channel:
        for n in sorted({*sessions, capacity + 1}):
            results[n] = measure(channel, turn_set, n)
    return results


def main(argv: list[str]) -> None:
    """``python -m bench.conversation_load [OUT_DIR] [SESSIONS ...]``: the table, and OUT_DIR/results.json + .md."""
    import datetime
    import pathlib

    from bench.harness import machine

    out = pathlib.Path(argv[0]) if argv and not argv[0].isdigit() else None
    sessions = tuple(int(a) for a in argv[1 if out else 0 :]) or SESSIONS
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    results = run_all(sessions)
    text = kill_table(results["kill"]) if "kill" in results else table(results)
    print(text)
    for callers in [results["kill"]["callers"]] if "kill" in results else results.values():
        for c in callers.values():
            if c["ending"] != "served":
                print(f"  {c['ending']}: {c.get('status', '')}")
    if out:
        out.mkdir(parents=True, exist_ok=True)
        record = {"started": started, "machine": machine(), "turns": TURNS, "pause_s": PAUSE_S, "results": results}
        (out / "results.json").write_text(json.dumps(record, indent=1, default=str))
        (out / "results.md").write_text(f"Started {started}; machine: {record['machine']}\n\n{text}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
