"""Conversation (moss_sts CPU cascade through the router): user speech end -> first reply audio, barge-in -> silence.

A fleet of brain (llama.cpp + SmolLM2-135M) + asr + moss_sts + router on loopback, as `make run` starts them; the caller is the tests' live caller
(tests/fleet/test_conversation_fleet.Talk): silence at the pace of real time, each user line in one burst. User lines are
piper speech made by the fleet (moss_sts's Synthesizer).

* speech end -> first reply audio: the server's TurnTimings (end of the user's speech, as its audio arrived, to the
  first reply audio sent; includes the endpointer's hangover) and the caller's view (last frame of the line sent ->
  first reply audio received; the line's own trailing silence is inside it);
* barge-in -> silence: the caller talks over a long reply; first frame of that speech sent -> last reply audio
  received (includes barge_in.min_speech_ms of speech by design), and the interruption itself (last audio received
  -> interrupted event) plus the server's histogram (barge-in detected -> last audio handed out).

Turn-taking (issue 23 item 8; bench/turn_taking.py, the set from bench/turn_set.py): a caller that speaks at the
pace of real time (20 ms frames) and plays the reply says complete utterances of three lengths and the same
sentences with a 500 / 800 / 1200 ms mid-phrase pause, in one session asking for MODE_SILENCE and in another for
MODE_SEMANTIC; then backchannels and stop words during a reply and the reply's own echo in its microphone. Rows:
speech end -> first reply audio per length, speech end -> commit, stop word -> interrupted; tables: false cut-offs
per pause, slow commits, backchannels that interrupted, echo interruptions, the server's TurnTimings. The raw
per-line records go to bench/results/latest/raw/conversation_turns.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time

from bench import conversation_load, conversation_tools, turn_taking
from bench.harness import RESULTS, Row, scrape, total
from bench.turn_set import Counts
from bench.turn_set import build as build_turn_set
from services.cli.fleet import LocalFleet
from tests.fleet.test_conversation_fleet import RATE, Talk, close
from voice.v1 import audio_pb2, conversation_pb2, routing_pb2, synthesizer_pb2, synthesizer_pb2_grpc

LINES = [
    "Hello, my name is Alice.",
    "What is two plus two?",
    "What color is the sky?",
    "Can you recommend a good book?",
    "What is the capital of France?",
    "How are you today?",
]
TURNS = 12
BARGE_INS = 6
SILENT_TURNS: list[str] = []  # completed turns that sent no reply audio (their reply text), across the run
TURN_SET_SEED = 23
# Each line is spoken at real time, so these counts set the run's length: about 6 minutes for both passes and the
# trials on 2 cores. BENCH_TURN_COUNTS="complete per length,paused per pause,backchannels,stop words,echo" changes
# them for a run (e.g. "6,4,6,6,3": tighter percentiles, about twice as long).
TURN_SET_COUNTS = Counts(complete_per_length=3, paused_per_pause=3, backchannels=5, stop_words=4, echo=2)
RAW_TURNS = RESULTS / "raw" / "conversation_turns.json"


def _speaker(channel):
    stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
    cache: dict[str, bytes] = {}

    def say(text: str) -> bytes:
        if text not in cache:
            config = synthesizer_pb2.SynthesisConfig(
                output_format=audio_pb2.AudioFormat(encoding=1, sample_rate_hz=RATE, channels=1),
                routing=routing_pb2.Routing(mode=routing_pb2.ROUTE_MODE_REALTIME),
            )
            replies = stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text=text, config=config), timeout=60)
            cache[text] = b"".join(r.audio.data for r in replies)
        return cache[text]

    return say


def _turns(channel, say, n: int) -> tuple[list[float], list[float]]:
    server, client = [], []
    talk = Talk(channel)
    try:
        for i in range(n):
            talk.send(say(LINES[i % len(LINES)]), label=f"turn {i}", paced=True)  # at the pace of speech
            if not talk.wait(lambda i=i: talk.ended(i), timeout=120) or talk.complete(i) is None:
                continue
            done = talk.complete(i)
            first = talk.of("reply_audio", i)
            if not first:  # no reply audio: no latency to count (reported as a turn without a reply)
                SILENT_TURNS.append(done.reply_text)
                continue
            server.append(done.timings.speech_end_to_first_audio_ms / 1000)
            sent = next(s for s in talk.sent if s[0] == f"turn {i}")
            if first:
                client.append(first[0][0] - sent[2])
            time.sleep(0.3)
    finally:
        close(talk)
    return server, client


def _barge_ins(channel, say, n: int) -> tuple[list[float], list[float]]:
    to_silence, cut = [], []
    for _ in range(n):
        talk = Talk(channel, sampling=conversation_pb2.SamplingConfig(max_tokens=160))
        try:
            talk.send(say("Please tell me a long story about a brave little dragon who wanted to fly."), paced=True)
            talk.wait(lambda talk=talk: len(talk.reply_audio(0)) >= RATE * 2 * 1.5 or talk.ended(0))
            if talk.ended(0):
                continue
            talk.send(say("Stop. What is two plus two?"), label="barge-in", paced=True)
            if not talk.wait(lambda talk=talk: talk.of("interrupted", 0), timeout=30):
                continue
            time.sleep(1.0)
            talk.wait(lambda talk=talk: any(s[0] == "barge-in" for s in talk.sent), timeout=30)  # all said
            t_int = talk.of("interrupted", 0)[0][0]
            last = max(t for t, _ in talk.of("reply_audio", 0))
            start = next(s for s in talk.sent if s[0] == "barge-in")[1]
            to_silence.append(last - start)
            cut.append(max(0.0, t_int - last))
        finally:
            close(talk)
    return to_silence, cut


@contextlib.contextmanager
def cpu_fleet():
    """brain + asr + moss_sts (listening through asr) + router on free loopback ports: a channel to the router, and
    the fleet.
    The brain is the fleet member itself, as a user's fleet has it (no recording pass-through: the tests' recorder
    is a Python HTTP proxy in this process, whose threads share the GIL with the callers' real-time pacing)."""
    import grpc

    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(
            tmp, ("brain", "asr", "moss_sts", "router"), moss_sts={"default_max_tokens": 48}
        )
        try:
            with grpc.insecure_channel(fleet.config.router.address) as channel:
                yield channel, fleet
        finally:
            fleet.stop()


def segment_cache_lookups(fleet) -> dict[str, float]:
    """moss_sts's segment cache lookups so far, by outcome (hit, miss), from its metrics endpoint."""
    samples = scrape(fleet.config.moss_sts.metrics_port)
    return {
        outcome: total(samples, "voicefleet_tts_segment_cache_total", outcome=outcome) for outcome in ("hit", "miss")
    }


def turn_set_counts() -> Counts:
    given = os.environ.get("BENCH_TURN_COUNTS", "")
    if not given:
        return TURN_SET_COUNTS
    try:
        complete, paused, backchannels, stops, echo = (int(n) for n in given.split(","))
    except ValueError:
        raise SystemExit(f"BENCH_TURN_COUNTS={given!r}: expected five whole numbers, e.g. 6,4,6,6,3") from None
    return Counts(complete, paused, backchannels, stops, echo)


def run():
    counts = turn_set_counts()
    turn_set = build_turn_set(TURN_SET_SEED, counts)  # piper in this process, before the fleet (cached)
    with cpu_fleet() as (channel, fleet):
        say = _speaker(channel)
        for line in LINES:
            say(line)
        server, client = _turns(channel, say, TURNS)
        to_silence, cut = _barge_ins(channel, say, BARGE_INS)
        before = segment_cache_lookups(fleet)
        passes, trials = turn_taking.measure(channel, turn_set, TURN_SET_SEED)
        after = segment_cache_lookups(fleet)
        tools = conversation_tools.measure(channel, say)
    hits, misses = (round(after[k] - before[k]) for k in ("hit", "miss"))
    load = conversation_load.run_all()  # conversations at once, on a fleet of their own at the shipped defaults
    turn_rows, turn_tables, raw = turn_taking.report(passes, trials, "semantic")
    RAW_TURNS.parent.mkdir(parents=True, exist_ok=True)
    RAW_TURNS.write_text(json.dumps({"seed": TURN_SET_SEED, "set": str(turn_set.directory), **raw}, indent=1))
    rows = [
        Row("speech end -> first reply audio (server TurnTimings)", "s", server, "includes the 400 ms hangover"),
        Row("last user frame sent -> first reply audio (caller)", "s", client, "line's trailing silence inside"),
        *conversation_load.rows(load),
        Row(
            "barge-in speech sent -> last reply audio (caller)",
            "s",
            to_silence,
            'from its first frame: "Stop. What is two plus two?" said at real time; "stop" is spotted',
        ),
        Row("last reply audio -> interrupted event (caller)", "s", cut),
        *turn_rows,
        *conversation_tools.rows(tools),
    ]
    extra = {
        "turns": TURNS,
        "turns_without_reply_audio": len(SILENT_TURNS),
        "replies_of_turns_without_audio": SILENT_TURNS,
        "barge_ins": BARGE_INS,
        "engine": "moss_sts/cascade (whisper tiny.en, SmolLM2-135M, piper)",
        "turn_set": f"seed {TURN_SET_SEED}, {counts}; raw records in bench/results/latest/raw/{RAW_TURNS.name}",
        "turn_set_reply_openings_from_the_segment_cache": f"{hits} of {hits + misses} (docs/scheduling.md#segment-cache)",
        **turn_tables,
        "conversations_at_once": conversation_load.table(load),
        "tools": conversation_tools.summary(tools),
    }
    return rows, extra
