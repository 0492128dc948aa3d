"""Regression gates on the CPU TTS engines against goldens in tests/golden/ (written only by `make golden`).

Per engine and case: determinism (N runs, one PCM hash), SNR vs the golden >= SNR_BOUND_DB, streaming text vs
offline duration within 50 ms, no repeated or overlapping segments, no empty/clipped/non-finite audio, and
intelligibility (the strict listener, tests/speech.py). What "deterministic" means per engine is in docs/tts.md.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from services.common import audio
from services.common.engines import BufferPolicy, SynthesisOptions, TextEvent
from services.common.errors import VoiceError
from tests.golden.regenerate import CASES, ENGINES, GOLDEN_DIR, MANIFEST, SEED, sha256, synthesize
from tests.speech import INTELLIGIBLE, intelligible, speech_like, words

# CPU work with no clock in it: `make test` runs it in its background lane (scripts/test-lanes.sh).
pytestmark = pytest.mark.background

RUNS = 3
# Same machine and build: identical PCM (SNR infinite). Another CPU may round differently in onnxruntime/espeak;
# 25 dB still means the same rendition (a different seed or model gives ~0 dB).
SNR_BOUND_DB = 25.0
STREAM_VS_OFFLINE_S = 0.050
# The strict listener's bound, per engine and case. espeak-ng's "jumps" is unclear: heard as "dumps" (1 word of 9,
# measured 2026-11-23 with whisper base) and, on a fresh install of 2026-11-25 (same golden PCM, same pins), as "jump
# is" — one word heard as two, 2 edits of 9. So espeak's fox golden is held to that one misheard word (2/9), no other
# error; the meeting case to none.
MAX_WER = {("piper", "fox"): INTELLIGIBLE, ("piper", "meeting"): INTELLIGIBLE, ("espeak", "fox"): 2 / 9}
MAX_WER["espeak", "meeting"] = INTELLIGIBLE
REGENERATE = "run `make golden` to (re)generate tests/golden/ on purpose, review the audio and commit it"


def golden(engine: str, case: str) -> tuple[bytes, int, dict]:
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    entry = manifest.get(engine, {}).get("cases", {}).get(case)
    path = GOLDEN_DIR / engine / f"{case}.wav"
    if entry is None or not path.exists():
        pytest.fail(f"no golden for {engine}/{case}: {REGENERATE}")
    if entry["text"] != CASES[case] or entry["seed"] != SEED:
        pytest.fail(f"golden {engine}/{case} was made for another text or seed: {REGENERATE}")
    pcm, rate = audio.read_wav(str(path))
    return pcm, rate, entry


def snr_db(reference: bytes, test: bytes) -> float:
    g = np.frombuffer(reference, dtype=np.int16).astype(np.float64)
    x = np.frombuffer(test, dtype=np.int16).astype(np.float64)
    n = min(len(g), len(x))
    noise = np.sum((g[:n] - x[:n]) ** 2) + np.sum(g[n:] ** 2) + np.sum(x[n:] ** 2)
    return float("inf") if noise == 0 else 10 * np.log10(np.sum(g**2) / noise)


@pytest.fixture(scope="module", params=list(ENGINES))
async def engine(request):
    factory, voice = ENGINES[request.param]
    engine = factory()
    await engine.start()
    engine.golden_name, engine.golden_voice = request.param, voice
    yield engine
    await engine.close()


@pytest.mark.parametrize("case", list(CASES))
async def test_deterministic_and_matches_golden(engine, case):
    name, voice = engine.golden_name, engine.golden_voice
    runs = [(await synthesize(engine, voice, CASES[case]))[0] for _ in range(RUNS)]
    hashes = {sha256(pcm) for pcm in runs}
    assert len(hashes) == 1, f"{name} is not deterministic with seed {SEED}: {RUNS} runs gave {len(hashes)} PCMs"
    reference, rate, entry = golden(name, case)
    assert rate == engine.native_sample_rate, f"golden rate {rate} != engine rate: {REGENERATE}"
    snr = snr_db(reference, runs[0])
    assert snr >= SNR_BOUND_DB, (
        f"{name}/{case}: SNR vs golden {snr:.1f} dB < {SNR_BOUND_DB} dB (golden sha {entry['sha256'][:12]}, now"
        f" {hashes.pop()[:12]}). If the change is intended, {REGENERATE}"
    )


async def test_another_seed_gives_another_rendition(engine):
    if engine.golden_name == "espeak":
        pytest.skip(
            "espeak-ng's en-US voice uses no noise source, so its seed changes nothing; the seed is checked on a"
            " voice variant with breath noise (Vivian, f2) in tests/qwen_tts/test_qwen_tts_espeak.py"
        )
    a, _ = await synthesize(engine, engine.golden_voice, CASES["fox"], seed=1)
    b, _ = await synthesize(engine, engine.golden_voice, CASES["fox"], seed=2)
    assert sha256(a) != sha256(b) and snr_db(a, b) < 10


@pytest.mark.parametrize("case", list(CASES))
async def test_audio_is_sound_speech(engine, case):
    name = engine.golden_name
    text = CASES[case]
    pcm, pieces = await synthesize(engine, engine.golden_voice, text)
    rate = engine.native_sample_rate
    # No empty pieces, no repeated or overlapping segments: spans move forward and cover the text once.
    assert pieces and all(p.pcm for p in pieces)
    spans = sorted({(p.text_start, p.text_end) for p in pieces})
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False)), spans
    assert "".join(text[a:b] for a, b in spans).replace(" ", "") == text.replace(" ", "")
    figures = speech_like(pcm, rate)
    assert figures["rms"] > 0.02, "silent"
    assert figures["clipped"] < 0.001, f"{figures['clipped']:.4f} of the samples are clipped"
    # A repeated phrase would make the audio much longer than the golden.
    _, _, entry = golden(name, case)
    assert abs(len(pcm) / 2 - entry["samples"]) <= 0.1 * entry["samples"]
    # Intelligible: the strict listener hears the text, and none of its words more often than the text has them
    # (a repeated segment would).
    error, heard = intelligible(text, pcm, rate)
    assert error <= MAX_WER[name, case], heard
    for w in set(words(heard)) & set(words(text)):
        assert words(heard).count(w) <= words(text).count(w) + 1, f"{w!r} repeated: {heard}"


async def test_streaming_text_matches_offline_duration(engine):
    text = CASES["meeting"]
    offline, _ = await synthesize(engine, engine.golden_voice, text)

    async def word_by_word():
        for i, w in enumerate(text.split(" ")):
            yield TextEvent(text=(" " if i else "") + w)
        yield TextEvent(end=True)

    options = SynthesisOptions(voice=engine.golden_voice, seed=SEED)
    pieces = [p async for p in engine.synthesize_text_stream(word_by_word(), options, BufferPolicy())]
    streamed = b"".join(p.pcm for p in pieces)
    rate = engine.native_sample_rate
    diff = abs(len(streamed) - len(offline)) / 2 / rate
    assert diff <= STREAM_VS_OFFLINE_S, (
        f"streamed {len(streamed) / 2 / rate:.3f} s vs offline {len(offline) / 2 / rate:.3f} s"
    )
    assert pieces[-1].text_end == len(text)


async def test_piper_refuses_to_send_non_finite_audio(monkeypatch):
    """The NaN gate: noise that makes the VITS graph output NaN must give an error, not garbage PCM."""
    factory, voice = ENGINES["piper"]
    engine = factory()
    await engine.start()
    try:
        session = engine._voice.session
        poisoned = np.zeros(1 << 20, dtype=np.float32)
        poisoned[1 << 19 :] = np.nan  # the prior's noise (second half of the pool); durations stay finite
        monkeypatch.setattr(session, "pool", lambda seed: poisoned)
        with pytest.raises(VoiceError, match="non-finite audio"):
            await synthesize(engine, voice, "hello world")
    finally:
        await engine.close()
