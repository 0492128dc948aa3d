"""asr and moss_sts hold GPU leases like the TTS services, and take turns on a card they do not fit together
(real processes on loopback; the CPU engines account their declared sizes on the router's virtual card).

asr 6 GiB + moss_sts 8 GiB on a 10 GiB card (cosyvoice_tts, 0.5 GiB, fits beside either): 4 callers at once
alternate between recognizing speech (asr) and speaking with moss_sts's voice (pinned, so it cannot fail over to
another backend). Every call succeeds; the models swap (counted and timed in each service's metrics); both show in
the router's lease table and in ModelControl. A conversation that finds MOSS cold is answered by the router's warm
cascade while MOSS is loaded, and the next conversation is MOSS's.

moss_sts listens with its own in-process asr engines here (moss_sts.asr: local), counted in its own lease: with the
default (the asr service over gRPC) a MOSS conversation needs asr's model on the card beside MOSS, which a card they
do not fit together cannot give (docs/leases.md).
"""

from __future__ import annotations

import threading
import urllib.request

import pytest

from bench import evaluation as ev
from tests.conftest import start_fleet, wait_until
from tests.fleet.test_conversation_fleet import Talk, assert_reply_heard, close
from tests.speech import INTELLIGIBLE, intelligible
from voice.v1 import (
    audio_pb2,
    gpu_pb2,
    gpu_pb2_grpc,
    recognizer_pb2,
    recognizer_pb2_grpc,
    routing_pb2,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)

pytestmark = pytest.mark.timeout(600)

GB = 1 << 30
RATE = 16_000
SENTENCE = "please call me back when you get home"
THANKS = "Thanks for waiting."
CALLERS, ROUNDS = 4, 4


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    fleet = start_fleet(
        tmp_path_factory.mktemp("card-asr-moss"),
        services=("cosyvoice_tts", "asr", "brain", "moss_sts", "router"),
        moss_sts={"asr": "local"},
        router={
            "leases": {"capacity_gb": 10, "min_residency_seconds": 1, "ttl_seconds": 3, "renew_deadline_seconds": 2},
            # Members hold GpuLeases streams open until the router ends them: a SIGTERMed router drains its whole
            # grace (5 s) at teardown. No test here stops the router while a call is in flight.
            "grace_seconds": 1,
        },
        residency={
            "enabled": True,
            "max_waiting_requests": 16,
            "services": {
                "asr": {"declared_gb": 6, "priority": "INTERACTIVE", "swap_in_ms": 500},
                "moss_sts": {"declared_gb": 8, "priority": "INTERACTIVE", "swap_in_ms": 3000},
                "cosyvoice_tts": {"declared_gb": 0.5, "priority": "INTERACTIVE", "swap_in_ms": 500},
            },
        },
    )
    yield fleet
    fleet.fleet.stop()


def speak(channel, text: str, engine: str = "moss_sts") -> bytes:
    stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
    config = synthesizer_pb2.SynthesisConfig(
        routing=routing_pb2.Routing(engine=engine),
        output_format=audio_pb2.AudioFormat(encoding=1, sample_rate_hz=RATE, channels=1),
    )
    replies = list(stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text=text, config=config), timeout=120))
    assert {r.served_by.split("/")[0] for r in replies} == {engine}
    return b"".join(r.audio.data for r in replies)


def recognize(channel, pcm: bytes) -> str:
    stub = recognizer_pb2_grpc.RecognizerStub(channel)
    request = recognizer_pb2.RecognizeRequest(config=ev.config(RATE), audio=pcm)
    replies = list(stub.Recognize(request, timeout=120))
    return " ".join(r.result.transcript for r in replies if r.WhichOneof("event") == "result" and r.result.is_final)


def model_status(fleet, name: str) -> gpu_pb2.ModelStatus:
    with fleet.channel(name) as channel:
        return gpu_pb2_grpc.ModelControlStub(channel).GetModelStatus(gpu_pb2.GetModelStatusRequest(), timeout=10).status


def swaps_in(fleet, name: str) -> float:
    """voicefleet_model_swap_seconds_count{direction="in"} from the service's own /metrics."""
    member = fleet.fleet.members[name]
    with urllib.request.urlopen(f"http://127.0.0.1:{member.metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("voicefleet_model_swap_seconds_count") and 'direction="in"' in line
    )


def test_asr_and_moss_sts_take_turns_under_four_callers(card):
    tables, errors, heard, spoken = [], [], [], []
    with card.channel("router") as channel:
        speech = bytes(RATE) + speak(channel, SENTENCE + ".") + bytes(2 * RATE)  # 0.5 s before, 1 s after
        swaps_before = {name: swaps_in(card, name) for name in ("asr", "moss_sts")}

        def caller(i: int) -> None:
            for k in range(ROUNDS):
                try:
                    if (i + k) % 2:
                        spoken.append(speak(channel, THANKS))
                    else:
                        heard.append(recognize(channel, speech))
                    with card.channel("router") as ch:
                        tables.append(
                            gpu_pb2_grpc.GpuLeasesStub(ch).ListLeases(gpu_pb2.ListLeasesRequest(), timeout=10)
                        )
                except Exception as e:  # noqa: BLE001 - every failure is reported below
                    errors.append(f"caller {i} round {k}: {e!r}")

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(CALLERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert len(heard) == CALLERS * ROUNDS // 2
    assert all(ev.wer([SENTENCE], [h]) <= 0.2 for h in heard), heard
    # Every spoken reply says its sentence (the strict listener, once per distinct audio: moss_sts's piper voice is
    # deterministic, so the 8 replies are usually one).
    assert len(spoken) == CALLERS * ROUNDS // 2
    print(f"\n{len(set(spoken))} distinct spoken replies of {len(spoken)}")
    for pcm in set(spoken):
        error, said = intelligible(THANKS, pcm, RATE)
        assert error <= INTELLIGIBLE, said
    # The card was never over-granted, and both services held it at some point.
    assert all(t.granted_bytes <= t.capacity_bytes == 10 * GB for t in tables)
    holders = {lease.holder for t in tables for lease in t.leases}
    assert {"asr", "moss_sts"} <= holders, holders  # (cosyvoice_tts holds its small lease throughout)
    # They really took turns: each was loaded back at least once more during the calls.
    for name in ("asr", "moss_sts"):
        assert swaps_in(card, name) > swaps_before[name], name
        assert model_status(card, name).declared_bytes == {"asr": 6, "moss_sts": 8}[name] * GB
    # Settled, the card holds exactly one of them (6 + 8 GiB do not fit in 10): the last one served stays resident
    # (nothing revokes it), the other was revoked to make room for it and is cold; the lease table says the same.
    states = {name: model_status(card, name).residency for name in ("asr", "moss_sts")}
    resident = [name for name, state in states.items() if state == gpu_pb2.RESIDENCY_RESIDENT]
    assert len(resident) == 1, states
    (cold,) = {"asr", "moss_sts"} - set(resident)
    assert states[cold] == gpu_pb2.RESIDENCY_COLD, states
    with card.channel("router") as ch:
        table = gpu_pb2_grpc.GpuLeasesStub(ch).ListLeases(gpu_pb2.ListLeasesRequest(), timeout=10)
    assert {lease.holder for lease in table.leases} - {"cosyvoice_tts"} == set(resident), (table, states)


def one_turn(channel, speech: bytes) -> str:
    """A conversation of one turn; returns who served it."""
    talk = Talk(channel)
    try:
        talk.send(speech)
        assert talk.wait(lambda: talk.complete(0) is not None or talk.of("turn_error", 0), timeout=120), talk.events[
            -5:
        ]
        done = talk.complete(0)
        assert done is not None, talk.of("turn_error", 0)
        assert_reply_heard(talk, 0)
        return done.served_by
    finally:
        close(talk)


def test_a_conversation_that_finds_moss_cold_is_served_by_the_warm_cascade_while_moss_loads(card):
    with card.channel("router") as channel:
        question = speak(channel, "What is two plus two?", engine="cosyvoice_tts")
        recognize(channel, bytes(RATE) + question + bytes(2 * RATE))  # asr onto the card: moss_sts off it
        assert wait_until(lambda: model_status(card, "moss_sts").residency == gpu_pb2.RESIDENCY_COLD, timeout=60)
        cold_before = card.metric("router", "voicefleet_router_failovers_total", reason="cold")

        # MOSS's swap-in (3 s declared) misses the 1 s default budget: the router's cascade answers at once.
        assert one_turn(channel, question) == "router/cascade"
        assert card.metric("router", "voicefleet_router_failovers_total", reason="cold") == cold_before + 1
        # ... and MOSS was prefetched: once the cascade's recognition stream let asr go, moss_sts is loaded.
        assert wait_until(lambda: model_status(card, "moss_sts").residency == gpu_pb2.RESIDENCY_RESIDENT, timeout=90)
        assert one_turn(channel, question) == "moss_sts/cascade"
