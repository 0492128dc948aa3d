"""``make soak``: mixed traffic through the router for a configured time, and a long Converse soak.

Fleet: cosyvoice_tts + qwen_tts + asr + brain + moss_sts + router (the local CPU fleet) on free loopback ports. Every
workload goes through the router, each at its own rate (arrivals per second, open loop: a slow fleet does not slow
the arrivals; a client thread pool bounds what is in flight):

* ``synthesize``: Synthesize, one or two sentences (default route) — TTFA and RTF;
* ``stream``: StreamingSynthesize fed like an LLM (a word every 40 ms) — first audio after the first sentence end;
* ``asr``: StreamingRecognize of 2 sentences of speech at the pace of real time, interims on — speech end -> final;
* ``converse``: a Converse session of a few turns, one of them interrupted by the caller talking over the reply
  (a barge-in) — speech end -> first reply audio (the server's TurnTimings).

Report per workload: requests, latency p50/p95/p99, RTF, errors by gRPC status code (barge-ins are deliberate and
counted apart) or by ``EMPTY:<what>`` for a call that ended OK with nothing in it (a synthesis or stream with no
audio, a recognition with no final or an empty one, a turn completed with no reply audio): empty is an error, never
a success. A synthesis, stream or recognition refused by admission with a retry hint is tried again after the hint,
up to 4 tries (a client honouring gRPC's pushback does the same), and the refusal is noted under ``deliberate``;
per fleet process: RSS and open file descriptors after warm-up, at the baseline (``baseline_after_s``
into the run: the working set grows until every workload has run at its peak concurrency, then must stay flat; the
2026-11-24 mixed run grew asr from 529 to ~1150 MB in its first 6 minutes and stayed there) and at the end; growth
is counted from the baseline. A progress line every
``progress_s``. Profiles: ``smoke`` (9 s of arrivals, no warm-up workloads, in ``make test`` via
tests/fleet/test_soak_smoke.py), ``mixed`` (30 minutes),
``converse`` (1,000 Converse turns). ``python -m bench.soak --profile mixed --minutes 5`` overrides the time.
The report goes to bench/results/soak/<profile>.json and .md.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

from bench.harness import RESULTS, machine
from services.cli.fleet import LocalFleet
from services.common.errors import RETRY_PUSHBACK_KEY
from tests.fleet.test_conversation_fleet import Talk, close
from voice.v1 import (
    audio_pb2,
    conversation_pb2,
    recognizer_pb2,
    recognizer_pb2_grpc,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)

RATE = 16_000
# Beside make bench's results, not among them: a soak is its own run (bench/results/latest holds one make bench).
SOAK_RESULTS = RESULTS.parent / "soak"
FLEET = ("cosyvoice_tts", "qwen_tts", "asr", "brain", "moss_sts", "router")
SENTENCES = [
    "Hello, thanks for calling, your order shipped this morning.",
    "The meeting moved to nine, please bring the green folder.",
    "It will rain in the afternoon, so take an umbrella.",
    "Your table for four is ready at seven thirty.",
]
USER_LINES = ["What is two plus two?", "What color is the sky?", "How are you today?", "Name a big city."]
STORY = "Please tell me a long story about a brave little dragon who wanted to fly."
BARGE = "Stop. What is the capital of France?"
CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}
EMPTY = "EMPTY:"  # outcome codes of calls that ended OK with nothing in them: errors (see the module docstring)


@dataclasses.dataclass
class Profile:
    seconds: float = 0.0  # 0: until converse_turns are done
    rates: dict = dataclasses.field(default_factory=dict)  # workload -> arrivals per second
    turns_per_session: int = 4
    converse_turns: int = 0  # converse profile: stop after this many turns (sessions back to back)
    converse_sessions: int = 2  # converse profile: sessions at once
    max_in_flight: int = 8  # per workload
    progress_s: float = 10.0
    warmup_s: float = 5.0
    # RSS and open files are compared from this far into the run: the working set grows until every workload has
    # run at its peak concurrency (decoder pools, allocator arenas), then must stay flat. 0: right after warm-up.
    baseline_after_s: float = 0.0
    # Run every workload once before the clock starts (first decodes allocate their buffers, so the RSS baseline
    # is not the cold one). The smoke checks no growth, so it skips them.
    warm_workloads: bool = True
    asr_clips: int = 4  # distinct 2-sentence clips the asr workload cycles through (2 syntheses each)


PROFILES = {
    # Every workload's first arrival is at 0 s: 9 s of arrivals run synthesize 5 times, stream 3, asr 2 and one
    # converse session (a barged-in turn and the answer after it), all through the router at once. A second converse
    # session (at 10 s) would add ~15 s of drain and no new kind of turn.
    "smoke": Profile(
        seconds=9,
        rates={"synthesize": 0.5, "stream": 0.25, "asr": 0.15, "converse": 0.1},
        turns_per_session=2,
        warmup_s=1,
        warm_workloads=False,
        asr_clips=2,
    ),
    # Sized to about 60 % of what the CPU fleet sustains on 2 cores (a soak checks that a fleet under steady load stays
    # correct and flat; overload is tts_load's and admission's business). The 2026-11-24 run at 2 / 0.5 / 0.5 / 0.05
    # per second ran at load average ~9: ASR speech end -> final p50 7.9 s, 7 % of TTS refused by admission.
    "mixed": Profile(
        seconds=1800,
        rates={"synthesize": 1.0, "stream": 0.25, "asr": 0.2, "converse": 0.03},
        baseline_after_s=300,
    ),
    "converse": Profile(converse_turns=1000, converse_sessions=4, turns_per_session=10, baseline_after_s=300),
}


# --- recording ----------------------------------------------------------------------------------------------------
class Stats:
    """Per workload: latencies, RTFs, outcomes by status code. Thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = collections.defaultdict(list)
        self.rtf: dict[str, list[float]] = collections.defaultdict(list)
        self.codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.deliberate: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def ok(self, workload: str, latency: float | None = None, rtf: float | None = None) -> None:
        with self.lock:
            self.codes[workload]["OK"] += 1
            if latency is not None:
                self.latency[workload].append(latency)
            if rtf is not None:
                self.rtf[workload].append(rtf)

    def error(self, workload: str, code: str) -> None:
        with self.lock:
            self.codes[workload][code] += 1

    def note(self, workload: str, what: str) -> None:
        with self.lock:
            self.deliberate[workload][what] += 1

    def errors(self) -> int:
        with self.lock:
            return sum(n for c in self.codes.values() for code, n in c.items() if code != "OK")

    def empty(self) -> int:
        """Calls that ended OK with nothing in them (counted among the errors too)."""
        with self.lock:
            return sum(n for c in self.codes.values() for code, n in c.items() if code.startswith(EMPTY))

    def line(self) -> str:
        with self.lock:
            parts = []
            for w, c in sorted(self.codes.items()):
                bad = sum(n for code, n in c.items() if code != "OK")
                parts.append(f"{w} {c['OK']} ok/{bad} err")
            return ", ".join(parts)


def pct(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * len(xs)) - 1))] if xs else None


def process_stats(fleet: LocalFleet) -> dict[str, dict]:
    out = {}
    for name, m in fleet.members.items():
        pid = m.process.pid
        try:
            rss_kb = next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS:"))
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, StopIteration):
            continue
        out[name] = {"rss_mb": round(rss_kb / 1024, 1), "fds": fds}
    return out


# --- workloads ----------------------------------------------------------------------------------------------------
def _fmt16():
    return audio_pb2.AudioFormat(encoding=1, sample_rate_hz=RATE, channels=1)


def speech(stub, text: str) -> bytes:
    """16 kHz speech of ``text`` from the fleet itself (cosyvoice_tts piper through the router)."""
    config = synthesizer_pb2.SynthesisConfig(output_format=_fmt16())
    replies = stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text=text, config=config), timeout=60)
    return b"".join(r.audio.data for r in replies)


def synthesize(stub, stats: Stats, i: int) -> None:
    """One or two sentences; every third request names an espeak voice, so qwen_tts serves it."""
    text = " ".join(SENTENCES[i % len(SENTENCES) : i % len(SENTENCES) + 1 + i % 2])
    config = synthesizer_pb2.SynthesisConfig(voice="en-US") if i % 3 == 2 else None
    t0 = time.perf_counter()
    first, samples, rate = None, 0, 1
    for reply in stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text=text, config=config), timeout=60):
        first = first or time.perf_counter() - t0
        samples += len(reply.audio.data) // 2
        rate = reply.audio.format.sample_rate_hz
    if not samples:
        stats.error("synthesize", EMPTY + "no audio")
        return
    stats.ok("synthesize", first, (time.perf_counter() - t0) / (samples / rate))


def stream(stub, stats: Stats, i: int) -> None:
    words = " ".join(SENTENCES[i % len(SENTENCES) :][:2]).split(" ")
    end_of_first = next(k for k, w in enumerate(words) if w.endswith("."))
    marks: dict[str, float] = {}

    def requests():
        yield synthesizer_pb2.StreamingSynthesizeRequest(config=synthesizer_pb2.StreamingSynthesisConfig())
        for k, w in enumerate(words):
            time.sleep(0.04)
            yield synthesizer_pb2.StreamingSynthesizeRequest(text_delta=(" " if k else "") + w)
            if k == end_of_first:
                marks["sentence_end"] = time.perf_counter()
        yield synthesizer_pb2.StreamingSynthesizeRequest(end_of_text=True)

    first, audio = None, 0
    for reply in stub.StreamingSynthesize(requests(), timeout=60):
        audio += len(reply.audio.data)
        if audio and first is None:
            first = time.perf_counter()
    if not audio:
        stats.error("stream", EMPTY + "no audio")
        return
    stats.ok("stream", first - marks["sentence_end"] if "sentence_end" in marks else None)


def recognize(stub, stats: Stats, pcm: bytes, speech_end_s: float) -> None:
    cfg = recognizer_pb2.RecognitionConfig(input_format=_fmt16(), language="en-US", interim_results=True)
    clock: dict[str, float] = {}

    def requests():
        yield recognizer_pb2.StreamingRecognizeRequest(config=cfg)
        step = RATE * 20 // 1000 * 2
        t0 = clock["t0"] = time.monotonic()
        for k, start in enumerate(range(0, len(pcm), step)):
            time.sleep(max(0.0, t0 + k * 0.02 - time.monotonic()))
            yield recognizer_pb2.StreamingRecognizeRequest(audio=pcm[start : start + step])

    final_at, heard = None, []
    for reply in stub.StreamingRecognize(requests(), timeout=120):
        if reply.WhichOneof("event") == "result" and reply.result.is_final:
            # The last final: the one after speech end (the first sentence's own final can come before it).
            final_at = time.monotonic()
            heard.append(reply.result.transcript.strip())
    if final_at is None:
        stats.error("asr", EMPTY + "no final")
    elif not any(heard):
        stats.error("asr", EMPTY + "empty final")
    else:
        stats.ok("asr", final_at - (clock["t0"] + speech_end_s))


def converse(channel, stats: Stats, voices: dict[str, bytes], turns: int, barge_at: int | None) -> int:
    """One session of ``turns`` turns; turn ``barge_at`` asks for a story and is talked over (its barge-in line is the
    next turn's question, whose answer ends the session). Returns the turns answered."""
    talk = Talk(channel, sampling=conversation_pb2.SamplingConfig(max_tokens=96))

    def events(kind: str, turn: int) -> list:
        return [e for _, e in talk.of(kind, turn)]

    def ended(turn: int) -> bool:
        return bool(events("turn_complete", turn) or events("turn_error", turn))

    def record(turn: int) -> bool:
        """Count how the turn ended; True when it was answered."""
        errors = events("turn_error", turn)
        if errors:
            stats.error("converse", f"turn_error:{CODE_NAMES.get(errors[0].turn_error.code, 'UNKNOWN')}")
            return False
        if not any(e.reply_audio.data for e in events("reply_audio", turn)):
            stats.error("converse", EMPTY + "no reply audio")
            return False
        if events("interrupted", turn):
            stats.note("converse", "turn interrupted (deliberate)")
            stats.ok("converse")
        else:
            timings = events("turn_complete", turn)[0].turn_complete.timings
            stats.ok("converse", timings.speech_end_to_first_audio_ms / 1000 or None)
        return True

    done = 0
    try:
        for turn in range(turns):
            barge = turn == barge_at
            talk.send(voices[STORY] if barge else voices[USER_LINES[turn % len(USER_LINES)]])
            if barge:
                talk.wait(
                    lambda t=turn: (
                        sum(len(e.reply_audio.data) for e in events("reply_audio", t)) >= RATE * 2 or ended(t)
                    ),
                    120,
                )
                if ended(turn):
                    stats.note("converse", "barge_in_missed (reply ended first)")
                else:
                    talk.send(voices[BARGE])
                    caught = talk.wait(lambda t=turn: events("interrupted", t), 30)
                    stats.note("converse", "barge_in" if caught else "barge_in_missed")
            if not talk.wait(lambda t=turn: ended(t), 180):
                stats.error("converse", talk.error.code().name if talk.error else "NO_REPLY")
                return done
            done += record(turn)
            if barge:
                if events("interrupted", turn):
                    if talk.wait(lambda t=turn + 1: ended(t), 180):
                        done += record(turn + 1)
                    else:
                        stats.error("converse", talk.error.code().name if talk.error else "NO_REPLY")
                break
            time.sleep(0.3)
    finally:
        close(talk)
    return done


# --- driver -------------------------------------------------------------------------------------------------------
# A refusal with a retry hint is admission keeping what it let in real-time (services/common/scheduler.py), not a
# failure: a client waits the hint and tries again, as gRPC's own retry policy does with the pushback trailer. The
# soak does the same for the calls that are refused before any work (not a conversation: it would replay its turns),
# a few times at most; a refusal without a hint, or one past the last try, is an error.
RETRIED_WORKLOADS = ("synthesize", "stream", "asr")
MAX_TRIES = 4


def retry_hint_s(error: grpc.RpcError) -> float | None:
    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    for key, value in error.trailing_metadata() or ():
        if key == RETRY_PUSHBACK_KEY:
            return int(value) / 1000
    return None


def served(workload: str, stats: Stats, fn, *args):
    """``fn(*args)``, tried again after each refusal's retry hint (module comment above)."""
    for attempt in range(1, MAX_TRIES + 1):
        try:
            return fn(*args)
        except grpc.RpcError as e:
            hint = retry_hint_s(e)
            if workload not in RETRIED_WORKLOADS or hint is None or attempt == MAX_TRIES:
                raise
            stats.note(workload, "refused with a retry hint, tried again")
            time.sleep(hint)


def run_profile(profile: Profile, fleet: LocalFleet, name: str = "custom") -> dict:
    stats = Stats()
    address = fleet.config.router.address
    channel = grpc.insecure_channel(address)
    tts = synthesizer_pb2_grpc.SynthesizerStub(channel)
    asr = recognizer_pb2_grpc.RecognizerStub(channel)
    # Speech for ASR and the caller's lines, made once by the fleet, then warm-up traffic.
    voices = {text: speech(tts, text) for text in [*USER_LINES, STORY, BARGE]}
    lead = bytes(RATE // 2 * 2)
    asr_clips = []
    for k in range(min(profile.asr_clips, len(SENTENCES))):
        pcm = lead + speech(tts, SENTENCES[k]) + speech(tts, SENTENCES[(k + 1) % len(SENTENCES)])
        asr_clips.append((pcm + bytes(RATE * 2), len(pcm) / 2 / RATE))
    # Warm-up: every workload once (first decodes allocate their buffers), then TTS for warmup_s; RSS and open
    # files are taken after it, so growth means growth under load.
    warm = Stats()
    if profile.warm_workloads:
        synthesize(tts, warm, 1)
        stream(tts, warm, 0)
        recognize(asr, warm, *asr_clips[0])
        converse(channel, warm, voices, 2, 1)
    warm_until = time.monotonic() + profile.warmup_s
    while time.monotonic() < warm_until:
        synthesize(tts, warm, 0)
    before = process_stats(fleet)
    print(f"soak {name}: fleet warm; processes {before}", flush=True)

    stop = threading.Event()
    pools = {w: concurrent.futures.ThreadPoolExecutor(profile.max_in_flight) for w in profile.rates}
    in_flight = collections.Counter()
    turns_done = [0]
    lock = threading.Lock()

    def guarded(workload, fn, *args):
        try:
            result = served(workload, stats, fn, *args)
            if workload == "converse" and isinstance(result, int):
                with lock:
                    turns_done[0] += result
        except grpc.RpcError as e:
            stats.error(workload, e.code().name)
        except Exception as e:  # noqa: BLE001 - a client-side failure is reported, the soak goes on
            stats.error(workload, f"client:{type(e).__name__}")
        finally:
            with lock:
                in_flight[workload] -= 1

    def launch(workload: str, i: int) -> None:
        with lock:
            if in_flight[workload] >= profile.max_in_flight:
                stats.note(workload, "skipped: client at max_in_flight")
                return
            in_flight[workload] += 1
        if workload == "synthesize":
            args = (synthesize, tts, stats, i)
        elif workload == "stream":
            args = (stream, tts, stats, i)
        elif workload == "asr":
            args = (recognize, asr, stats, *asr_clips[i % len(asr_clips)])
        else:
            args = (converse, channel, stats, voices, profile.turns_per_session, i % profile.turns_per_session)
        pools[workload].submit(guarded, workload, *args)

    def arrivals(workload: str, rate: float) -> None:
        i, start = 0, time.monotonic()
        while not stop.is_set():
            launch(workload, i)
            i += 1
            stop.wait(max(0.0, start + i / rate - time.monotonic()))

    t0 = time.monotonic()
    threads = [threading.Thread(target=arrivals, args=(w, r), daemon=True) for w, r in profile.rates.items()]
    if profile.converse_turns:
        conv_pool = concurrent.futures.ThreadPoolExecutor(profile.converse_sessions)

        def sessions():
            while turns_done[0] < profile.converse_turns and not stop.is_set():
                with lock:
                    in_flight["converse"] += 1
                # barge-in on the last turn of every session: the session ends after it
                guarded(
                    "converse",
                    converse,
                    channel,
                    stats,
                    voices,
                    profile.turns_per_session,
                    profile.turns_per_session - 1,
                )

        futures = [conv_pool.submit(sessions) for _ in range(profile.converse_sessions)]
    for t in threads:
        t.start()
    next_progress = t0 + profile.progress_s
    steady = before if not profile.baseline_after_s else None
    while True:
        elapsed = time.monotonic() - t0
        if steady is None and elapsed >= profile.baseline_after_s:
            steady = process_stats(fleet)
            print(f"soak {name}: baseline after {elapsed:.0f} s under load; processes {steady}", flush=True)
        if profile.seconds and elapsed >= profile.seconds:
            break
        if profile.converse_turns and all(f.done() for f in futures):
            break
        if time.monotonic() >= next_progress:
            next_progress += profile.progress_s
            rss = sum(p["rss_mb"] for p in process_stats(fleet).values())
            turns = f", converse turns {turns_done[0]}/{profile.converse_turns}" if profile.converse_turns else ""
            print(f"[{elapsed:6.0f}s] {stats.line()}{turns}; fleet RSS {rss:.0f} MB", flush=True)
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    for pool in pools.values():
        pool.shutdown(wait=True)
    if profile.converse_turns:
        conv_pool.shutdown(wait=True)
    channel.close()
    after = process_stats(fleet)
    return report(name, profile, stats, before, steady or before, after, time.monotonic() - t0, turns_done[0])


def report(name, profile, stats, warm, before, after, seconds, turns) -> dict:
    """``warm``: after the warm-up; ``before``: the baseline (``baseline_after_s`` into the run); ``after``: the end."""
    workloads = {}
    for w in sorted(stats.codes):
        lat, rtf = stats.latency[w], stats.rtf[w]
        workloads[w] = {
            "requests": sum(stats.codes[w].values()),
            "codes": dict(stats.codes[w]),
            "deliberate": dict(stats.deliberate[w]),
            "latency_s": {q: pct(lat, v) for q, v in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))},
            "latency_n": len(lat),
            "rtf_p50": statistics.median(rtf) if rtf else None,
            "rtf_max": max(rtf) if rtf else None,
        }
    processes = {}
    for p, b in before.items():
        a = after.get(p)
        processes[p] = {
            "rss_mb_warm": warm.get(p, {}).get("rss_mb"),
            "rss_mb_start": b["rss_mb"],
            "rss_mb_end": a["rss_mb"] if a else None,
            "rss_growth_pct": round(100 * (a["rss_mb"] / b["rss_mb"] - 1), 1) if a else None,
            "fds_start": b["fds"],
            "fds_end": a["fds"] if a else None,
        }
    return {
        "profile": name,
        "machine": machine(),
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(seconds, 1),
        "baseline_after_s": profile.baseline_after_s,
        "rates_per_s": profile.rates,
        "converse_turns": turns,
        "errors": stats.errors(),
        "empty": stats.empty(),
        "workloads": workloads,
        "processes": processes,
    }


def markdown(rep: dict) -> str:
    def ms(x):
        return "" if x is None else f"{x * 1000:.0f} ms"

    m = rep["machine"]
    lines = [
        f"### soak {rep['profile']} — {m['date']}, {m['cores']} cores {m['cpu']}; {rep['seconds']:.0f} s,"
        f" load average at end {rep['load_average_end']}\n",
        "| workload | requests | latency p50 | p95 | p99 | RTF p50 | RTF max | status codes | deliberate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w, r in rep["workloads"].items():
        lat = r["latency_s"]
        rtf = "" if r["rtf_p50"] is None else f"{r['rtf_p50']:.3f}"
        rtf_max = "" if r["rtf_max"] is None else f"{r['rtf_max']:.3f}"
        lines.append(
            f"| {w} | {r['requests']} | {ms(lat['p50'])} | {ms(lat['p95'])} | {ms(lat['p99'])} | {rtf} | {rtf_max}"
            f" | {r['codes']} | {r['deliberate'] or ''} |"
        )
    lines += [
        "",
        f"RSS and fds from the baseline ({rep['baseline_after_s']:.0f} s into the run, under load) to the end:",
        "",
        "| process | RSS after warm-up | RSS baseline | RSS end | growth from baseline | fds baseline | fds end |",
        "|---|---|---|---|---|---|---|",
    ]
    for p, s in rep["processes"].items():
        lines.append(
            f"| {p} | {s['rss_mb_warm']} MB | {s['rss_mb_start']} MB | {s['rss_mb_end']} MB | {s['rss_growth_pct']} %"
            f" | {s['fds_start']} | {s['fds_end']} |"
        )
    lines.append(
        f"\nerrors (not deliberate): {rep['errors']}, of which empty (ended OK with nothing in it): {rep['empty']};"
        f" converse turns: {rep['converse_turns']}"
    )
    return "\n".join(lines)


def start_fleet(directory: Path, services=FLEET) -> LocalFleet:
    sections = {}
    if "brain" in services:
        sections["moss_sts"] = {"default_max_tokens": 48}
    return LocalFleet.on_free_ports(directory, services, **sections)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="mixed")
    parser.add_argument("--minutes", type=float, help="run this long (mixed, smoke)")
    parser.add_argument("--turns", type=int, help="Converse turns (converse profile)")
    parser.add_argument("--sessions", type=int, help="Converse sessions at once (converse profile)")
    args = parser.parse_args(argv)
    profile = dataclasses.replace(PROFILES[args.profile])
    if args.minutes:
        profile.seconds = args.minutes * 60
    if args.turns:
        profile.converse_turns = args.turns
    if args.sessions:
        profile.converse_sessions = args.sessions
    with tempfile.TemporaryDirectory() as tmp:
        fleet = start_fleet(Path(tmp))
        try:
            rep = run_profile(profile, fleet, args.profile)
        finally:
            fleet.stop()
    SOAK_RESULTS.mkdir(parents=True, exist_ok=True)
    (SOAK_RESULTS / f"{args.profile}.json").write_text(json.dumps(rep, indent=2))
    table = markdown(rep)
    (SOAK_RESULTS / f"{args.profile}.md").write_text(table + "\n")
    print(table)
    return 0 if rep["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
