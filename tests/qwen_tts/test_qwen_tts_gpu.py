"""qwen_tts GPU engines on the real libraries and real weights (`make test-gpu`). Each test skips with its reason
when the machine lacks a CUDA GPU, the library, or the mounted weights:

  VOICEFLEET_QWEN_TTS_MODEL_DIR      weights (default /models/Qwen3-TTS-12Hz-0.6B-CustomVoice)
  VOICEFLEET_QWEN_TTS_SIDECAR_PYTHON python of a virtualenv with services/qwen_tts/requirements-vllm-omni.txt
                                     (default: this interpreter)

No test double here: these drive qwen-tts and a vLLM-Omni sidecar for real. The HTTP client is also tested on CPU
against a test double (tests/qwen_tts/test_qwen_tts_vllm_omni_client.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from services.cli.fleet import free_port
from services.common.config.base import ChunkingConfig
from services.common.config.qwen_tts import QwenGpuConfig
from services.common.engines import SynthesisOptions
from services.engines import qwen_presets as presets
from tests.speech import INTELLIGIBLE, intelligible, speech_like

pytestmark = pytest.mark.gpu

MODEL_DIR = Path(os.environ.get("VOICEFLEET_QWEN_TTS_MODEL_DIR", "/models/Qwen3-TTS-12Hz-0.6B-CustomVoice"))
SIDECAR_PYTHON = os.environ.get("VOICEFLEET_QWEN_TTS_SIDECAR_PYTHON", sys.executable)
SENTENCE = "the quick brown fox jumps over the lazy dog"


def _cuda() -> str | None:
    """None when a CUDA GPU is usable, else why not."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "no NVIDIA driver (nvidia-smi not found)"
    return None if out.returncode == 0 and "GPU" in out.stdout else "no CUDA GPU visible to nvidia-smi"


def _skip_unless(*, module: str | None = None, sidecar: bool = False) -> None:
    reason = _cuda()
    if reason:
        pytest.skip(reason)
    if not (MODEL_DIR / "config.json").exists():
        pytest.skip(f"no Qwen3-TTS weights at {MODEL_DIR} (set VOICEFLEET_QWEN_TTS_MODEL_DIR)")
    if module and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -r services/qwen_tts/requirements-gpu.txt)")
    if sidecar:
        probe = subprocess.run([SIDECAR_PYTHON, "-c", "import vllm_omni"], capture_output=True, timeout=120)
        if probe.returncode != 0:
            pytest.skip(f"vllm-omni not importable by {SIDECAR_PYTHON} (requirements-vllm-omni.txt)")


async def _speak(engine, text, **options):
    return [p async for p in engine.synthesize(text, SynthesisOptions(**options))]


def _check_speech(pcm: bytes, rate: int, text: str = SENTENCE) -> None:
    figures = speech_like(pcm, rate)
    assert figures["rms"] > 0.01 and figures["clipped"] < 0.01 and figures["modulation"] > 0.8, figures
    error, heard = intelligible(text, pcm, rate)
    assert error <= INTELLIGIBLE, heard


async def test_qwen_tts_package_engine_speaks_the_presets():
    _skip_unless(module="qwen_tts")
    from services.qwen_tts.qwen_engine import QwenTtsEngine

    engine = QwenTtsEngine(
        "qwen_tts_gpu_test", ChunkingConfig(), QwenGpuConfig(backend="qwen_tts", model_dir=str(MODEL_DIR))
    )
    await engine.start()
    try:
        voices = {v.id: v for v in await engine.voices()}
        assert {p.id for p in presets.PRESETS} <= set(voices)
        assert engine.resident_bytes() > 100_000_000
        pieces = await _speak(engine, SENTENCE, voice="Ryan", language="en")
        pcm = b"".join(p.pcm for p in pieces)
        assert {p.sample_rate_hz for p in pieces} == {24000}
        _check_speech(pcm, 24000)
        chinese = b"".join(p.pcm for p in await _speak(engine, "你好，欢迎使用语音合成。", voice="Vivian"))
        assert speech_like(chinese, 24000)["rms"] > 0.01
        # Sentence by sentence: one engine step per sentence; a cancel after the first stops the rest.
        text = " ".join(f"This is sentence number {i}." for i in range(1, 9))
        before = engine._steps._value.get()
        agen = engine.synthesize(text, SynthesisOptions(voice="Aiden"))
        await agen.__anext__()
        await agen.aclose()
        await asyncio.sleep(5)
        assert engine._steps._value.get() - before <= 2
    finally:
        await engine.close()


async def test_qwen_tts_package_engine_offload_frees_the_card_and_reload_speaks_again():
    """issue 16: a revoke's offload moves the weights to host memory and gives the allocator's blocks back
    (memory_reserved falls to a sliver of what it was); reload brings them back and the engine speaks as before."""
    _skip_unless(module="qwen_tts")
    import torch

    from services.qwen_tts.qwen_engine import QwenTtsEngine

    config = QwenGpuConfig(backend="qwen_tts", model_dir=str(MODEL_DIR))
    engine = QwenTtsEngine("qwen_tts_gpu_test", ChunkingConfig(), config, memory_budget_bytes=6 << 30)
    await engine.start()
    try:
        first = b"".join(p.pcm for p in await _speak(engine, SENTENCE, voice="Ryan", language="en", seed=5))
        reserved = torch.cuda.memory_reserved()
        await engine.offload()
        moved = engine._offload.last["out"]
        print(
            f"offload: {moved.line()}; reserved {reserved / 2**20:.0f} -> {torch.cuda.memory_reserved() / 2**20:.0f} MiB"
        )
        assert engine.resident_bytes() == 0 and moved.bytes > 500_000_000
        assert torch.cuda.memory_reserved() < 0.05 * reserved
        await engine.reload()
        print(f"reload: {engine._offload.last['in'].line()}")
        again = b"".join(p.pcm for p in await _speak(engine, SENTENCE, voice="Ryan", language="en", seed=5))
        _check_speech(again, 24000)
        # The engine's contract (qwen_engine.py: sampling is seeded, same request -> same audio) holds across the
        # round trip: the weights come back exactly, so the codec tokens do too. Equal up to float noise in the
        # decoder (1e-3 of full scale); a different sampling path or a weight restored wrong is a different waveform.
        a, b = (np.frombuffer(x, dtype=np.int16).astype(np.int32) for x in (first, again))
        print(f"same seed, same audio after the round trip: bytes equal {again == first}")
        assert len(a) == len(b), f"{len(a)} samples before the offload, {len(b)} after: a different utterance"
        assert np.max(np.abs(a - b)) <= 33, "same seed, different audio after offload/reload"
    finally:
        await engine.close()


def _gpu_used_bytes() -> int:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return int(out.stdout.strip().splitlines()[0]) << 20


async def test_vllm_omni_sidecar_sleeps_on_offload_and_wakes_on_reload():
    """issue 16: offload puts the sidecar's stages to sleep (level 1: weights to CPU RAM, KV cache dropped), so
    the card's used memory falls by GiBs; reload wakes and resumes it and it speaks again."""
    _skip_unless(sidecar=True, module="httpx")
    from services.qwen_tts.vllm_omni_engine import VllmOmniTtsEngine

    config = QwenGpuConfig(
        backend="vllm_omni",
        model_dir=str(MODEL_DIR),
        base_url=f"http://127.0.0.1:{free_port()}",
        launch_sidecar=True,
        sidecar_python=SIDECAR_PYTHON,
    )
    engine = VllmOmniTtsEngine("qwen_tts_gpu_test", ChunkingConfig(), config, memory_budget_bytes=6 << 30)
    await engine.start()
    try:
        assert engine._sleep_stages, "the engine's deploy copy turns sleep mode on"
        used = _gpu_used_bytes()
        await engine.offload()
        assert engine._off == "asleep", "slept, not stopped (the slow path)"
        asleep = _gpu_used_bytes()
        print(f"card used {used / 2**30:.2f} GiB -> {asleep / 2**30:.2f} GiB asleep")
        assert asleep < used - (1 << 30)
        await engine.reload()
        pieces = await _speak(engine, SENTENCE, voice="Ryan", language="en")
        _check_speech(b"".join(p.pcm for p in pieces), 24000)
    finally:
        await engine.close()


async def test_vllm_omni_sidecar_streams_and_cancels():
    _skip_unless(sidecar=True, module="httpx")
    from services.qwen_tts.vllm_omni_engine import VllmOmniTtsEngine

    config = QwenGpuConfig(
        backend="vllm_omni",
        model_dir=str(MODEL_DIR),
        base_url=f"http://127.0.0.1:{free_port()}",
        launch_sidecar=True,
        sidecar_python=SIDECAR_PYTHON,
        initial_codec_chunk_frames=2,
    )
    engine = VllmOmniTtsEngine("qwen_tts_gpu_test", ChunkingConfig(), config)
    await engine.start()
    try:
        voices = {v.id for v in await engine.voices()}
        assert {p.id for p in presets.PRESETS} <= voices
        pieces = await _speak(engine, SENTENCE + ". " + SENTENCE + ".", voice="Ryan", language="en")
        assert len(pieces) >= 2, "streamed in several chunks"
        assert len(pieces[0].pcm) < len(pieces[1].pcm), "small first chunk (initial_codec_chunk_frames)"
        _check_speech(b"".join(p.pcm for p in pieces), 24000, SENTENCE + " " + SENTENCE)
        before = engine._steps._value.get()
        agen = engine.synthesize("This is a long announcement. " * 20, SynthesisOptions(voice="Ryan"))
        await agen.__anext__()
        await agen.aclose()
        await asyncio.sleep(2)
        settled = engine._steps._value.get() - before
        await asyncio.sleep(2)
        assert engine._steps._value.get() - before == settled, "chunks kept coming after the cancel"
    finally:
        await engine.close()
