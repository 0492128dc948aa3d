"""Every panel of the provisioned dashboard shows data from a real fleet (`make dashboards`).

The whole CPU fleet (cosyvoice_tts, qwen_tts, asr, brain, moss_sts, router) runs on loopback with GPU leases on a
virtual 10 GiB card that cosyvoice_tts and qwen_tts must share, and a real Prometheus (Debian's package) scrapes it
every second with deploy/prometheus/rules.yml loaded. A short mixed load exercises what each panel is about:
synthesis on three engines at once, cancels, recognition, a conversation with a barge-in, callers over the asr's and
qwen_tts's stream limits (admission rejected), and a hung moss_sts (SIGSTOP: failovers, an ejection, failed probes, an expired
lease; then SIGCONT). Then each query of deploy/grafana/dashboards/voicefleet.json is evaluated over the run with
query_range and must give at least one series with a finite value (a rate of events: one above 0): a panel that
shows nothing is a defect.

With DASHBOARD_DATA_DIR=DIR (not VOICEFLEET_*: that prefix means config overrides) the answers are kept as JSON
for scripts/render-dashboards.py (PNGs in docs/dashboards/).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml

from services.cli.fleet import free_port
from services.common import audio
from tests.conftest import start_fleet, wait_until
from tests.fleet.test_conversation_fleet import RATE, Talk, close, trim
from voice.v1 import (
    audio_pb2,
    conversation_pb2,
    recognizer_pb2,
    recognizer_pb2_grpc,
    routing_pb2,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "voicefleet.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
SCRAPED = ("router", "cosyvoice_tts", "qwen_tts", "asr", "moss_sts", "gateway")
RATE_WINDOW = "30s"  # Grafana's $__rate_interval for a 1 s scrape at this zoom
pytestmark = [
    pytest.mark.dashboards,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(not shutil.which("prometheus"), reason="needs Debian's prometheus package"),
]


def panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def promql(expr: str) -> str:
    return expr.replace("$__rate_interval", RATE_WINDOW)


class Prometheus:
    def __init__(self, directory: Path, targets: list[str]):
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "voicefleet", "static_configs": [{"targets": targets}]}],
        }
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def api(self, path: str, **params) -> list[dict]:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as reply:
            return json.load(reply)["data"]["result"]

    def up(self) -> int:
        try:
            return len(self.api("query", query='up{job="voicefleet"} == 1'))
        except OSError:
            return 0

    def stop(self):
        self.process.terminate()
        self.process.wait(15)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = start_fleet(
        tmp_path_factory.mktemp("dashboard-fleet"),
        services=("cosyvoice_tts", "qwen_tts", "asr", "brain", "moss_sts", "router", "gateway"),
        router={
            "leases": {"capacity_gb": 10, "min_residency_seconds": 1, "ttl_seconds": 6, "renew_deadline_seconds": 4},
            "routes": {"first_audio_timeout_ms": 2000},
            "health": {"eject_after_failures": 2, "deep_probe_interval_seconds": 2, "deep_probe_deadline_ms": 2000},
        },
        residency={
            "enabled": True,
            "services": {
                "cosyvoice_tts": {"declared_gb": 6, "priority": "INTERACTIVE", "swap_in_ms": 500},
                "qwen_tts": {"declared_gb": 5, "priority": "INTERACTIVE", "swap_in_ms": 300},
                "asr": {"declared_gb": 1, "priority": "INTERACTIVE"},
                "moss_sts": {"declared_gb": 2, "priority": "REALTIME"},
            },
        },
        asr={"max_concurrent_streams": 1, "idle_timeout_seconds": 3},
        qwen_tts={"max_concurrent_syntheses": 2},
        # turn_commit_ms 600: every turn's reply starts at its final and is held until the commit, so the preemptive
        # replies panel has data (at the default 250 ms the final, ~250-300 ms after speech end on 2 cores, now often
        # comes after the commit time and the reply is not preemptive at all).
        moss_sts={"idle_timeout_seconds": 5, "default_max_tokens": 48, "turn_commit_ms": 600, "log_level": "DEBUG"},
    )
    yield running
    running.fleet.stop()


def synthesize(channel, text: str, *, engine: str = "", mode=0, rate: int = 0) -> bytes:
    config = synthesizer_pb2.SynthesisConfig(
        output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1),
        routing=routing_pb2.Routing(engine=engine, mode=mode),
    )
    stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
    replies = stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text=text, config=config), timeout=120)
    return b"".join(r.audio.data for r in replies)


def recognize(channel, pcm: bytes, *, pace: bool = True) -> list[str]:
    """Finals for 16 kHz speech sent in 100 ms chunks (at real-time pace, then 1 s of silence)."""
    chunk = RATE // 10 * 2

    def requests():
        config = recognizer_pb2.RecognitionConfig(
            input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=RATE, channels=1),
            interim_results=True,
        )
        yield recognizer_pb2.StreamingRecognizeRequest(config=config)
        for i in range(0, len(pcm) + RATE * 2, chunk):
            data = pcm[i : i + chunk] or bytes(chunk)
            yield recognizer_pb2.StreamingRecognizeRequest(audio=data)
            if pace:
                time.sleep(0.1)

    stub = recognizer_pb2_grpc.RecognizerStub(channel)
    events = stub.StreamingRecognize(requests(), timeout=120)
    return [e.result.transcript for e in events if e.HasField("result") and e.result.is_final]


def cancel_after_first_chunk(channel, text: str, engine: str) -> None:
    stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
    config = synthesizer_pb2.SynthesisConfig(routing=routing_pb2.Routing(engine=engine))
    call = stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text=text, config=config), timeout=120)
    next(call)
    call.cancel()


def test_every_panel_query_returns_data_from_a_loaded_fleet(fleet, tmp_path):
    prom = Prometheus(tmp_path, [f"127.0.0.1:{getattr(fleet.config, n).metrics_port}" for n in SCRAPED])
    try:
        assert wait_until(lambda: prom.up() == len(SCRAPED), timeout=60), "Prometheus does not see every target"
        start = time.time()
        run_mixed_load(fleet)
        time.sleep(5)  # the last scrapes and rule evaluations
        end = time.time()
        answers = evaluate_panels(prom, start, end)
    finally:
        prom.stop()
    empty = [f"{a['title']} [{t['refId']}]: {t['expr']}" for a in answers for t in a["targets"] if not shows(t)]
    out = os.environ.get("DASHBOARD_DATA_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        meta = {"start": start, "end": end, "rate_window": RATE_WINDOW, "load": os.getloadavg()}
        (Path(out) / "panels.json").write_text(json.dumps({"meta": meta, "panels": answers}))
    print(f"\n{sum(len(a['targets']) for a in answers)} queries over {end - start:.0f} s of load; empty: {len(empty)}")
    assert not empty, "queries without data:\n" + "\n".join(empty)


def shows(target: dict) -> bool:
    """The query drew something: a finite value; for a rate or increase of events, one above 0 (0 is what a
    counter that never moved, or one born with its only event, draws)."""
    values = [float(v) for series in target["result"] for _, v in series["values"]]
    expr = target["expr"]
    if ("rate(" in expr or "increase(" in expr) and "histogram_quantile" not in expr:
        return any(math.isfinite(v) and v > 0 for v in values)
    return any(math.isfinite(v) for v in values)


def evaluate_panels(prom: Prometheus, start: float, end: float) -> list[dict]:
    answers = []
    for panel in panels():
        targets = []
        for t in panel["targets"]:
            result = prom.api("query_range", query=promql(t["expr"]), start=start, end=end, step=2)
            targets.append({**t, "result": result})
        answers.append(
            {"title": panel["title"], "unit": panel["fieldConfig"]["defaults"].get("unit", ""), "targets": targets}
        )
    return answers


def run_mixed_load(fleet) -> None:
    """About two minutes of everything the dashboard is about; each part checks it did what it meant to."""
    with fleet.channel("router") as router, fleet.channel("asr") as asr:
        stop = threading.Event()
        errors: list[BaseException] = []

        def speaker(engine: str, mode=0):
            n = 0
            while not stop.is_set():
                try:
                    synthesize(router, f"Load sentence number {n} for the dashboards.", engine=engine, mode=mode)
                except grpc.RpcError as e:
                    if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                        errors.append(e)
                n += 1
                time.sleep(0.5)

        def gateway_speaker():  # the gateway's panels: OpenAI-style speech through its HTTP port
            url = f"http://{fleet.address('gateway')}/v1/audio/speech"
            n = 0
            while not stop.is_set():
                body = json.dumps({"input": f"Gateway sentence number {n}.", "response_format": "pcm"}).encode()
                request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
                try:
                    urllib.request.urlopen(request, timeout=120).read()
                except urllib.error.HTTPError as e:
                    if e.code not in (429, 503):
                        errors.append(e)
                n += 1
                time.sleep(1.0)

        threads = [threading.Thread(target=speaker, args=(e,), daemon=True) for e in ("cosyvoice_tts", "qwen_tts")] + [
            threading.Thread(target=speaker, args=("", routing_pb2.ROUTE_MODE_REALTIME), daemon=True),
            threading.Thread(target=gateway_speaker, daemon=True),
        ]
        for t in threads:
            t.start()

        say = {
            text: trim(synthesize(router, text, engine="cosyvoice_tts", rate=RATE))
            for text in (
                "The quick brown fox jumps over the lazy dog.",
                "What is two plus two?",
                "Stop. Thank you.",
                "Mm-hm.",
            )
        }
        story = "Please tell me a long story about a brave little dragon who wanted to fly."
        say[story] = trim(synthesize(router, story, engine="cosyvoice_tts", rate=RATE))

        # Cancels: the engine stops within a step.
        for engine in ("cosyvoice_tts", "qwen_tts"):
            cancel_after_first_chunk(router, "One. Two. Three. Four. Five. Six. Seven. Eight. Nine. Ten.", engine)

        # Recognition through the router (interims and finals).
        finals = recognize(router, say["The quick brown fox jumps over the lazy dog."])
        assert any("fox" in f.lower() for f in finals), finals

        # Admission: asr serves one stream at a time here; a second caller is turned away (twice, a few scrapes
        # apart: a counter's first sample already holds its first increment, which no rate() can see).
        # The first caller holds the place before the others knock (the router's stream above may still be finishing
        # on the asr service: wait for it to leave, then for the first caller to be in).
        def recognizing() -> float:
            return fleet.metric("asr", "voicefleet_active_streams", method="StreamingRecognize")

        assert wait_until(lambda: recognizing() == 0, 30), "asr still serves the router's stream"
        # The first caller talks for ~10 s (its question, then silence at real pace): both knocks below, 2.5 s apart,
        # come while it holds the place (with only its 2.3 s question the second knock could find the place free).
        held = say["What is two plus two?"] + bytes(RATE * 2 * 8)
        first = threading.Thread(target=recognize, args=(asr, held), daemon=True)
        first.start()
        assert wait_until(lambda: recognizing() == 1, 30), "the first caller's stream never started"
        for _ in range(2):
            with pytest.raises(grpc.RpcError) as rejected:
                recognize(asr, say["What is two plus two?"], pace=False)
            assert rejected.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            time.sleep(2.5)
        first.join(60)

        # TTS admission: qwen_tts serves two syntheses at a time here (one is the load's); of four more at once, some
        # are refused (twice).
        with fleet.channel("qwen_tts") as qwen:
            for _ in range(2):
                outcomes: list[str] = []

                def burst(qwen=qwen, outcomes=outcomes):
                    try:
                        synthesize(qwen, "One, two, three, four, five, six, seven, eight.")
                        outcomes.append("OK")
                    except grpc.RpcError as e:
                        outcomes.append(e.code().name)

                callers = [threading.Thread(target=burst, daemon=True) for _ in range(4)]
                for c in callers:
                    c.start()
                for c in callers:
                    c.join(120)
                assert "RESOURCE_EXHAUSTED" in outcomes, outcomes
                time.sleep(2.5)

        # A conversation: one turn, then a barge-in over a long reply.
        talk = Talk(router, sampling=conversation_pb2.SamplingConfig(max_tokens=160))
        try:
            talk.send(say["What is two plus two?"])
            assert talk.wait(lambda: talk.ended(0), timeout=120), talk.events[-5:]

            # The story's length is the brain's choice (seeded, but its prompt is what the recognizer heard): a reply
            # that ends before the backchannel or the barge-in is sent, or while it is said, leaves nothing to speak
            # over (the words are then a turn of their own), so the story is asked again (a new turn), at most four
            # times, until a backchannel was refused and a barge-in interrupted.
            def refused() -> float:
                return fleet.metric("moss_sts", "voicefleet_sts_barge_in_refused_total")

            story_turn = 1
            for _attempt in range(4):
                talk.send(say[story], label="story")
                assert talk.wait(lambda t=story_turn: bool(talk.of("reply_audio", t)), timeout=120), talk.events[-5:]
                time.sleep(0.5)
                if talk.ended(story_turn):
                    story_turn += 1
                    continue
                if not refused():
                    talk.send(say["Mm-hm."], label="backchannel")  # over the reply: not a barge-in (counted as refused)
                    if not wait_until(lambda t=story_turn: refused() > 0 or talk.ended(t), timeout=3.0, interval=0.2):
                        print("\nthe backchannel was not counted as refused within 3 s: the story is asked again")
                    if talk.ended(story_turn):
                        story_turn += 1
                        continue
                talk.send(say["Stop. Thank you."], label="barge-in")
                talk.wait(lambda t=story_turn: bool(talk.of("interrupted")) or talk.ended(t), timeout=60)
                if talk.of("interrupted") and refused():
                    break
                # The reply ended while the stop words were said: whether they became a turn of their own (and got a
                # reply) depends on when; let that settle, then ask again in the turn after the last one seen.
                time.sleep(6.0)
                story_turn = 1 + max(e.turn_index for _, e in talk.events)
            assert refused(), "no backchannel over a story reply was refused in four tries"
            assert talk.of("interrupted"), "four story replies ended before the barge-in could interrupt them"
            talk.wait(lambda: talk.ended(story_turn + 1), timeout=120)  # the data: let the last reply finish
        finally:
            close(talk)

        # A hung moss_sts: requests time out waiting for first audio and fail over, probes fail, it is ejected,
        # its lease expires. Then it wakes up.
        moss = fleet.fleet.members["moss_sts"].process
        os.kill(moss.pid, signal.SIGSTOP)
        try:
            time.sleep(15)
        finally:
            os.kill(moss.pid, signal.SIGCONT)
        assert wait_until(
            lambda: fleet.metric("router", "voicefleet_router_backend_routable", backend="moss_sts") == 1, 60
        ), "moss_sts was not routable again after it woke up"
        time.sleep(10)
        stop.set()
        for t in threads:
            t.join(120)
        assert not errors, errors
    assert fleet.metric("router", "voicefleet_router_failovers_total") >= 1
