"""scripts/asr_card.py (issue 46) without a card: the carry it builds for a lent card fits the call beside the tree,
its libraries are stripped and load, its int8 whisper tiny.en is CTranslate2's quantization and hears the golden
WAVs exactly as the shipped float16 model does on the CPU (the strict listener's decode), and its run on this machine
skips every GPU step saying why, in a report that records the commit.

The carry's pieces are cached in ~/.cache/voicefleet/asr-card (keyed by pins and the source model): the first build
on a machine downloads the cp312 wheels and compresses them (~2 min on 2 busy cores); later ones copy (~1 s)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from bench import gpu_smoke
from services.common import audio
from tests.speech import listen

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.background,
    pytest.mark.skipif(gpu_smoke.card() is not None, reason="this machine has a card: make asr-card runs for real"),
]


def _script():
    spec = importlib.util.spec_from_file_location("asr_card", ROOT / "scripts" / "asr_card.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


asr_card = _script()


@pytest.fixture(scope="module")
def carry(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("card") / ".card"
    return out, asr_card.build(out)


@pytest.fixture(scope="module")
def unpacked(carry, tmp_path_factory) -> Path:
    out, _ = carry
    into = tmp_path_factory.mktemp("unpacked")
    for archive in ("site.tar.xz", "tiny-en-int8.tar.xz"):
        with tarfile.open(out / archive) as tar:
            tar.extractall(into / archive.split(".")[0], filter="data")
    return into


def test_the_carry_fits_the_call_beside_the_tree(carry):
    out, sizes = carry
    assert set(sizes["files"]) == {"site.tar.xz", "tiny-en-int8.tar.xz", "speech.npz", "COMMIT"}
    on_disk = sum(p.stat().st_size for p in out.iterdir() if p.name != "SIZES.json")
    assert sizes["carry_bytes"] == on_disk
    assert sizes["tree_bytes"] > 1 << 20  # the checkout was measured (tests/, docs/ alone are more than 1 MiB)
    assert sizes["total_bytes"] == sizes["carry_bytes"] + sizes["tree_bytes"] <= 62 << 20, sizes
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert (out / "COMMIT").read_text().startswith(head)


def test_ctranslate2_is_carried_stripped_and_its_library_loads(unpacked):
    site = unpacked / "site"
    (ext,) = site.glob("ctranslate2/_ext.cpython-312-*.so")  # the card's Python, not this one
    (lib,) = site.glob("ctranslate2.libs/libctranslate2-*.so*")
    for so in (ext, lib):
        sections = subprocess.run(["readelf", "-S", "-W", str(so)], capture_output=True, text=True, check=True).stdout
        assert ".debug_info" not in sections, so
    assert ext.stat().st_size < 4 << 20  # 69 MB with its debug info
    ctypes.CDLL(str(lib))  # its libgomp beside it (RUNPATH $ORIGIN): the stripped library still links and loads
    for package in ("faster_whisper", "pydantic", "pydantic_core", "grpc", "google/protobuf", "soxr"):
        assert (site / package).is_dir(), package
    assert (site / "silero_vad" / "data" / "silero_vad.onnx").is_file()
    assert "PyAV is not in this carry" in (site / "av" / "__init__.py").read_text()


def test_the_av_stand_in_lets_faster_whisper_import_and_says_what_is_missing(unpacked, tmp_path):
    """faster_whisper imports av at module top; with only the stand-in on the path it imports, and decoding a file
    (the one thing av is for) raises ImportError naming the carry."""
    (tmp_path / "av").mkdir()
    (tmp_path / "av" / "__init__.py").write_text((unpacked / "site" / "av" / "__init__.py").read_text())
    code = (
        "import av, faster_whisper\n"
        f"assert av.__file__.startswith({str(tmp_path)!r}), av.__file__\n"
        "try:\n    faster_whisper.decode_audio('x.wav')\nexcept ImportError as e:\n    print('refused:', e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "refused: av." in done.stdout and "asr_card" in done.stdout


def test_the_int8_tiny_en_is_ctranslate2s_quantization_of_the_shipped_weights(unpacked):
    from services.engines.asr.models import tiny_en_dir

    _, _, shipped, _ = asr_card.read_model_bin(tiny_en_dir() / "model.bin")
    name, _, stored, aliases = asr_card.read_model_bin(unpacked / "tiny-en-int8" / "tiny-en-int8" / "model.bin")
    assert name == "WhisperSpec" and aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    scaled = [k[: -len("_scale")] for k in stored if k.endswith("_scale")]
    assert len(scaled) >= 4 * 4 + 4 * 7 + 1  # every linear of the 4 encoder and 4 decoder layers, the embeddings
    for key in scaled:
        weight, scale, original = stored[key], stored[key + "_scale"], shipped[key].astype(np.float32)
        assert weight.dtype == np.int8 and scale.dtype == np.float32 and scale.shape == (weight.shape[0],), key
        rows = original.reshape(len(original), -1)
        # per row: absmax maps to 127, every value within half a step of its float16 original
        peak = np.where(np.abs(rows).max(axis=1) > 0, 127, 0)
        assert np.array_equal(np.abs(weight.reshape(len(weight), -1).astype(np.int16)).max(axis=1), peak), key
        back = weight.reshape(len(weight), -1).astype(np.float32) / scale[:, None]
        assert np.all(np.abs(back - rows) <= 0.5 / scale[:, None] * 1.0001), key
    assert sum(v.nbytes for v in stored.values()) < 0.55 * sum(v.nbytes for v in shipped.values())


def test_the_int8_tiny_en_hears_the_golden_wavs_exactly_as_the_shipped_one(unpacked):
    """The strict listener's decode (beam 5, temperature 0) on the CPU, compute_type int8: the same words, letter
    for letter, from the shipped float16 tiny.en (quantized by CTranslate2 at load) and the carried int8 one."""
    model = str(unpacked / "tiny-en-int8" / "tiny-en-int8")
    wavs = gpu_smoke.golden_wavs()
    assert len(wavs) == 4
    for wav in wavs:
        pcm, rate = audio.read_wav(str(wav))
        shipped = listen(pcm, rate, model="tiny.en")
        assert shipped, wav  # the golden speech is heard at all
        assert listen(pcm, rate, model=model) == shipped, wav


def test_without_a_card_the_run_skips_every_gpu_step_saying_why_and_records_the_commit(carry, tmp_path):
    out, _ = carry
    env = dict(os.environ, GPU_SMOKE_TORCH_PYTHON=str(tmp_path / "absent" / "python"))
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "asr_card.py"), "run", "--carry", str(out), "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "asr-card.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert report["commit"].startswith(head) and report["card"] is None
    assert list(report["steps"]) == ["gpu_checks", "whisper_cuda", "asr"]
    for name, step in report["steps"].items():
        assert step["status"] == "skipped" and step["why"].startswith(("no card: ", "no stack: ")), (name, step)
    assert report["steps"]["whisper_cuda"]["why"].startswith("no card: CTranslate2 sees no CUDA device")
    image = report["image"]
    assert {"cublas", "cudnn", "onnxruntime_providers", "python"} <= set(image)
    if not any(Path(p).name in ("libcublas.so.12", "libcublas.so.13") for p in image["cublas"]):
        assert report["soname_step"] == {
            "applied": False,
            "why": "skipped: no cuBLAS in this image (neither libcublas.so.12 nor .so.13)",
        }
    assert report["carry"]["model"].endswith("tiny-en-int8")  # unpacked for the steps, whatever the Python
    assert f"commit {report['commit']}" in (tmp_path / "asr-card.md").read_text()


def test_the_soname_step_links_cublas_13_as_12_only_without_a_real_12(tmp_path, monkeypatch):
    monkeypatch.setattr(asr_card, "WORK", tmp_path / "work")
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    real = tmp_path / "nvidia" / "cublas" / "lib"
    real.mkdir(parents=True)
    (real / "libcublas.so.13").write_bytes(b"")
    (real / "libcublas.so.12").write_bytes(b"")
    kept = asr_card.soname_step([str(real / "libcublas.so.12"), str(real / "libcublas.so.13")])
    assert kept["applied"] is False and "a real cuBLAS 12" in kept["why"]
    done = asr_card.soname_step([str(real / "libcublas.so.13")])
    link = tmp_path / "work" / "cublas12" / "libcublas.so.12"
    assert done["applied"] is True and link.resolve() == (real / "libcublas.so.13").resolve()
    assert os.environ["LD_LIBRARY_PATH"].split(os.pathsep)[:2] == [str(link.parent), str(real.resolve())]
