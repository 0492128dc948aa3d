"""Router policy, health and failover against real processes on loopback (docs/router.md).

One fleet for the module: cosyvoice_tts, qwen_tts, asr, brain, moss_sts (all CPU engines) and the router, with
health settings tight enough that faults show within a second or two. Faults are real: moss_sts is SIGKILLed,
SIGSTOPped (hung), throttled, or flapped with SIGSTOP/SIGCONT; the router itself is killed and restarted. Each test
checks what a user sees (audio and who served it, transcripts, status codes, `voicefleet status`); the only time
asserted is "within the caller's deadline" (the call's own timeout).
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest

from services.common import audio
from tests.conftest import start_fleet, wait_until
from tests.speech import INTELLIGIBLE, intelligible, listen, wer, wer_within, words
from voice.v1 import (
    audio_pb2,
    conversation_pb2,
    conversation_pb2_grpc,
    fleet_pb2,
    fleet_pb2_grpc,
    recognizer_pb2,
    recognizer_pb2_grpc,
    routing_pb2,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)

pytestmark = [pytest.mark.timeout(240), pytest.mark.resilience]

REALTIME = routing_pb2.Routing(mode=routing_pb2.ROUTE_MODE_REALTIME)
BROADCAST = routing_pb2.Routing(mode=routing_pb2.ROUTE_MODE_BROADCAST)
# Tight enough that faults show within seconds, loose enough for a loaded 2-core machine: one failure (a hang past
# the first-audio timeout, a deep probe past its deadline) ejects; 6 recovery probes in a row bring it back.
HEALTH = {
    "eject_after_failures": 1,
    "ejection_seconds": 1.0,
    "max_ejection_seconds": 4.0,
    "recovery_probes": 6,
    "probe_interval_seconds": 0.4,
    "probe_timeout_ms": 1500,
    "deep_probe_interval_seconds": 1.0,
    "deep_probe_deadline_ms": 4000,
}
FIRST_AUDIO_TIMEOUT_MS = 2000
RATE = 16_000
LONG_TEXT = " ".join(f"This is sentence number {i} of a long announcement." for i in range(1, 13))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = start_fleet(
        tmp_path_factory.mktemp("router-faults"),
        services=("cosyvoice_tts", "qwen_tts", "asr", "brain", "moss_sts", "router"),
        router={"health": HEALTH, "routes": {"first_audio_timeout_ms": FIRST_AUDIO_TIMEOUT_MS}},
        # Three places: test_callers_short_deadlines_do_not_eject_asr_or_moss has three callers at once (the default
        # on 2 cores is 2, sts_servicer.CPU_SESSIONS_PER_CORE).
        moss_sts={"idle_timeout_seconds": 5, "default_max_tokens": 40, "max_concurrent_sessions": 3},
    )
    yield running
    for m in running.fleet.members.values():  # nothing left stopped: SIGTERM must reach every process
        if m.process.poll() is None:
            os.kill(m.process.pid, signal.SIGCONT)
    running.fleet.stop()


@pytest.fixture(scope="module")
def channel(fleet):
    with fleet.channel("router") as ch:
        yield ch


def moss(fleet):
    return fleet.fleet.members["moss_sts"].process


def signal_moss(fleet, sig) -> None:
    p = moss(fleet)
    if p.poll() is None:
        os.kill(p.pid, sig)


def status(fleet) -> fleet_pb2.GetFleetStatusResponse:
    with fleet.channel("router") as ch:
        return fleet_pb2_grpc.FleetStub(ch).GetFleetStatus(fleet_pb2.GetFleetStatusRequest(), timeout=5)


def backend(fleet, name: str) -> fleet_pb2.BackendStatus:
    return next(b for b in status(fleet).backends if b.name == name)


def failovers(fleet, **labels) -> float:
    return fleet.metric("router", "voicefleet_router_failovers_total", **labels)


@pytest.fixture
def moss_up(fleet):
    """moss_sts running (respawned if a test killed it, continued if stopped) and routable again."""
    p = moss(fleet)
    if p.poll() is not None:
        fleet.fleet.spawn("moss_sts")
        fleet.fleet.wait_serving(["moss_sts"], 120)
    else:
        os.kill(p.pid, signal.SIGCONT)
    assert wait_until(lambda: backend(fleet, "moss_sts").routable, timeout=30), backend(fleet, "moss_sts")
    yield
    signal_moss(fleet, signal.SIGCONT)


def synthesize(channel, text, routing=REALTIME, timeout=20.0, voice="", rate=0):
    """(pcm, rate, [served_by per chunk], request_id)."""
    stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
    request_id = f"fault-{time.monotonic_ns()}"
    config = synthesizer_pb2.SynthesisConfig(
        voice=voice,
        routing=routing,
        output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1),
    )
    pcm, served, out_rate = bytearray(), [], 0
    for r in stub.Synthesize(
        synthesizer_pb2.SynthesizeRequest(request_id=request_id, text=text, config=config), timeout=timeout
    ):
        pcm += r.audio.data
        served.append(r.served_by)
        out_rate = r.audio.format.sample_rate_hz
    return bytes(pcm), out_rate, served, request_id


def heard(pcm: bytes, rate: int, text: str) -> str:
    """What the strict listener heard, checked against ``text``."""
    error, said = intelligible(text, pcm, rate)
    assert error <= INTELLIGIBLE, f"heard {said!r} for {text!r}"
    return said


# --- policy from the command line ---------------------------------------------------------------------------------
def cli(fleet, *args, timeout=60):
    cmd = [sys.executable, "-m", "services.cli.main", "--config", str(fleet.config_path), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_speak_mode_engine_and_voice_follow_the_routes(fleet, moss_up, tmp_path):
    out = str(tmp_path / "out.wav")
    cases = [
        (("--mode", "realtime"), "moss_sts/piper"),
        (("--mode", "broadcast"), "cosyvoice_tts/piper"),
        ((), "cosyvoice_tts/piper"),  # no mode: router.default_tts_backend
        (("--engine", "qwen_tts"), "qwen_tts/espeak"),
        (("--mode", "realtime", "--engine", "cosyvoice_tts"), "cosyvoice_tts/piper"),  # the pin beats the mode
        (("--voice", "Ryan"), "qwen_tts/espeak"),  # a qwen_tts preset voice routes to qwen_tts
        (("--mode", "broadcast", "--voice", "Ryan"), "qwen_tts/espeak"),
    ]
    for args, served_by in cases:
        result = cli(fleet, "speak", "Hello there.", "-o", out, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert f"served by {served_by}" in result.stdout, (args, result.stdout)
    bad = cli(fleet, "speak", "Hello there.", "-o", out, "--engine", "nosuch")
    assert bad.returncode != 0 and "INVALID_ARGUMENT" in bad.stderr and "config.routing.engine" in bad.stderr
    missing = cli(fleet, "speak", "Hello there.", "-o", out, "--voice", "nosuch")
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr and "config.voice" in missing.stderr


# --- Synthesize ---------------------------------------------------------------------------------------------------
def test_hung_moss_fails_over_within_the_deadline_and_comes_back_after_recovery(fleet, channel, moss_up):
    signal_moss(fleet, signal.SIGSTOP)  # hung: the process holds its port and health says SERVING, answers nothing
    try:
        text = "Please hold the line, an agent will answer soon."
        pcm, rate, served, request_id = synthesize(channel, text, timeout=8)  # a hung client would raise here
        assert set(served) == {"cosyvoice_tts/piper"}
        heard(pcm, rate, text)
        record = next(f for f in status(fleet).recent_failovers if f.request_id == request_id)
        assert record.reason == "no_audio"
        # Ejected: the next requests do not wait for it at all, and status says so.
        assert wait_until(lambda: backend(fleet, "moss_sts").health == fleet_pb2.BACKEND_HEALTH_EJECTED, timeout=10)
        b = backend(fleet, "moss_sts")
        assert not b.routable and b.ejections >= 1 and b.ejected_for_ms > 0
        _, _, served, _ = synthesize(channel, "Next one.", timeout=8)
        assert set(served) == {"cosyvoice_tts/piper"}
        # A short deadline is still honored while the preferred backend hangs: the caller gets a status, not a hang.
        with pytest.raises(grpc.RpcError) as err:
            synthesize(channel, LONG_TEXT, timeout=0.5)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        signal_moss(fleet, signal.SIGCONT)
    # Back after its recovery probes pass: REALTIME is served by moss_sts again.
    assert wait_until(lambda: backend(fleet, "moss_sts").routable, timeout=30)
    _, _, served, _ = synthesize(channel, "Welcome back.")
    assert set(served) == {"moss_sts/piper"}


def first_chunk_then(channel, text, timeout, action):
    """Start a REALTIME Synthesize, run ``action`` after its first chunk, read the rest: (served, pcm, error)."""
    stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
    request_id = f"slow-{time.monotonic_ns()}"
    request = synthesizer_pb2.SynthesizeRequest(
        request_id=request_id, text=text, config=synthesizer_pb2.SynthesisConfig(routing=REALTIME)
    )
    served, pcm, error = [], bytearray(), None
    try:
        for i, r in enumerate(stub.Synthesize(request, timeout=timeout)):
            served.append(r.served_by)
            pcm += r.audio.data
            if i == 0:
                action()
    except grpc.RpcError as e:
        error = e
    return served, bytes(pcm), error, request_id


def test_slow_backend_after_first_audio_finishes_the_request_itself(fleet, channel, moss_up):
    """Audio went out: the request is committed to its backend. A stall longer than the first-audio timeout is
    waited out (no splice from another backend); a stall past the caller's deadline ends it with DEADLINE_EXCEEDED."""

    timers = []

    def stall(seconds):
        def act():
            signal_moss(fleet, signal.SIGSTOP)
            timers.append(threading.Timer(seconds, lambda: signal_moss(fleet, signal.SIGCONT)))
            timers[-1].start()

        return act

    served, pcm, error, request_id = first_chunk_then(channel, LONG_TEXT, 60, stall(FIRST_AUDIO_TIMEOUT_MS / 1000 + 1))
    timers[-1].join()
    assert error is None, error
    assert set(served) == {"moss_sts/piper"}, "audio from one backend only, never spliced"
    # The stalled request went on to its end: its last seconds are the last of the 12 sentences.
    tail = listen(pcm[-int(4.5 * 22050) * 2 :], 22050)
    assert wer_within("This is sentence number 12 of a long announcement.", tail) <= INTELLIGIBLE, tail
    assert request_id not in {f.request_id for f in status(fleet).recent_failovers}

    assert wait_until(lambda: backend(fleet, "moss_sts").routable, timeout=30)
    served, _, error, _ = first_chunk_then(channel, LONG_TEXT, 4, stall(7))
    if timers:  # moss_sts runs again before the next test: at once, the stall has outlived the caller's deadline
        timers[-1].cancel()
        signal_moss(fleet, signal.SIGCONT)
    assert error is not None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
    assert set(served) == {"moss_sts/piper"}, error.details()


def test_flapping_health_does_not_flap_the_route(fleet, channel, moss_up):
    """moss_sts hangs and recovers over and over (SIGSTOP 3 s / SIGCONT 0.5 s). REALTIME requests move to
    cosyvoice_tts once and stay there while it flaps (recovery needs 6 good probes in a row, 0.4 s apart, and a
    probe started in the first 1.5 s of a hang fails); after it settles they move back once."""
    stop = threading.Event()

    def flap():
        while not stop.is_set():
            signal_moss(fleet, signal.SIGSTOP)
            if stop.wait(3.0):
                break
            signal_moss(fleet, signal.SIGCONT)
            stop.wait(0.5)
        signal_moss(fleet, signal.SIGCONT)

    flapper = threading.Thread(target=flap, daemon=True)
    served_during = []
    flapper.start()
    try:
        t_end = time.monotonic() + 12
        while time.monotonic() < t_end:
            _, _, served, _ = synthesize(channel, "Flap.", timeout=10)
            assert len(set(served)) == 1
            served_during.append(served[0])
    finally:
        stop.set()
        flapper.join(5)
    switches = sum(1 for a, b in zip(served_during, served_during[1:], strict=False) if a != b)
    assert "cosyvoice_tts/piper" in served_during, served_during
    assert switches <= 1, f"the route flapped: {served_during}"
    # Settled: back to moss_sts (once).
    assert wait_until(lambda: backend(fleet, "moss_sts").routable, timeout=30)
    _, _, served, _ = synthesize(channel, "Settled.")
    assert set(served) == {"moss_sts/piper"}


# --- StreamingSynthesize ------------------------------------------------------------------------------------------
def test_streaming_text_continues_on_the_fallback_from_the_next_sentence(fleet, channel, moss_up):
    """moss_sts hangs after speaking the first sentence; the router gives it up (no audio while text was due) and
    cosyvoice_tts speaks the rest: each sentence once, spans in the caller's text."""
    first = "The first train leaves at nine. "
    rest = "The second train leaves at ten. The last train leaves at eleven."
    text = first + rest
    stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
    outbox: queue.Queue = queue.Queue()

    def requests():
        config = synthesizer_pb2.StreamingSynthesisConfig(
            synthesis=synthesizer_pb2.SynthesisConfig(routing=REALTIME, voice="joe")
        )
        yield synthesizer_pb2.StreamingSynthesizeRequest(request_id="stream-failover", config=config)
        while (item := outbox.get()) is not None:
            yield item

    outbox.put(synthesizer_pb2.StreamingSynthesizeRequest(text_delta=first))
    replies = []
    call = stub.StreamingSynthesize(requests(), timeout=60)
    for reply in call:
        replies.append(reply)
        if len(replies) == 1:
            time.sleep(0.5)  # the first sentence's audio is all out
            signal_moss(fleet, signal.SIGSTOP)  # hung: the rest of the text reaches it, no audio comes back
            outbox.put(synthesizer_pb2.StreamingSynthesizeRequest(text_delta=rest))
            outbox.put(synthesizer_pb2.StreamingSynthesizeRequest(end_of_text=True))
            outbox.put(None)
    served = [r.served_by for r in replies]
    assert served[0] == "moss_sts/piper" and served[-1] == "cosyvoice_tts/piper", served
    # Spans: the first sentence from moss_sts, the rest from cosyvoice_tts, in the caller's text, none twice.
    spans = {}
    for r in replies:
        spans.setdefault((r.text_span.start_char, r.text_span.end_char), set()).add(r.served_by)
    assert all(len(s) == 1 for s in spans.values()), spans
    moss_spans = [k for k, s in spans.items() if "moss_sts/piper" in s]
    cosy_spans = [k for k, s in spans.items() if "cosyvoice_tts/piper" in s]
    assert [text[a:b] for a, b in moss_spans] == [first.strip()]
    assert min(a for a, _ in cosy_spans) >= len(first.strip())
    assert " ".join(text[a:b] for a, b in sorted(cosy_spans)) == rest
    pcm = b"".join(r.audio.data for r in replies)
    rate = replies[0].audio.format.sample_rate_hz
    said = words(heard(pcm, rate, text))
    assert [w for w in said if w in ("first", "second", "last")] == ["first", "second", "last"], said
    assert said.count("train") == 3, f"a sentence was spoken twice or lost: {said}"


def test_moss_killed_before_first_audio_the_request_completes_from_cosyvoice(fleet, channel, moss_up):
    text = "The weather today is sunny and warm."
    _, _, served, _ = synthesize(channel, "Ready.")  # moss_sts serves (and its voice list is fresh in the router)
    assert set(served) == {"moss_sts/piper"}
    before = failovers(fleet, **{"from": "moss_sts", "to": "cosyvoice_tts"})
    signal_moss(fleet, signal.SIGSTOP)  # the request reaches moss_sts and waits there, no audio yet ...
    result: queue.Queue = queue.Queue()
    worker = threading.Thread(target=lambda: result.put(synthesize(channel, text, timeout=20)), daemon=True)
    worker.start()
    time.sleep(0.3)
    signal_moss(fleet, signal.SIGKILL)  # ... and then moss_sts dies
    worker.join(30)
    pcm, rate, served, request_id = result.get(timeout=1)
    assert set(served) == {"cosyvoice_tts/piper"}, "the whole answer comes from the fallback, nothing from moss"
    heard(pcm, rate, text)
    assert failovers(fleet, **{"from": "moss_sts", "to": "cosyvoice_tts"}) == before + 1
    record = next(f for f in status(fleet).recent_failovers if f.request_id == request_id)
    assert record.from_backend == "moss_sts" and record.to_backend == "cosyvoice_tts"
    assert record.reason == "unavailable"  # the call in flight failed
    # While it is down, REALTIME requests go straight to cosyvoice_tts; `voicefleet status` shows it all.
    _, _, served, _ = synthesize(channel, "Still here.")
    assert set(served) == {"cosyvoice_tts/piper"}
    shown = cli(fleet, "status")
    assert "moss_sts" in shown.stdout and "UNREACHABLE" in shown.stdout and "(not routed to)" in shown.stdout
    assert "recent failovers" in shown.stdout and "moss_sts -> cosyvoice_tts  (unavailable)" in shown.stdout


# --- Converse -----------------------------------------------------------------------------------------------------
class Talk:
    """A live caller: silence at the pace of real time, the user's words in bursts, every event kept."""

    def __init__(self, channel):
        self.outbox: queue.Queue = queue.Queue()
        self.events: list[conversation_pb2.ConverseResponse] = []
        self.cond = threading.Condition()
        self.error = None
        config = conversation_pb2.ConversationConfig(
            input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=RATE, channels=1),
            output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=RATE, channels=1),
            system_prompt="You are a friendly voice assistant. Answer in one short sentence.",
            language="en-US",
            # Replies of 16 tokens (moss_sts's and the router cascade's): long enough to be cut mid-speech, and a
            # turn, which completes when its reply has played (paced to playback), is not seconds longer than needed.
            sampling=conversation_pb2.SamplingConfig(max_tokens=16),
        )
        self.call = conversation_pb2_grpc.ConversationStub(channel).Converse(self._requests(config), timeout=200)
        threading.Thread(target=self._read, daemon=True).start()

    def _requests(self, config):
        yield conversation_pb2.ConverseRequest(request_id="talk-failover", config=config)
        frame = RATE * 40 // 1000 * 2
        due = time.monotonic()
        while True:
            try:
                item = self.outbox.get(timeout=max(0.0, due - time.monotonic()))
            except queue.Empty:
                item = b""
            if item is None:
                return
            if item:
                for i in range(0, len(item), frame * 5):
                    yield conversation_pb2.ConverseRequest(audio=item[i : i + frame * 5])
                due = time.monotonic()
                continue
            yield conversation_pb2.ConverseRequest(audio=bytes(frame))
            due += 0.04

    def _read(self):
        try:
            for reply in self.call:
                with self.cond:
                    self.events.append(reply)
                    self.cond.notify_all()
        except grpc.RpcError as e:
            self.error = e
        with self.cond:
            self.cond.notify_all()

    def wait(self, predicate, timeout=90.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate() and self.error is None and time.monotonic() < deadline:
                self.cond.wait(0.2)
        return predicate()

    def of(self, kind, turn=None):
        return [e for e in self.events if e.WhichOneof("event") == kind and (turn is None or e.turn_index == turn)]

    def ended(self, turn):
        return bool(self.of("turn_complete", turn) or self.of("turn_error", turn))

    def complete(self, turn):
        found = self.of("turn_complete", turn)
        return found[0].turn_complete if found else None

    def close(self):
        self.outbox.put(None)
        self.call.cancel()


def test_moss_killed_mid_conversation_the_turn_is_answered_by_the_cascade_then_back(fleet, channel, moss_up):
    def say(text):
        pcm, _, _, _ = synthesize(channel, text, routing=BROADCAST, rate=RATE)
        return pcm

    lines = ["What is two plus two?", "What color is the sky?", "Thank you very much."]
    speech = [say(line) for line in lines]
    back_before = failovers(fleet, reason="recovered")
    talk = Talk(channel)
    try:
        # Turn 0: moss_sts dies while it speaks its answer; the router replays the turn into its cascade.
        talk.outbox.put(speech[0])
        assert talk.wait(lambda: talk.of("reply_audio", 0) or talk.ended(0)), talk.events[-3:]
        assert not talk.of("turn_error", 0), talk.of("turn_error", 0)[0].turn_error.message
        assert not talk.of("turn_complete", 0), "the reply finished before the kill; it must be longer"
        signal_moss(fleet, signal.SIGKILL)
        assert talk.wait(lambda: talk.complete(0) is not None or talk.of("turn_error", 0)), talk.events[-5:]
        done = talk.complete(0)
        assert done is not None, f"turn 0 failed: {talk.of('turn_error', 0)}"
        assert done.served_by == "router/cascade"
        assert wer(lines[0], done.user_text.replace("2", "two")) <= 0.34, done.user_text
        assert done.reply_text.strip()
        cut = talk.of("interrupted", 0)
        assert cut and cut[0].interrupted.reason == "failover" and cut[0].interrupted.audio_sent_ms > 0
        after_cut = talk.events[talk.events.index(cut[0]) :]
        replayed = [e.reply_audio for e in after_cut if e.WhichOneof("event") == "reply_audio" and e.turn_index == 0]
        assert sum(len(a.data) for a in replayed) > RATE
        # ... and it is the cascade's reply, said: the strict listener hears its text in the audio after the cut.
        heard(b"".join(a.data for a in replayed), replayed[0].format.sample_rate_hz, done.reply_text)
        finals = [e for e in talk.of("user_transcript", 0) if e.user_transcript.is_final]
        assert len(finals) == 1, "the replayed speech is not transcribed to the caller twice"

        # Turn 1: moss_sts is still down, the cascade answers.
        talk.outbox.put(speech[1])
        assert talk.wait(lambda: talk.complete(1) is not None or talk.of("turn_error", 1)), talk.events[-5:]
        assert talk.complete(1).served_by == "router/cascade"
        assert wer(lines[1], talk.complete(1).user_text) <= 0.34

        # moss_sts comes back: once it is routable the session moves back at a quiet moment; turn 2 is moss_sts's.
        fleet.fleet.spawn("moss_sts")
        fleet.fleet.wait_serving(["moss_sts"], 120)
        assert wait_until(lambda: failovers(fleet, reason="recovered") > back_before, timeout=60)
        talk.outbox.put(speech[2])
        assert talk.wait(lambda: talk.complete(2) is not None or talk.of("turn_error", 2)), talk.events[-5:]
        assert talk.complete(2).served_by == "moss_sts/cascade"
        assert [e.turn_index for e in talk.of("turn_complete")] == [0, 1, 2]
        assert talk.error is None
    finally:
        talk.close()
    assert failovers(fleet, **{"from": "moss_sts", "to": "router/cascade"}) >= 1
    assert failovers(fleet, **{"from": "router/cascade", "to": "moss_sts", "reason": "recovered"}) >= 1


# --- the caller's own deadline ------------------------------------------------------------------------------------
def short_deadline_calls(channel, method: str, n: int) -> list[grpc.StatusCode]:
    """``n`` callers that send silence in real time for longer than their own 1.5 s deadline: their status codes."""
    fmt = audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=RATE, channels=1)
    frame = conversation_pb2.ConverseRequest if method == "Converse" else recognizer_pb2.StreamingRecognizeRequest

    def requests(first):
        yield first
        for _ in range(100):  # 4 s of silence, 40 ms at a time
            time.sleep(0.04)
            yield frame(audio=bytes(RATE * 40 // 1000 * 2))

    def one(i: int) -> grpc.StatusCode | str:
        if method == "Converse":
            config = conversation_pb2.ConversationConfig(input_format=fmt, output_format=fmt, language="en-US")
            first = conversation_pb2.ConverseRequest(request_id=f"short-{i}", config=config)
            call = conversation_pb2_grpc.ConversationStub(channel).Converse(requests(first), timeout=1.5)
        else:
            config = recognizer_pb2.RecognitionConfig(input_format=fmt, language="en-US")
            first = recognizer_pb2.StreamingRecognizeRequest(request_id=f"short-{i}", config=config)
            call = recognizer_pb2_grpc.RecognizerStub(channel).StreamingRecognize(requests(first), timeout=1.5)
        try:
            list(call)
        except grpc.RpcError as e:
            return e.code()
        return "ended without an error"

    # The n callers at once, each on its own stream (one after another they only wait out their deadlines in turn).
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def ejections(fleet, name: str) -> tuple[float, int]:
    """(the router's ejection metric, the ejections `voicefleet status` shows) for backend ``name``."""
    return fleet.metric("router", "voicefleet_router_ejections_total", backend=name), backend(fleet, name).ejections


def test_callers_short_deadlines_do_not_eject_asr_or_moss(fleet, channel, moss_up):
    # The fleet ejects after one failed call (HEALTH); three callers whose own deadline runs out are no failure of
    # the backend: asr and moss_sts stay routable and keep serving.
    line = "What is two plus two?"
    speech, _, _, _ = synthesize(channel, line, routing=BROADCAST, rate=RATE)
    before = {name: ejections(fleet, name) for name in ("asr", "moss_sts")}

    assert short_deadline_calls(channel, "StreamingRecognize", 3) == [grpc.StatusCode.DEADLINE_EXCEEDED] * 3
    assert short_deadline_calls(channel, "Converse", 3) == [grpc.StatusCode.DEADLINE_EXCEEDED] * 3

    assert {name: ejections(fleet, name) for name in before} == before
    for name in before:
        b = backend(fleet, name)
        assert b.routable and b.health == fleet_pb2.BACKEND_HEALTH_SERVING, b
    # A normal call afterwards: asr transcribes it (there is no other recognizer), moss_sts answers the turn.
    config = recognizer_pb2.RecognitionConfig(
        input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=RATE, channels=1), language="en-US"
    )
    messages = [recognizer_pb2.StreamingRecognizeRequest(request_id="after-short", config=config)]
    messages += [
        recognizer_pb2.StreamingRecognizeRequest(audio=speech[i : i + 6400]) for i in range(0, len(speech), 6400)
    ]
    replies = recognizer_pb2_grpc.RecognizerStub(channel).StreamingRecognize(iter(messages), timeout=60)
    said = " ".join(r.result.transcript for r in replies if r.WhichOneof("event") == "result" and r.result.is_final)
    assert wer(line, said.replace("2", "two")) <= 0.34, said
    talk = Talk(channel)
    try:
        talk.outbox.put(speech)
        assert talk.wait(lambda: talk.ended(0)), talk.events[-3:]
        assert talk.complete(0) is not None, talk.of("turn_error", 0)
        assert talk.complete(0).served_by.startswith("moss_sts/"), talk.complete(0).served_by
    finally:
        talk.close()
    assert {name: ejections(fleet, name) for name in before} == before


# --- the router itself ---------------------------------------------------------------------------------------------
def test_router_restarted_clients_get_unavailable_then_succeed_on_retry(fleet, channel):
    router = fleet.fleet.members["router"].process
    router.send_signal(signal.SIGKILL)
    router.wait(10)
    with pytest.raises(grpc.RpcError) as err:
        synthesize(channel, "Are you there?", routing=BROADCAST, timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    fleet.fleet.spawn("router")
    fleet.fleet.wait_serving(["router"], 60)
    result = None
    for _ in range(50):  # the same channel: the client retries until the new router answers
        try:
            result = synthesize(channel, "Are you there?", routing=BROADCAST, timeout=5)
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE  # noqa: PT017 - a retry loop: every failed try is one
            time.sleep(0.2)
    assert result is not None and set(result[2]) == {"cosyvoice_tts/piper"}
