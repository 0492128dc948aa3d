"""MOSS-Speech GPU engine on real weights (`make test-gpu`). Skips with its reason when there is no CUDA GPU or the
weights are not mounted (moss_sts.gpu.model_dir / codec_dir / repo_dir; see docs/conversation.md#gpu-engine).
A tiny checkpoint is not possible: the model and codec code is remote code that ships with the weights."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest

from services.common.config import load_config
from services.common.engines import Sampling

pytestmark = pytest.mark.gpu


def _skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install -r services/moss_sts/requirements-gpu.txt)"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    gpu = load_config().moss_sts.gpu
    for path, what in ((gpu.model_dir, "model_dir"), (gpu.codec_dir, "codec_dir"), (gpu.repo_dir, "repo_dir")):
        if not Path(path).is_dir():
            return f"MOSS-Speech weights not mounted: moss_sts.gpu.{what} {path} is missing"
    return None


@pytest.fixture(scope="module")
def moss():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from services.moss_sts.moss_engine import MossSpeech

    model = MossSpeech(load_config().moss_sts.gpu)
    model.load()
    yield model


async def collect(moss, conversation, max_tokens=200):
    pieces = []
    async with contextlib.aclosing(moss.speak(conversation, Sampling(seed=7), max_tokens, "moss_sts/moss-speech")) as s:
        async for piece in s:
            pieces.append(piece)
    return pieces


async def test_text_to_speech_streams_in_chunks(moss):
    pieces = await collect(moss, [{"role": "user", "content": "Say hello in one short sentence."}])
    assert len(pieces) >= 2, "streamed in chunks, not at the end"
    first_frames = len(pieces[0].pcm) / 2 / 24000 * 12.5
    assert first_frames <= moss.plan.first_frames + 0.5, "the first chunk is small (early first audio)"
    pcm = np.frombuffer(b"".join(p.pcm for p in pieces), dtype=np.int16).astype(np.float32) / 32768
    assert len(pcm) > 24000 * 0.5 and np.sqrt(np.mean(pcm**2)) > 0.01
    # Joins without clicks: no sample-to-sample jump at chunk borders bigger than inside the chunks.
    borders = np.cumsum([len(p.pcm) // 2 for p in pieces])[:-1]
    steps = np.abs(np.diff(pcm))
    assert steps[borders - 1].max() <= max(0.2, 4 * np.percentile(steps, 99.9))


async def test_speech_to_speech_and_interrupt(moss, tmp_path):
    from services.common import audio

    prompt = os.path.join(moss.config.repo_dir, moss.config.prompt_wav)
    pieces = await collect(moss, [{"role": "user", "content": {"path": prompt, "type": "audio/wav"}}], 120)
    assert pieces
    # Interrupt: closing the stream stops generation at its next step (aclose waits for the generation thread).
    taps = []
    real_generate = moss.generate

    def recording_generate(conversation, sampling, max_tokens, tap):
        taps.append(tap)
        return real_generate(conversation, sampling, max_tokens, tap)

    moss.generate = recording_generate
    try:
        stream = moss.speak([{"role": "user", "content": "Tell me a long story."}], Sampling(), 600, "t")
        first = await anext(stream)
        await stream.aclose()
    finally:
        del moss.generate
    assert first.pcm
    (tap,) = taps
    assert tap.stop.is_set() and not tap.ended_speech, "the story was cut, not finished"
    assert tap.steps < 300, f"generation ran {tap.steps} of its 600 steps after the interrupt"
    assert moss.generate_pool.submit(lambda: "idle").result(timeout=5) == "idle", "no generation left running"
    audio.write_wav(tmp_path / "s2s.wav", b"".join(p.pcm for p in pieces), 24000)
