"""Spot phrases (RecognitionConfig.spot_phrases, docs/asr.md#spot-phrases): the real asr service, through the router
on loopback, hears a stop word early in an utterance and says so (PhraseSpotted) before the utterance's final; a
backchannel spots nothing; bad spot phrases are INVALID_ARGUMENT naming the field.

The audio is piper joe's, streamed at the pace of real time in 20 ms messages, as a live caller's microphone: the
spotter re-decodes the young utterance as its audio arrives (sent all at once, the utterance would end before a
second look).
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from bench import evaluation as ev
from services.common.config.base import DEFAULT_STOP_WORDS
from voice.v1 import recognizer_pb2, recognizer_pb2_grpc

RATE = 16000
Req = recognizer_pb2.StreamingRecognizeRequest


@pytest.fixture(scope="module")
def router(asr_fleet):
    with asr_fleet.channel("router") as channel:
        yield recognizer_pb2_grpc.RecognizerStub(channel)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), dtype=np.int16)


def spot_config(phrases=DEFAULT_STOP_WORDS, interim: bool = False) -> recognizer_pb2.RecognitionConfig:
    config = ev.config(RATE, interim=interim)
    config.spot_phrases.extend(phrases)
    return config


def live(stub, samples: np.ndarray, config) -> list:
    """One stream at the pace of real time, 20 ms per message."""
    pcm = np.concatenate([silence(0.4), samples, silence(0.8)]).tobytes()
    return list(stub.StreamingRecognize(ev.requests(pcm, RATE, config, chunk_ms=20, realtime=True), timeout=60))


def kinds(replies) -> list[str]:
    out = []
    for r in replies:
        kind = r.WhichOneof("event")
        if kind == "vad":
            kind = "start" if r.vad.kind == recognizer_pb2.VadEvent.KIND_SPEECH_START else "end"
        elif kind == "result":
            kind = "final" if r.result.is_final else "interim"
        out.append(kind)
    return out


@pytest.mark.parametrize("text", ["Stop.", "Wait."])
async def test_a_stop_word_is_spotted_before_the_utterances_final(joe, router, asr_fleet, text):
    before = asr_fleet.metric("asr", "voicefleet_asr_phrases_spotted_total")
    replies = live(router, await joe(text), spot_config())
    seen = kinds(replies)
    assert seen.count("phrase_spotted") == 1, seen
    assert seen.index("start") < seen.index("phrase_spotted") < seen.index("final"), seen
    spotted = next(r.phrase_spotted for r in replies if r.WhichOneof("event") == "phrase_spotted")
    final = next(r.result for r in replies if kinds([r]) == ["final"])
    assert spotted.phrase == text.strip(".").lower(), spotted
    assert text.strip(".").lower() in spotted.transcript.lower(), spotted
    assert spotted.utterance_index == final.utterance_index == 0
    assert spotted.utterance_start_ms == final.utterance_start_ms
    # Heard early: from audio of the utterance's start, not after its end.
    assert final.utterance_start_ms < spotted.offset_ms <= final.audio_processed_ms
    assert asr_fleet.metric("asr", "voicefleet_asr_phrases_spotted_total") == before + 1


@pytest.mark.parametrize("text", ["Mm-hm.", "Okay.", "Yeah."])
async def test_a_backchannel_spots_nothing(joe, router, text):
    replies = live(router, await joe(text), spot_config(interim=True))
    seen = kinds(replies)
    assert "final" in seen and "phrase_spotted" not in seen, seen


async def test_the_phrases_asked_for_are_the_ones_spotted(joe, router):
    """A phrase of several words, normalised ("Hold on!" asked, "hold on" heard); a stop word not asked for is not
    spotted."""
    said = await joe("Hold on.")
    replies = live(router, said, spot_config(["Hold on!", "pineapple"]))
    spotted = [r.phrase_spotted for r in replies if r.WhichOneof("event") == "phrase_spotted"]
    assert [s.phrase for s in spotted] == ["Hold on!"], kinds(replies)
    replies = live(router, await joe("Stop."), spot_config(["pineapple"]))
    assert "phrase_spotted" not in kinds(replies)


async def test_no_spot_phrases_no_spotting(joe, router, asr_fleet):
    before = asr_fleet.metric("asr", "voicefleet_asr_spot_decode_seconds_count")
    replies = live(router, await joe("Stop."), ev.config(RATE, interim=False))
    assert kinds(replies) == ["start", "end", "final"]
    assert asr_fleet.metric("asr", "voicefleet_asr_spot_decode_seconds_count") == before


def with_spotting(requests, paused: bool, after_s: float = 0.0):
    """The stream's requests with a SpottingControl(paused) sent after ``after_s`` of its audio."""
    sent = 0.0
    for request in requests:
        if request.WhichOneof("payload") == "audio":
            if sent <= after_s < sent + len(request.audio) / 2 / RATE:
                yield Req(spotting=recognizer_pb2.SpottingControl(paused=paused))
            sent += len(request.audio) / 2 / RATE
        yield request


@pytest.mark.parametrize("target", ["asr", "router"])
async def test_paused_spotting_spots_nothing_and_resumed_spots_again(joe, asr_fleet, target):
    """A voice agent pauses its stop words while the user has the floor: no spotting decodes, the final as usual;
    resumed, a stop word is spotted again (through the router too: it passes the control on)."""
    stop = np.concatenate([silence(0.4), await joe("Stop."), silence(0.8)]).tobytes()
    decodes = "voicefleet_asr_spot_decode_seconds_count"
    with asr_fleet.channel(target) as channel:
        stub = recognizer_pb2_grpc.RecognizerStub(channel)
        before = asr_fleet.metric("asr", decodes)
        requests = ev.requests(stop, RATE, spot_config(), chunk_ms=20, realtime=True)
        replies = list(stub.StreamingRecognize(with_spotting(requests, paused=True), timeout=60))
        assert kinds(replies) == ["start", "end", "final"], kinds(replies)
        assert "stop" in replies[-1].result.transcript.lower()
        assert asr_fleet.metric("asr", decodes) == before
        # Paused from the start, resumed after 0.2 s: the utterance (at 0.4 s) is spotted.
        paused_then_resumed = with_spotting(
            with_spotting(ev.requests(stop, RATE, spot_config(), chunk_ms=20, realtime=True), paused=True),
            paused=False,
            after_s=0.2,
        )
        replies = list(stub.StreamingRecognize(paused_then_resumed, timeout=60))
        assert kinds(replies).count("phrase_spotted") == 1, kinds(replies)
        assert asr_fleet.metric("asr", decodes) > before


@pytest.mark.parametrize(
    ("phrases", "field"),
    [
        (["stop", " "], "config.spot_phrases[1]"),
        (["..."], "config.spot_phrases[0]"),
        (["x" * 65], "config.spot_phrases[0]"),
        ([f"word{i}" for i in range(101)], "config.spot_phrases"),
    ],
)
@pytest.mark.parametrize("target", ["asr", "router"])
def test_bad_spot_phrases_are_invalid_argument_naming_the_field(asr_fleet, target, phrases, field):
    with asr_fleet.channel(target) as channel:
        stub = recognizer_pb2_grpc.RecognizerStub(channel)
        with pytest.raises(grpc.RpcError) as bad:
            list(stub.StreamingRecognize(iter([Req(config=spot_config(phrases))]), timeout=10))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in bad.value.details(), bad.value.details()
        request = recognizer_pb2.RecognizeRequest(config=spot_config(phrases), audio=bytes(3200))
        with pytest.raises(grpc.RpcError) as bad:
            list(stub.Recognize(request, timeout=10))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in bad.value.details()
