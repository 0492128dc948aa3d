"""Text -> router -> cosyvoice_tts (piper joe) -> audio, checked the way a listener would."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from services.common import audio
from tests.speech import INTELLIGIBLE, intelligible, speech_like
from voice.v1 import audio_pb2, synthesizer_pb2

# `make test`'s second lane (whole syntheses checked by the strict listener: no clock): scripts/test-lanes.sh.
pytestmark = pytest.mark.background

SENTENCE = "hello world this is a test"


def synthesize(stub, text, rate=0, **config):
    request = synthesizer_pb2.SynthesizeRequest(
        request_id="req-e2e",
        text=text,
        config=synthesizer_pb2.SynthesisConfig(
            output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1), **config
        ),
    )
    replies = list(stub.Synthesize(request, timeout=30))
    return replies, b"".join(r.audio.data for r in replies)


def test_router_speech_is_intelligible(router_tts):
    replies, pcm = synthesize(router_tts, SENTENCE, rate=16000)
    assert replies, "no audio chunks"
    assert {r.request_id for r in replies} == {"req-e2e"}
    assert {r.served_by for r in replies} == {"cosyvoice_tts/piper"}
    assert all(r.audio.format.sample_rate_hz == 16000 for r in replies)
    # The strict listener (open vocabulary, tests/speech.py) hears the sentence word for word.
    error, heard = intelligible(SENTENCE, pcm, 16000)
    assert error <= INTELLIGIBLE, heard


def test_the_oracle_rejects_noise_silence_and_wrong_speech(direct_tts):
    """The checks above can fail: noise, silence and another sentence do not pass them."""
    rng = np.random.default_rng(0)
    noise = (rng.normal(0, 0.1, 16000 * 2) * 32767).astype(np.int16).tobytes()
    silence = bytes(16000 * 2 * 2)
    _, other = synthesize(direct_tts, "seven red dogs jump over the blue moon", rate=16000)
    for pcm in (noise, silence, other):
        error, heard = intelligible(SENTENCE, pcm, 16000)
        assert error > 0.5, heard
    assert speech_like(noise, 16000)["modulation"] < 0.8
    assert speech_like(silence, 16000)["rms"] < 0.02


def test_audio_is_speech_not_noise_or_silence(router_tts):
    _, pcm = synthesize(router_tts, SENTENCE, rate=22050)
    figures = speech_like(pcm, 22050)
    assert 1.0 < len(pcm) / 2 / 22050 < 4.0  # six words take about 1.5 s
    assert figures["rms"] > 0.02
    assert figures["clipped"] < 0.001
    assert figures["speech_band"] > 0.8
    assert figures["modulation"] > 0.8


@pytest.mark.parametrize("rate", [8000, 16000, 24000, 44100, 48000])
def test_output_rate_is_honoured(router_tts, direct_tts, rate):
    _, native = synthesize(direct_tts, SENTENCE)
    replies, pcm = synthesize(router_tts, SENTENCE, rate=rate)
    assert {r.audio.format.sample_rate_hz for r in replies} == {rate}
    assert {r.audio.format.encoding for r in replies} == {audio.S16LE}
    # Same speech at another rate: piper's own timing varies ~3% run to run, so durations agree within 10%,
    # and the words are heard (mislabelled audio would play 1.4-2x too fast or slow and fail this).
    assert abs(len(pcm) / 2 / rate - len(native) / 2 / 22050) < 0.1 * len(native) / 2 / 22050
    assert speech_like(pcm, rate)["modulation"] > 0.8
    error, heard = intelligible(SENTENCE, pcm, rate)
    assert error <= INTELLIGIBLE, (rate, heard)


def test_chunks_are_contiguous_and_streamed(router_tts):
    text = "The first sentence is short. The second one is a little longer than the first. And a third."
    replies, pcm = synthesize(router_tts, text, rate=16000)
    assert len(replies) >= 3
    assert [r.audio.sequence for r in replies] == list(range(len(replies)))
    offsets = [r.audio.offset_samples for r in replies]
    sizes = [len(r.audio.data) // 2 for r in replies]
    assert offsets == [sum(sizes[:i]) for i in range(len(sizes))]
    # Chunks carry the text they speak: spans cover the text in order, ending at its end.
    spans = [(r.text_span.start_char, r.text_span.end_char) for r in replies]
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert spans == sorted(spans)
    assert all(len(r.audio.data) <= 16000 * 2 * 0.2 + 2 for r in replies)  # max_chunk_ms 200


def test_list_voices_through_router(router_tts):
    reply = router_tts.ListVoices(synthesizer_pb2.ListVoicesRequest(request_id="lv"), timeout=10)
    assert reply.request_id == "lv"
    joe = {v.id: v for v in reply.voices}["joe"]
    assert joe.service == "cosyvoice_tts" and joe.engine == "piper"
    assert joe.native_sample_rate_hz == 22050 and list(joe.languages) == ["en-US"]
    assert router_tts.ListVoices(synthesizer_pb2.ListVoicesRequest(language="fr"), timeout=10).voices == []


def test_speaking_rate_changes_duration(direct_tts):
    _, normal = synthesize(direct_tts, SENTENCE)
    _, fast = synthesize(direct_tts, SENTENCE, speaking_rate=1.5)
    assert len(fast) < 0.8 * len(normal)


def test_cli_speak_and_status(cpu_fleet, tmp_path):
    out = tmp_path / "out.wav"
    cli = [sys.executable, "-m", "services.cli.main", "--config", str(cpu_fleet.config_path)]
    result = subprocess.run(
        [*cli, "speak", SENTENCE, "-o", str(out), "--rate", "16000"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "time to first audio:" in result.stdout and "RTF" in result.stdout
    pcm, rate = audio.read_wav(str(out))
    assert rate == 16000
    error, heard = intelligible(SENTENCE, pcm, rate)
    assert error <= INTELLIGIBLE, heard

    status = subprocess.run([*cli, "status"], capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {line.split()[0]: line.split()[1:] for line in status.stdout.splitlines() if line.strip()}
    assert rows["cosyvoice_tts"][1] == "SERVING" and rows["router"][1] == "SERVING", status.stdout

    bad = subprocess.run(
        [*cli, "speak", "   ", "-o", str(tmp_path / "x.wav")], capture_output=True, text=True, timeout=30
    )
    assert bad.returncode != 0
    assert "INVALID_ARGUMENT" in bad.stderr and "text" in bad.stderr


def test_request_id_is_assigned_when_missing(router_tts):
    replies = list(router_tts.Synthesize(synthesizer_pb2.SynthesizeRequest(text="Hi."), timeout=30))
    ids = {r.request_id for r in replies}
    assert len(ids) == 1 and len(ids.pop()) >= 8


def test_a_long_first_sentence_without_a_comma_starts_before_its_end(direct_tts):
    """Issue 23: the first audio of a 70-character first sentence with no clause mark is its first few words (the
    first chunk's text span ends well before the sentence does), and the whole reply is still heard word for word."""
    text = "The weather service expects heavy rain over the northern hills tonight. Please stay safe."
    sentence_end = text.index(".") + 1
    assert sentence_end == 71
    replies, pcm = synthesize(direct_tts, text, rate=16000)
    first_span = replies[0].text_span
    assert 0 < first_span.end_char < sentence_end - 20, first_span  # its first few words, not the sentence
    assert text[first_span.start_char : first_span.end_char] == "The weather service expects heavy"
    assert max(r.text_span.end_char for r in replies) == len(text)  # every word is spoken
    error, heard = intelligible(text, pcm, 16000)
    assert error <= INTELLIGIBLE, f"heard {heard!r} (WER {error:.2f} > {INTELLIGIBLE})"
