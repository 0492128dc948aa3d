"""Bad requests get a clear status naming the field; the server stays up and other streams are unaffected."""

from __future__ import annotations

import threading

import grpc
import pytest

from services.common import audio
from tests.speech import INTELLIGIBLE, intelligible
from voice.v1 import audio_pb2, routing_pb2, synthesizer_pb2


def call(stub, text="Hello there.", **config):
    request = synthesizer_pb2.SynthesizeRequest(text=text, config=synthesizer_pb2.SynthesisConfig(**config))
    return list(stub.Synthesize(request, timeout=20))


def fmt(rate):
    return audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1)


CASES = [
    ("empty text", dict(text=""), grpc.StatusCode.INVALID_ARGUMENT, "text:"),
    ("whitespace text", dict(text=" \n\t "), grpc.StatusCode.INVALID_ARGUMENT, "text:"),
    ("text over the limit", dict(text="word " * 1001), grpc.StatusCode.INVALID_ARGUMENT, "over the limit of 5000"),
    ("unknown voice", dict(voice="nobody"), grpc.StatusCode.NOT_FOUND, "config.voice: 'nobody'"),
    ("rate too low", dict(output_format=fmt(4000)), grpc.StatusCode.INVALID_ARGUMENT, "sample_rate_hz: 4000 Hz"),
    ("rate too high", dict(output_format=fmt(96000)), grpc.StatusCode.INVALID_ARGUMENT, "sample_rate_hz: 96000 Hz"),
    (
        "stereo",
        dict(output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=16000, channels=2)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "channels",
    ),
    ("speaking rate", dict(speaking_rate=5.0), grpc.StatusCode.INVALID_ARGUMENT, "config.speaking_rate"),
    ("language the voice lacks", dict(language="fr-FR"), grpc.StatusCode.INVALID_ARGUMENT, "config.language"),
]


@pytest.mark.parametrize("target", ["router", "cosyvoice_tts"])
@pytest.mark.parametrize("name,args,code,message", CASES, ids=[c[0] for c in CASES])
def test_bad_request_status(router_tts, direct_tts, target, name, args, code, message):
    stub = router_tts if target == "router" else direct_tts
    with pytest.raises(grpc.RpcError) as err:
        call(stub, **args)
    assert err.value.code() == code
    assert message in err.value.details()
    assert call(stub), "the server must keep serving after a bad request"


def test_unknown_engine_name(router_tts):
    with pytest.raises(grpc.RpcError) as err:
        call(router_tts, routing=routing_pb2.Routing(engine="tortoise"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "config.routing.engine: 'tortoise'" in err.value.details()
    assert "cosyvoice_tts" in err.value.details()  # says what would work


def test_register_voice_on_cpu_engine_is_refused_honestly(router_tts):
    prompt = b"\x01\x00" * 16000 * 5
    request = synthesizer_pb2.RegisterVoiceRequest(
        voice_id="alice", prompt_audio=prompt, prompt_format=fmt(16000), prompt_transcript="some words"
    )
    with pytest.raises(grpc.RpcError) as err:
        router_tts.RegisterVoice(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cannot clone voices" in err.value.details()
    short = synthesizer_pb2.RegisterVoiceRequest(
        voice_id="alice", prompt_audio=prompt[: 16000 * 2], prompt_format=fmt(16000), prompt_transcript="x"
    )
    with pytest.raises(grpc.RpcError) as err:
        router_tts.RegisterVoice(short, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "prompt_audio" in err.value.details()


def test_oversized_message_is_resource_exhausted(direct_tts):
    with pytest.raises(grpc.RpcError) as err:
        call(direct_tts, text="a" * (5 * 1024 * 1024))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert call(direct_tts)


def test_bad_requests_do_not_disturb_a_concurrent_stream(router_tts):
    text = "Please call me back when you get home. " * 3
    result = {}

    def good():
        replies = list(router_tts.Synthesize(synthesizer_pb2.SynthesizeRequest(text=text), timeout=30))
        result["replies"] = replies

    t = threading.Thread(target=good)
    t.start()
    for _ in range(10):
        with pytest.raises(grpc.RpcError):
            call(router_tts, text="")
    t.join(30)
    replies = result["replies"]
    assert replies[-1].text_span.end_char == len(text.rstrip())  # spoke to the end
    pcm = b"".join(r.audio.data for r in replies)
    error, heard = intelligible(text, pcm, 22050)
    assert error <= INTELLIGIBLE, heard
