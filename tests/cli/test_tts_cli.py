"""The TTS commands of the voicefleet CLI against a real fleet (cosyvoice_tts + qwen_tts + router):
voices by engine, speak --voice reaching the engine that has the voice, speak --stream-text, register-voice."""

from __future__ import annotations

import subprocess
import sys

import pytest

from services.common import audio
from tests.speech import INTELLIGIBLE, intelligible

# `make test`'s second lane (CLI commands against the tts fleet, each checked by what it wrote: no clock): scripts/test-lanes.sh.
pytestmark = pytest.mark.background


@pytest.fixture(scope="module")
def fleet(tts_fleet):
    """The session's cosyvoice_tts + qwen_tts + router (tests/conftest.py), shared with other modules."""
    return tts_fleet


def cli(fleet, *args, timeout=90):
    cmd = [sys.executable, "-m", "services.cli.main", "--config", str(fleet.config_path), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_voices_lists_every_backend_by_engine(fleet):
    result = cli(fleet, "voices")
    assert result.returncode == 0, result.stderr
    assert "cosyvoice_tts/piper" in result.stdout and "qwen_tts/espeak" in result.stdout
    assert " joe " in result.stdout and "Ryan" in result.stdout
    only = cli(fleet, "voices", "--service", "cosyvoice_tts")
    assert only.returncode == 0 and "qwen_tts" not in only.stdout
    none = cli(fleet, "voices", "--language", "xx-XX")
    assert none.returncode == 1 and "no voices" in none.stdout


@pytest.mark.parametrize("voice,served_by", [("joe", "cosyvoice_tts/piper"), ("Ryan", "qwen_tts/espeak")])
def test_speak_voice_reaches_the_engine_that_has_it(fleet, tmp_path, voice, served_by):
    # A sentence both voices say clearly to the strict listener (measured 2026-11-25: WER 0 for joe, espeak en-US and
    # Ryan, espeak's en-US with variant m4; Ryan's "the children are playing ..." is heard as "... played ...").
    text = "please call me back when you get home"
    out = tmp_path / f"{voice}.wav"
    result = cli(fleet, "speak", text, "--voice", voice, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"served by {served_by}" in result.stdout
    pcm, rate = audio.read_wav(str(out))
    error, heard = intelligible(text, pcm, rate)
    assert error <= INTELLIGIBLE, heard


def test_speak_stream_text(fleet, tmp_path):
    text = "Sure. The first train leaves at nine in the morning, and the last one at ten at night."
    out = tmp_path / "stream.wav"
    result = cli(fleet, "speak", text, "--stream-text", "--word-ms", "40", "--voice", "joe", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "served by cosyvoice_tts/piper" in result.stdout
    assert "first audio" in result.stdout and "the last word" in result.stdout
    assert "first audio spoke: 'Sure.'" in result.stdout
    pcm, rate = audio.read_wav(str(out))
    error, heard = intelligible(text, pcm, rate)
    assert error <= INTELLIGIBLE, heard


def test_register_voice(fleet, tmp_path):
    prompt = tmp_path / "prompt.wav"
    words_said = "this is my voice, reading a short prompt for the cloning of a new voice, slowly and clearly"
    speak = cli(fleet, "speak", words_said, "--speaking-rate", "0.8", "-o", str(prompt))
    assert speak.returncode == 0, speak.stderr
    # No engine of the CPU fleet clones: an honest FAILED_PRECONDITION, not a fake voice.
    refused = cli(fleet, "register-voice", "my_voice", str(prompt), words_said)
    assert refused.returncode != 0
    assert "FAILED_PRECONDITION" in refused.stderr and "cannot clone voices" in refused.stderr
    clash = cli(fleet, "register-voice", "joe", str(prompt), words_said)
    assert clash.returncode != 0 and "ALREADY_EXISTS" in clash.stderr and "voice_id: 'joe'" in clash.stderr
    missing = cli(fleet, "register-voice", "x", str(tmp_path / "nope.wav"), "words")
    assert missing.returncode != 0 and "cannot read" in missing.stderr


CHINESE = "你好，欢迎使用语音合成服务。"


@pytest.mark.parametrize("flags", [(), ("--language", "zh-CN")])
def test_speak_chinese_reaches_a_mandarin_voice(fleet, tmp_path, flags):
    # No voice: the language (given, or from the text's script) picks espeak's Mandarin voice on qwen_tts.
    out = tmp_path / "zh.wav"
    result = cli(fleet, "speak", CHINESE, *flags, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "served by qwen_tts/espeak" in result.stdout
    mandarin = tmp_path / "cmn.wav"
    assert cli(fleet, "speak", CHINESE, "--voice", "cmn", "-o", str(mandarin)).returncode == 0
    assert audio.read_wav(str(out)) == audio.read_wav(str(mandarin)), "the same (deterministic) Mandarin voice"


def test_speak_refuses_an_english_voice_for_chinese(fleet, tmp_path):
    result = cli(fleet, "speak", CHINESE, "--voice", "joe", "--language", "zh-CN", "-o", str(tmp_path / "x.wav"))
    assert result.returncode != 0
    assert "INVALID_ARGUMENT" in result.stderr + result.stdout
    assert "voices that speak it: cmn (qwen_tts/espeak)" in result.stderr + result.stdout
