"""qwen_tts (espeak-ng CPU engine) as a user meets it: through the router and directly, over real gRPC on loopback.

Intelligibility: the strict listener (tests/speech.py: whisper base, open vocabulary) must hear the test sentence
word-perfect (WER <= 0.10 on seven words). The sentence is one espeak's robotic en-US voice says clearly: whisper
hears its "quick brown fox jumps" as "... dumps" (WER 0.11), so the fox sentence is not used here.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest

from services.common import audio
from tests.conftest import engine_steps, wait_until
from tests.conftest import settled_steps as settled
from tests.speech import INTELLIGIBLE, intelligible, speech_like
from voice.v1 import audio_pb2, routing_pb2, synthesizer_pb2, synthesizer_pb2_grpc

# `make test`'s second lane (syntheses checked by the strict listener, voices and routes, bad input: no clock): scripts/test-lanes.sh.
pytestmark = pytest.mark.background

SENTENCE = "the children are playing in the garden"
LONG_TEXT = " ".join(f"This is sentence number {i} of a long announcement." for i in range(1, 31))


@pytest.fixture(scope="module")
def fleet(tts_fleet):
    """The session's cosyvoice_tts + qwen_tts + router (tests/conftest.py), shared with other modules."""
    return tts_fleet


@pytest.fixture(scope="module")
def router(fleet):
    with fleet.channel("router") as channel:
        yield synthesizer_pb2_grpc.SynthesizerStub(channel)


@pytest.fixture(scope="module")
def direct(fleet):
    with fleet.channel("qwen_tts") as channel:
        yield synthesizer_pb2_grpc.SynthesizerStub(channel)


def fmt(rate: int) -> audio_pb2.AudioFormat:
    return audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1)


def synthesize(stub, text, rate=0, request_id="", **config):
    request = synthesizer_pb2.SynthesizeRequest(
        request_id=request_id,
        text=text,
        config=synthesizer_pb2.SynthesisConfig(output_format=fmt(rate) if rate else None, **config),
    )
    replies = list(stub.Synthesize(request, timeout=30))
    return replies, b"".join(r.audio.data for r in replies)


@pytest.mark.parametrize("target", ["router", "direct"])
def test_speaks_intelligibly(router, direct, target):
    stub = router if target == "router" else direct
    replies, pcm = synthesize(stub, SENTENCE, rate=16000, request_id="q-1", voice="en-US")
    assert {r.served_by for r in replies} == {"qwen_tts/espeak"}
    assert {r.request_id for r in replies} == {"q-1"}
    assert {r.audio.format.sample_rate_hz for r in replies} == {16000}
    error, heard = intelligible(SENTENCE, pcm, 16000)
    assert error <= INTELLIGIBLE, heard
    figures = speech_like(pcm, 16000)
    assert figures["rms"] > 0.02 and figures["clipped"] < 0.001 and figures["modulation"] > 0.8


def test_the_oracle_rejects_other_speech_and_noise(direct):
    _, other = synthesize(direct, "seven red dogs stop and go home", rate=16000, voice="en-US")
    noise = (np.random.default_rng(0).normal(0, 0.1, 16000 * 3) * 32767).astype(np.int16).tobytes()
    for pcm in (other, noise, bytes(16000 * 2 * 2)):
        error, heard = intelligible(SENTENCE, pcm, 16000)
        assert error > 0.5, heard


def test_native_rate_and_identical_audio_direct_and_via_router(router, direct):
    _, via_router = synthesize(router, SENTENCE, voice="en-US")
    _, straight = synthesize(direct, SENTENCE, voice="en-US")
    assert via_router == straight, "espeak output is deterministic; the router passes it through untouched"
    assert 1.7 < len(straight) / 2 / 22050 < 2.4  # seven words: 2.0 s at 22.05 kHz


def test_streams_first_chunk_before_the_last(router):
    text = "The first sentence is short. The second one is a little longer than the first. And a third."
    call = router.Synthesize(
        synthesizer_pb2.SynthesizeRequest(text=text, config=synthesizer_pb2.SynthesisConfig(voice="en-US")), timeout=30
    )
    first = next(call)
    # The first chunk is one espeak callback (60 ms) of the first sentence only: audio flows before the text is done.
    assert first.audio.sequence == 0 and first.audio.offset_samples == 0
    assert len(first.audio.data) // 2 <= 0.065 * 22050
    assert first.text_span.end_char < len(text)
    rest = list(call)
    replies = [first, *rest]
    assert len(rest) >= 3
    assert [r.audio.sequence for r in replies] == list(range(len(replies)))
    sizes = [len(r.audio.data) // 2 for r in replies]
    assert [r.audio.offset_samples for r in replies] == [sum(sizes[:i]) for i in range(len(sizes))]
    assert replies[-1].text_span.end_char == len(text)


def test_list_voices_includes_mandarin_and_the_presets(router, direct):
    for stub in (router, direct):
        mandarin = {
            v.id: v for v in stub.ListVoices(synthesizer_pb2.ListVoicesRequest(language="cmn"), timeout=10).voices
        }
        assert mandarin["cmn"].service == "qwen_tts" and mandarin["cmn"].engine == "espeak"
        assert "Vivian" in mandarin and "Ryan" in mandarin  # presets read every Qwen language
        assert "zh" in mandarin["cmn"].languages
    everything = router.ListVoices(synthesizer_pb2.ListVoicesRequest(), timeout=10).voices
    by_service = {}
    for v in everything:
        by_service.setdefault(v.service, set()).add(v.id)
    assert "joe" in by_service["cosyvoice_tts"] and {"en-US", "fr", "Sohee"} <= by_service["qwen_tts"]
    only_qwen = router.ListVoices(synthesizer_pb2.ListVoicesRequest(service="qwen_tts"), timeout=10).voices
    assert {v.service for v in only_qwen} == {"qwen_tts"} and len(only_qwen) > 100


def test_router_routes_each_voice_to_its_owner(router):
    for voice, owner in [("en-US", "qwen_tts/espeak"), ("Vivian", "qwen_tts/espeak"), ("joe", "cosyvoice_tts/piper")]:
        replies, pcm = synthesize(router, "Hello there.", voice=voice)
        assert {r.served_by for r in replies} == {owner}, voice
        assert len(pcm) > 0
    # Precedence: an explicit engine beats the voice's owner (cosyvoice_tts has no espeak voice).
    with pytest.raises(grpc.RpcError) as err:
        synthesize(router, "Hello.", voice="en-US", routing=routing_pb2.Routing(engine="cosyvoice_tts"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "config.voice: 'en-US' is not a voice of cosyvoice_tts" in err.value.details()
    # No voice, engine named: qwen_tts's default voice.
    replies, _ = synthesize(router, "Hello.", routing=routing_pb2.Routing(engine="qwen_tts"))
    assert {r.served_by for r in replies} == {"qwen_tts/espeak"}


def test_mandarin_through_the_router_is_speech(router):
    for config in (dict(voice="cmn"), dict(voice="Vivian"), dict(voice="Ryan", language="zh")):
        replies, pcm = synthesize(router, "你好，世界。今天天气很好。", rate=16000, **config)
        assert {r.served_by for r in replies} == {"qwen_tts/espeak"}
        figures = speech_like(pcm, 16000)
        assert len(pcm) / 2 / 16000 > 1.5, config
        assert figures["rms"] > 0.02 and figures["modulation"] > 0.8, (config, figures)


BAD = [
    ("unknown voice", dict(voice="nobody"), grpc.StatusCode.NOT_FOUND, "config.voice: 'nobody'"),
    (
        "language the voice lacks",
        dict(voice="cmn", language="fr"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "config.language: voice 'cmn' does not speak 'fr'",
    ),
    (
        "preset without that language",
        dict(voice="Vivian", language="sw"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "config.language",
    ),
    ("speaking rate", dict(voice="en-US", speaking_rate=3.0), grpc.StatusCode.INVALID_ARGUMENT, "config.speaking_rate"),
    (
        "50,000-char text",
        dict(voice="en-US", text="a" * 50_000),
        grpc.StatusCode.INVALID_ARGUMENT,
        "text: 50000 characters is over the limit of 5000",
    ),
]


@pytest.mark.parametrize("target", ["router", "direct"])
@pytest.mark.parametrize("name,config,code,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input(router, direct, target, name, config, code, message):
    stub = router if target == "router" else direct
    config = dict(config)
    text = config.pop("text", "Hello there.")
    with pytest.raises(grpc.RpcError) as err:
        synthesize(stub, text, **config)
    assert err.value.code() == code
    assert message in err.value.details()
    assert synthesize(stub, "Still here.", voice="en-US")[1], "the service keeps serving"


@pytest.mark.parametrize("target", ["router", "direct"])
def test_a_near_miss_voice_is_not_found_naming_the_closest_ids_not_all_of_them(router, direct, target):
    """qwen_tts has ~150 voices: a misspelt one gets the few closest and how to list them all, not the list."""
    stub = router if target == "router" else direct
    ids = {v.id for v in stub.ListVoices(synthesizer_pb2.ListVoicesRequest(), timeout=10).voices}
    assert len(ids) > 100
    with pytest.raises(grpc.RpcError) as err:
        synthesize(stub, "Hello there.", voice="Vivien")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    details = err.value.details()
    where = "any backend" if target == "router" else "qwen_tts"
    assert details.startswith(f"config.voice: 'Vivien' is not a voice of {where}; closest: "), details
    closest = details.split("closest: ", 1)[1].split(";", 1)[0].split(", ")
    assert "Vivian" in closest and len(closest) <= 5 and set(closest) <= ids, closest
    assert "`voicefleet voices" in details and "(ListVoices) lists all" in details, details
    assert details.count(",") < 5 and len(details) < 300, details  # not the whole list


@pytest.mark.parametrize("target", ["router", "direct"])
def test_register_voice_is_refused_honestly(router, direct, target):
    _, prompt = synthesize(direct, LONG_TEXT[:120], voice="en-US")  # ~7 s of speech at 22.05 kHz
    request = synthesizer_pb2.RegisterVoiceRequest(
        voice_id="my_clone",
        prompt_audio=prompt[: 22050 * 2 * 6],
        prompt_format=fmt(22050),
        prompt_transcript="This is sentence number one of a long announcement.",
        routing=routing_pb2.Routing(engine="qwen_tts"),
    )
    stub = router if target == "router" else direct
    with pytest.raises(grpc.RpcError) as err:
        stub.RegisterVoice(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "engine qwen_tts/espeak cannot clone voices" in err.value.details()


def steps(fleet) -> float:
    return engine_steps(fleet, "qwen_tts", engine="espeak")


def settled_steps(fleet) -> float:
    return settled(fleet, "qwen_tts", quiet=0.4, timeout=10.0, engine="espeak")


def qwen_codes(fleet) -> dict[str, float]:
    return {
        code: fleet.metric("qwen_tts", "voicefleet_requests_total", service="qwen_tts", method="Synthesize", code=code)
        for code in ("OK", "CANCELLED")
    }


def test_cancel_through_router_stops_espeak(fleet, router):
    request = synthesizer_pb2.SynthesizeRequest(text=LONG_TEXT, config=synthesizer_pb2.SynthesisConfig(voice="en-US"))
    before = settled_steps(fleet)
    list(router.Synthesize(request, timeout=30))
    full = settled_steps(fleet) - before  # deterministic: the same count every run (about 1500 callbacks)

    before, codes = settled_steps(fleet), qwen_codes(fleet)
    call = router.Synthesize(request, timeout=30)
    next(call)
    call.cancel()
    assert wait_until(lambda: qwen_codes(fleet)["CANCELLED"] == codes["CANCELLED"] + 1), qwen_codes(fleet)
    assert wait_until(
        lambda: fleet.metric("qwen_tts", "voicefleet_active_streams", service="qwen_tts", method="Synthesize") == 0
    )
    ran = settled_steps(fleet) - before
    # The first sentence or two of 30, not the whole text: the engine stopped.
    assert ran < full / 5, (ran, full)
    time.sleep(0.8)
    assert steps(fleet) - before == ran, "espeak kept working after the cancel"


def test_cli_speak_reaches_qwen_tts_by_voice(fleet, tmp_path):
    out = tmp_path / "out.wav"
    cli = [sys.executable, "-m", "services.cli.main", "--config", str(fleet.config_path)]
    result = subprocess.run(
        [*cli, "speak", SENTENCE, "--voice", "en-US", "-o", str(out), "--rate", "16000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "served by qwen_tts/espeak" in result.stdout
    pcm, rate = audio.read_wav(str(out))
    assert rate == 16000
    error, heard = intelligible(SENTENCE, pcm, rate)
    assert error <= INTELLIGIBLE, heard


def test_streaming_text_word_by_word_speaks_before_the_text_ends(router):
    """StreamingSynthesize (the shared servicer's) on espeak: the first audio comes before the last word is sent.
    The feeder holds back the last word until audio arrived (30 s at most); no timing is asserted."""
    answer = "Sure. The first train leaves at nine in the morning, and the last one at ten at night."
    words = answer.split(" ")
    log: list[str] = []
    first_audio = threading.Event()

    def requests():
        yield synthesizer_pb2.StreamingSynthesizeRequest(
            request_id="qs-1",
            config=synthesizer_pb2.StreamingSynthesisConfig(synthesis=synthesizer_pb2.SynthesisConfig(voice="Ryan")),
        )
        for i, w in enumerate(words):
            if i == len(words) - 1:
                first_audio.wait(30)
            log.append(f"word {i}")
            yield synthesizer_pb2.StreamingSynthesizeRequest(text_delta=(" " if i else "") + w)
        yield synthesizer_pb2.StreamingSynthesizeRequest(end_of_text=True)

    replies = []
    for reply in router.StreamingSynthesize(requests(), timeout=60):
        if not replies:
            log.append("first audio")
            first_audio.set()
        replies.append(reply)
    assert log.index("first audio") < log.index(f"word {len(words) - 1}"), log
    assert {r.served_by for r in replies} == {"qwen_tts/espeak"} and {r.request_id for r in replies} == {"qs-1"}
    assert replies[-1].text_span.end_char == len(answer)


def test_language_without_voice_picks_a_voice_of_that_language(direct):
    for language, voice_heard in [("fr", "fr"), ("fr-BE", "fr-BE"), ("zh", "cmn"), ("en-US", "en-US")]:
        replies, same = synthesize(direct, "Bonjour.", language=language)
        _, named = synthesize(direct, "Bonjour.", voice=voice_heard)
        assert same == named, (language, voice_heard)


# --- language-aware routing (services/common/voices.py, services/router/policy.py) ---------------------------------
# espeak-ng's Mandarin voice is deterministic: a request routed to it gives the same audio as one naming it. The
# strict listener in Chinese (tests/speech.py, whisper base, language zh) does not understand espeak's robotic
# Mandarin (character error rate 0.92-1.0 on three sentences, 2026-11-25), so it is not the check here.
CHINESE = "你好，欢迎使用语音合成服务。"


@pytest.mark.parametrize("target", ["router", "direct"])
@pytest.mark.parametrize("language", ["", "zh-CN", "zh", "cmn"])
def test_chinese_goes_to_the_mandarin_voice(router, direct, target, language):
    stub = router if target == "router" else direct
    replies, pcm = synthesize(stub, CHINESE, language=language)  # no voice; no language: from the text's script
    assert {r.served_by for r in replies} == {"qwen_tts/espeak"}
    _, mandarin = synthesize(direct, CHINESE, voice="cmn", language="zh")
    assert pcm == mandarin, "spoken by espeak's Mandarin voice cmn"


def streaming(stub, deltas, **config):
    def requests():
        yield synthesizer_pb2.StreamingSynthesizeRequest(
            config=synthesizer_pb2.StreamingSynthesisConfig(synthesis=synthesizer_pb2.SynthesisConfig(**config))
        )
        for delta in deltas:
            yield synthesizer_pb2.StreamingSynthesizeRequest(text_delta=delta)
        yield synthesizer_pb2.StreamingSynthesizeRequest(end_of_text=True)

    replies = list(stub.StreamingSynthesize(requests(), timeout=30))
    return replies, b"".join(r.audio.data for r in replies)


def test_streaming_chinese_goes_to_the_mandarin_voice(router):
    replies, pcm = streaming(router, ["你好，", "欢迎使用", "语音合成服务。"])
    assert {r.served_by for r in replies} == {"qwen_tts/espeak"}
    assert len(pcm) / 2 / 22050 > 1.0
    with pytest.raises(grpc.RpcError) as err:
        streaming(router, ["你好，", "欢迎。"], voice="joe")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "config.synthesis.language: voice 'joe' does not speak 'zh' (detected from the text's script" in (
        err.value.details()
    )


@pytest.mark.parametrize(
    "config,says",
    [
        (dict(voice="joe"), "voice 'joe' does not speak 'zh' (detected from the text's script"),
        (dict(voice="joe", language="zh-CN"), "voice 'joe' does not speak 'zh-CN'; it speaks en-US"),
    ],
)
def test_an_english_voice_is_refused_for_chinese_naming_the_voices_that_speak_it(router, config, says):
    with pytest.raises(grpc.RpcError) as err:
        synthesize(router, CHINESE, **config)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details()
    assert details.startswith("config.language: ") and says in details
    assert "voices that speak it: cmn (qwen_tts/espeak)" in details, details


def test_a_language_no_voice_of_the_pinned_engine_speaks_is_refused(router):
    with pytest.raises(grpc.RpcError) as err:
        synthesize(router, CHINESE, routing=routing_pb2.Routing(engine="cosyvoice_tts"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "config.language: no voice was named and no voice here speaks 'zh'" in err.value.details()
    assert "languages spoken: en" in err.value.details()


def test_english_text_keeps_the_default_route(router):
    replies, _ = synthesize(router, "Hello there.")
    assert {r.served_by for r in replies} == {"cosyvoice_tts/piper"}
