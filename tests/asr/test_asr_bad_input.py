"""Bad recognition streams get a clear status naming what to fix; the server stays up; decoders are released;
streams do not disturb each other. Limits under test (docs/asr.md#limits): the asr_fleet runs with
idle_timeout_seconds 2 and max_stream_seconds 30."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from bench import evaluation as ev
from services.common import audio
from services.common.asr_servicer import CPU_STREAMS_PER_CORE
from services.common.scheduler import cpu_cores
from tests.conftest import wait_until
from voice.v1 import audio_pb2, recognizer_pb2, recognizer_pb2_grpc

Req = recognizer_pb2.StreamingRecognizeRequest
SILENCE_100MS = bytes(3200)


@pytest.fixture(scope="module", params=["asr", "router"])
def target(request, asr_fleet):
    with asr_fleet.channel(request.param) as channel:
        yield request.param, recognizer_pb2_grpc.RecognizerStub(channel)


@pytest.fixture(scope="module")
def asr(asr_fleet):
    with asr_fleet.channel("asr") as channel:
        yield recognizer_pb2_grpc.RecognizerStub(channel)


@pytest.fixture(scope="module")
def router(asr_fleet):
    with asr_fleet.channel("router") as channel:
        yield recognizer_pb2_grpc.RecognizerStub(channel)


def fmt(rate=16000, encoding=audio.S16LE, channels=1):
    return audio_pb2.AudioFormat(encoding=encoding, sample_rate_hz=rate, channels=channels)


def config_msg(**kw):
    return Req(config=recognizer_pb2.RecognitionConfig(input_format=kw.pop("input_format", fmt()), **kw))


def run(stub, messages, timeout=20):
    return list(stub.StreamingRecognize(iter(messages), timeout=timeout))


def assert_serving(stub):
    """A good stream right after: silence in, no speech events, status OK."""
    assert run(stub, [config_msg(), Req(audio=SILENCE_100MS * 5)]) == []


BAD_STREAMS = [
    ("first message empty", [Req()], "config: the first message must carry config"),
    ("audio before config", [Req(audio=SILENCE_100MS), config_msg()], "config: audio came before the config"),
    ("config twice", [config_msg(), Req(audio=SILENCE_100MS), config_msg()], "config: was sent twice"),
    ("odd byte count", [config_msg(), Req(audio=b"\x00\x01\x02")], "audio: 3 bytes is not a whole number"),
    ("no rate", [config_msg(input_format=fmt(rate=0))], "config.input_format.sample_rate_hz: is required"),
    ("rate too low", [config_msg(input_format=fmt(rate=4000))], "config.input_format.sample_rate_hz: 4000 Hz"),
    ("rate too high", [config_msg(input_format=fmt(rate=96000))], "config.input_format.sample_rate_hz: 96000 Hz"),
    ("unspecified encoding", [config_msg(input_format=fmt(encoding=0))], "config.input_format.encoding"),
    ("unknown encoding", [config_msg(input_format=fmt(encoding=7))], "config.input_format.encoding"),
    ("stereo", [config_msg(input_format=fmt(channels=2))], "config.input_format.channels"),
    (
        "threshold",
        [config_msg(endpointing=recognizer_pb2.EndpointingConfig(threshold=1.5))],
        "config.endpointing.threshold",
    ),
    (
        "max utterance over the limit",
        [config_msg(endpointing=recognizer_pb2.EndpointingConfig(max_utterance_ms=600_000))],
        "config.endpointing.max_utterance_ms",
    ),
    ("empty phrase hint", [config_msg(phrase_hints=["ok", " "])], "config.phrase_hints"),
    ("unknown language", [config_msg(language="klingon")], "config.language"),
]


@pytest.mark.parametrize("name,messages,message", BAD_STREAMS, ids=[c[0] for c in BAD_STREAMS])
def test_bad_stream_status(target, name, messages, message):
    where, stub = target
    with pytest.raises(grpc.RpcError) as err:
        run(stub, messages)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (where, err.value.details())
    assert message in err.value.details(), (where, err.value.details())
    assert_serving(stub)


def test_empty_stream_is_refused(asr):
    with pytest.raises(grpc.RpcError) as err:
        run(asr, [])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "config" in err.value.details()


def test_message_over_4_mib_is_resource_exhausted(target):
    _, stub = target
    with pytest.raises(grpc.RpcError) as err:
        run(stub, [config_msg(), Req(audio=bytes(4 * 1024 * 1024 + 2))])
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert_serving(stub)


def test_unary_recognize_bad_input(asr):
    request = recognizer_pb2.RecognizeRequest(config=recognizer_pb2.RecognitionConfig(input_format=fmt()), audio=b"")
    with pytest.raises(grpc.RpcError) as err:
        list(asr.Recognize(request, timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "audio: is empty" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        list(asr.Recognize(recognizer_pb2.RecognizeRequest(audio=SILENCE_100MS), timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "config" in err.value.details()


def idle_after(messages):
    """Send ``messages``, then nothing for longer than the idle timeout (the call stays open)."""
    yield from messages
    time.sleep(6)


@pytest.mark.parametrize("first", ["nothing", "config", "config+audio"])
def test_idle_stream_ends_with_deadline_exceeded(target, first):
    where, stub = target
    messages = {"nothing": [], "config": [config_msg()], "config+audio": [config_msg(), Req(audio=SILENCE_100MS)]}
    with pytest.raises(grpc.RpcError) as err:
        list(stub.StreamingRecognize(idle_after(messages[first]), timeout=20))
    # The server ended the idle stream itself: its status names the idle timeout (2 s here). The caller's own
    # deadline (20 s, after the 6 s of silence) would end it as plain "Deadline Exceeded", naming nothing.
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, err.value.details()
    assert "asr.idle_timeout_seconds" in err.value.details()


def test_stream_over_max_audio_is_resource_exhausted(asr):
    second = bytes(32000)
    with pytest.raises(grpc.RpcError) as err:
        run(asr, [config_msg(), *[Req(audio=second)] * 31], timeout=60)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "asr.max_stream_seconds" in err.value.details()


def open_decoders(fleet) -> float:
    return fleet.metric("asr", "voicefleet_asr_open_decoders", service="asr")


def speech_stream(asr_speakers, texts=None) -> ev.PaddedStream:
    return asr_speakers.padded("joe", list(texts or ev.SENTENCES[1:3]), 16000)


@pytest.mark.parametrize("where", ["asr", "router"])
def test_client_cancel_mid_utterance_releases_the_decoder(asr_fleet, asr_speakers, where):
    stream = speech_stream(asr_speakers)
    cancelled_before = asr_fleet.metric(
        "asr", "voicefleet_requests_total", service="asr", method="StreamingRecognize", code="CANCELLED"
    )
    with asr_fleet.channel(where) as channel:
        stub = recognizer_pb2_grpc.RecognizerStub(channel)
        cfg = ev.config(16000, interim=True)
        call = stub.StreamingRecognize(ev.requests(stream.pcm, 16000, cfg, chunk_ms=40, realtime=True), timeout=60)
        kinds = []
        for reply in call:  # wait until the server is inside an utterance, with an interim decoder working
            kinds.append(reply.WhichOneof("event"))
            if kinds.count("result"):
                break
        assert wait_until(lambda: open_decoders(asr_fleet) >= 1, timeout=5)
        call.cancel()
    assert wait_until(lambda: open_decoders(asr_fleet) == 0, timeout=10), "the cancelled stream kept its decoders"
    assert wait_until(
        lambda: (
            asr_fleet.metric(
                "asr", "voicefleet_requests_total", service="asr", method="StreamingRecognize", code="CANCELLED"
            )
            == cancelled_before + 1
        )
    )
    assert asr_fleet.metric("asr", "voicefleet_active_streams", service="asr", method="StreamingRecognize") == 0


def test_deadline_reaches_the_backend(asr_fleet, router, asr_speakers):
    stream = speech_stream(asr_speakers)
    call = router.StreamingRecognize(
        ev.requests(stream.pcm, 16000, ev.config(16000), chunk_ms=100, realtime=True), timeout=1.0
    )
    with pytest.raises(grpc.RpcError) as err:
        list(call)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert wait_until(
        lambda: asr_fleet.metric("asr", "voicefleet_active_streams", service="asr", method="StreamingRecognize") == 0
    )
    assert wait_until(lambda: open_decoders(asr_fleet) == 0)


def test_ten_concurrent_streams_get_their_own_transcripts(asr_fleet, asr_speakers):
    texts = list(ev.SENTENCES[10:20])
    results: dict[int, list[str]] = {}
    errors = []

    def one(i: int, stub) -> None:
        stream = asr_speakers.padded("joe" if i % 2 else "espeak", [texts[i]], 16000)
        try:
            cfg = ev.config(16000, interim=i % 3 == 0)
            replies = stub.StreamingRecognize(
                ev.requests(stream.pcm, 16000, cfg, request_id=f"s{i}", realtime=True), timeout=120
            )
            replies = list(replies)
            assert {r.request_id for r in replies} == {f"s{i}"}
            results[i] = [
                r.result.transcript for r in replies if r.WhichOneof("event") == "result" and r.result.is_final
            ]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((i, e))

    with asr_fleet.channel("router") as via_router, asr_fleet.channel("asr") as direct:
        stubs = [recognizer_pb2_grpc.RecognizerStub(c) for c in (via_router, direct)]
        threads = [threading.Thread(target=one, args=(i, stubs[i % 2])) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
    assert not errors, errors
    for i, text in enumerate(texts):
        assert len(results[i]) == 1, (text, results[i])
        bound = 0.2 if i % 2 else 0.5  # joe / espeak (one sentence: a word or two of espeak may go)
        assert ev.wer([text], results[i]) <= bound, (text, results[i])
    # Each heard its own sentence, not another's.
    for i, text in enumerate(texts):
        others = [ev.wer([t], results[i]) for j, t in enumerate(texts) if j != i]
        assert ev.wer([text], results[i]) < min(others)
    assert wait_until(lambda: open_decoders(asr_fleet) == 0)


def test_max_utterance_forces_finals(asr, asr_speakers):
    """Speech with no pause: finals come at most every max_utterance_ms, each with its SPEECH_START/END."""
    joined = b"".join(asr_speakers._cache[("joe", t)][0] for t in ev.SENTENCES[:3])  # 22.05 kHz, back to back
    pcm = bytes(11025 * 2) + joined + bytes(11025 * 2)
    cfg = ev.config(22050, interim=False, max_utterance_ms=2000)
    replies = list(asr.StreamingRecognize(ev.requests(pcm, 22050, cfg), timeout=120))
    finals = [r.result for r in replies if r.WhichOneof("event") == "result"]
    assert len(finals) >= 3
    for f in finals:
        assert f.utterance_end_ms - f.utterance_start_ms <= 2000 + 32
    vad = [r.vad.kind for r in replies if r.WhichOneof("event") == "vad"]
    assert vad.count(recognizer_pb2.VadEvent.KIND_SPEECH_START) == vad.count(recognizer_pb2.VadEvent.KIND_SPEECH_END)
    assert vad.count(recognizer_pb2.VadEvent.KIND_SPEECH_END) == len(finals)
    assert ev.wer([" ".join(ev.SENTENCES[:3])], [" ".join(f.transcript for f in finals)]) <= 0.35


def test_unary_recognize_through_the_router(router, asr_speakers):
    stream = asr_speakers.padded("joe", [ev.SENTENCES[5]], 24000)
    request = recognizer_pb2.RecognizeRequest(request_id="u", config=ev.config(24000, interim=False), audio=stream.pcm)
    replies = list(router.Recognize(request, timeout=60))
    assert {r.request_id for r in replies} == {"u"}
    finals = [r.result.transcript for r in replies if r.WhichOneof("event") == "result"]
    assert ev.wer([ev.SENTENCES[5]], finals) <= 0.15


def test_streams_over_the_limit_are_resource_exhausted(asr_fleet, asr):
    """As many open streams as asr.max_concurrent_streams (0 in the config: 5 per core) are served; one more is
    refused at once with a retry hint; the server stays up."""
    limit = CPU_STREAMS_PER_CORE * cpu_cores()
    assert asr_fleet.config.asr.max_concurrent_streams == 0, "this test reads the default capacity"
    gate = threading.Event()

    def held():  # a live stream: silence every 0.5 s (under the idle timeout) until the gate opens
        yield config_msg()
        while not gate.wait(0.5):
            yield Req(audio=SILENCE_100MS)

    calls = [asr.StreamingRecognize(held(), timeout=20) for _ in range(limit)]
    try:
        assert wait_until(
            lambda: (
                asr_fleet.metric("asr", "voicefleet_active_streams", service="asr", method="StreamingRecognize")
                >= limit
            )
        )
        with pytest.raises(grpc.RpcError) as err:
            run(asr, [config_msg(), Req(audio=SILENCE_100MS)])
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"capacity of {limit} streams (asr.max_concurrent_streams)" in err.value.details()
        assert dict(err.value.trailing_metadata()).get("grpc-retry-pushback-ms"), "a retry hint"
    finally:
        gate.set()
        for call in calls:
            call.cancel()
    assert wait_until(
        lambda: asr_fleet.metric("asr", "voicefleet_active_streams", service="asr", method="StreamingRecognize") == 0
    )
    assert_serving(asr)
