"""Mandarin through the fleet as a user runs it (qwen_tts + asr + router): `voicefleet speak` with Chinese text and no
flags (language-aware routing picks espeak's Mandarin voice `cmn`), then `voicefleet transcribe --language zh`
(`zh-CN`, `cmn`): whisper base with the Simplified-Chinese initial prompt (asr.language_prompts) and the fitted window.

The oracle for the script: zhon's CC-CEDICT tables (pinned in requirements/dev.txt); a character in CC-CEDICT's
Traditional forms and not in its Simplified ones is Traditional-only (歡, 請, 問 ...). espeak's robotic Mandarin is
not understood by whisper base (character error rate 0.75-1.0 on three sentences, docs/asr.md#mandarin), so these
tests check the script and the language, not the words; without a language whisper's detector hears espeak's
Mandarin as Thai, so the no-language case is measured (docs/asr.md), not asserted.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from services.common import audio
from tests.conftest import start_fleet

zhon_cedict = pytest.importorskip("zhon.cedict", reason="zhon (requirements/dev.txt) holds the Traditional table")
TRADITIONAL_ONLY = set(zhon_cedict.traditional) - set(zhon_cedict.simplified)
CHINESE = "你好，欢迎使用语音合成服务。"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = start_fleet(
        tmp_path_factory.mktemp("mandarin"),
        services=("qwen_tts", "asr", "router"),
        asr={"idle_timeout_seconds": 2.0, "max_stream_seconds": 30},
    )
    yield running
    running.fleet.stop()


def cli(fleet, *args, timeout=120):
    command = [sys.executable, "-m", "services.cli.main", "--config", str(fleet.config_path), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def spoken(fleet, tmp_path_factory):
    wav = tmp_path_factory.mktemp("zh") / "zh.wav"
    result = cli(fleet, "speak", CHINESE, "-o", str(wav), "--rate", "16000")
    assert result.returncode == 0, result.stderr
    assert "served by qwen_tts/espeak" in result.stdout
    pcm, rate = audio.read_wav(str(wav))
    audio.write_wav(wav, bytes(rate) + pcm + bytes(rate * 2), rate)  # silence around it, as a recording has
    return wav


def han(text: str) -> list[str]:
    return [c for c in text if "\u4e00" <= c <= "\u9fff"]


@pytest.mark.parametrize("language", ["zh", "zh-CN", "cmn"])
def test_mandarin_is_transcribed_in_simplified_characters(fleet, spoken, language):
    heard = cli(fleet, "transcribe", str(spoken), "--language", language)
    assert heard.returncode == 0, heard.stderr
    transcript = next(line for line in heard.stdout.splitlines() if line.startswith("transcript: "))
    text = transcript.removeprefix("transcript: ")
    assert len(han(text)) >= 4, heard.stdout  # Chinese characters, not a romanisation or another script
    assert not [c for c in text if c in TRADITIONAL_ONLY], heard.stdout
