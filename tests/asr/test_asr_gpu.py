"""asr GPU engine on CUDA (``make test-gpu``): faster-whisper with the mounted model. Skips, saying why, without a
CUDA device or a model directory (asr.gpu.model_dir, or VOICEFLEET_ASR__GPU__MODEL_DIR)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import evaluation as ev
from services.common.config.asr import AsrGpuConfig, AsrServiceConfig
from services.common.engines import RESULT, RecognitionOptions
from tests.asr.test_asr_engines import collect

pytestmark = pytest.mark.gpu

MODEL_DIR = os.environ.get("VOICEFLEET_ASR__GPU__MODEL_DIR", AsrGpuConfig().model_dir)


@pytest.fixture(scope="session")
def gpu_model() -> str:
    """Skips (before any speech is synthesized) unless CUDA and the model are there."""
    try:
        from services.engines.asr.gpu_engine import preload_cuda_libraries

        preload_cuda_libraries()
        import ctranslate2
    except ImportError as e:
        pytest.skip(f"faster-whisper/ctranslate2 not installed ({e}); pip install -r services/asr/requirements-gpu.txt")
    if ctranslate2.get_cuda_device_count() == 0:
        pytest.skip("no CUDA device visible to CTranslate2")
    if not (Path(MODEL_DIR) / "model.bin").is_file():
        pytest.skip(
            f"no CTranslate2 Whisper model at {MODEL_DIR} (asr.gpu.model_dir); mount one, e.g. faster-whisper-large-v3"
        )
    return MODEL_DIR


async def test_gpu_engine_transcribes_both_voices_with_interims(gpu_model, asr_speakers):
    from services.engines.asr.gpu_engine import GpuAsrEngine

    engine = GpuAsrEngine("asr", AsrServiceConfig(port=1, engine="gpu", gpu=AsrGpuConfig(model_dir=gpu_model)))
    await engine.start()
    try:
        assert engine.device == "cuda" and engine.resident_bytes() > 0
        for voice in ev.VOICES:
            texts = list(ev.SENTENCES[:4])
            stream = asr_speakers.padded(voice, texts, 16000)
            events = await collect(await engine.open_stream(RecognitionOptions(interim_results=True)), stream.pcm)
            results = [e.result for e in events if e.kind == RESULT]
            finals = [r for r in results if r.is_final]
            assert len(finals) == len(texts)
            assert any(not r.is_final and r.transcript for r in results)
            assert {f.language for f in finals} == {"en"}  # detected
            assert ev.wer(texts, [f.transcript for f in finals]) <= (0.05 if voice == "joe" else 0.25)
            # Word timings are the transcript's own words, in order, inside their utterance (not just present).
            for final, u in zip(finals, stream.utterances, strict=True):
                assert ev.words(" ".join(w.word for w in final.words)) == ev.words(final.transcript), final
                starts = [w.start_ms for w in final.words]
                assert starts == sorted(starts), final.words
                assert all(u.start_ms - 300 <= w.start_ms <= w.end_ms <= u.end_ms + 300 for w in final.words)
    finally:
        await engine.close()
