"""qwen_tts's CPU engine in process: espeak-ng's own voices (incl. Mandarin), streaming, cancel within one
callback, deterministic PCM, bad voice/language. The service-level tests (router, gRPC) are in
tests/qwen_tts/test_qwen_tts_service.py."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading

import pytest

from services.common.config.base import ChunkingConfig, EspeakConfig
from services.common.engines import SynthesisOptions
from services.common.errors import InvalidArgument, NotFound
from services.common.tts_servicer import VOICE_ID_RE
from services.engines import qwen_presets as presets
from services.engines.espeak import Espeak
from services.engines.espeak_engine import EspeakTtsEngine
from tests.speech import speech_like

pytestmark = pytest.mark.asyncio(loop_scope="module")

# One long sentence (no sentence end, no clause mark): a single espeak_Synth call of about 8 minutes of audio.
LONG_SENTENCE = " ".join(["alpha bravo charlie delta echo foxtrot golf hotel india juliet"] * 120)


@pytest.fixture(scope="module")
async def engine():
    e = EspeakTtsEngine("qwen_tts_test", ChunkingConfig(), EspeakConfig())
    await e.start()
    yield e
    await e.close()


async def speak(engine, text, **options) -> tuple[bytes, list]:
    pieces = [p async for p in engine.synthesize(text, SynthesisOptions(**options))]
    return b"".join(p.pcm for p in pieces), pieces


def steps(engine) -> float:
    return engine._steps._value.get()


async def test_voices_come_from_espeak_and_include_mandarin(engine):
    voices = {v.id: v for v in await engine.voices()}
    assert (await engine.voices())[0].id == "en-US", "the configured default voice is listed first"
    cmn = voices["cmn"]
    assert cmn.languages[0] == "cmn" and "zh" in cmn.languages
    assert cmn.display_name == "Chinese (Mandarin, latin as English)"  # espeak's own name
    assert cmn.native_sample_rate_hz == 22050 and cmn.engine == "espeak" and not cmn.cloned
    assert voices["en-US"].languages == ("en-US", "en")
    assert voices["en"].languages == ("en-GB", "en")  # espeak's "en" is British English
    assert {"fr", "de", "ja", "ko", "yue", "hi"} <= set(voices)
    assert len(voices) > 100  # espeak-ng 1.52 ships 141 language voices
    assert all(VOICE_ID_RE.match(v) for v in voices), "every id is usable in requests"
    # Qwen's 9 preset ids, as espeak stand-ins that say what they are; their native language is listed first.
    for p in presets.PRESETS:
        v = voices[p.id]
        assert "espeak" in v.display_name and "not Qwen's" in v.description
        assert v.languages[0] == {"Chinese": "cmn", "English": "en-US", "Japanese": "ja", "Korean": "ko"}[p.native]
    assert "en" in voices["Vivian"].languages and "cmn" in voices["Ryan"].languages


async def test_streams_small_first_piece_then_larger_ones(engine):
    text = "The first sentence is short. The second one is a little longer than the first. And a third."
    pcm, pieces = await speak(engine, text, voice="en-US")
    assert len(pieces) > 3
    # First piece: one espeak callback (60 ms: 1324 samples); later ones are what queued up meanwhile, joined up
    # to max_chunk_ms (200 ms) plus at most one callback.
    callback = 1324 * 2
    assert len(pieces[0].pcm) == callback
    assert all(len(p.pcm) <= 2 * int(22050 * 0.2) + callback for p in pieces)
    spans = [(p.text_start, p.text_end) for p in pieces]
    assert spans[0] == (0, 28) and spans[-1][1] == len(text) and spans == sorted(spans)
    assert 4.0 < len(pcm) / 2 / 22050 < 9.0


async def test_same_input_gives_identical_pcm(engine):
    text = "Determinism matters for regression gates."
    first, _ = await speak(engine, text, voice="en-US")
    await speak(engine, "Something else in between, in Mandarin: 你好。", voice="Vivian")
    agen = engine.synthesize(LONG_SENTENCE, SynthesisOptions(voice="en-US"))
    await agen.__anext__()
    await agen.aclose()  # an aborted synthesis leaves no state behind either
    again, _ = await speak(engine, text, voice="en-US")
    assert hashlib.sha256(first).digest() == hashlib.sha256(again).digest()
    # The seed drives espeak's noise source, which only voice variants with breath noise use (Vivian's f2; the plain
    # en-US voice gives the same PCM for every seed): another seed changes the noise, not the timing.
    seed_1, seed_7, seed_7_again = [(await speak(engine, text, voice="Vivian", seed=s))[0] for s in (1, 7, 7)]
    assert seed_7 == seed_7_again, "the same seed gives the same audio"
    assert seed_1 != seed_7 and len(seed_1) == len(seed_7), "another seed gives other noise at the same length"


class HeldSteps:
    """Wraps the engine's step counter (its sink calls ``inc()`` on the espeak thread, once per callback) and holds
    the espeak thread inside callback ``hold_at`` until released: the test orders its cancel before espeak's next
    callback, with no clock."""

    def __init__(self, counter, hold_at: int):
        self.counter, self.hold_at = counter, hold_at
        self.calls = 0
        self.held = threading.Event()
        self.release = threading.Event()

    def inc(self, amount: float = 1) -> None:
        self.calls += 1
        self.counter.inc(amount)
        if self.calls == self.hold_at:
            self.held.set()
            self.release.wait(30)


async def test_cancel_stops_espeak_within_one_callback(engine):
    before = steps(engine)
    full, _ = await speak(engine, LONG_SENTENCE, voice="en-US")
    full_steps = steps(engine) - before
    assert full_steps > 5000  # about eight minutes of audio in 60 ms callbacks

    counter = engine._steps
    held = engine._steps = HeldSteps(counter, hold_at=2)
    loop = asyncio.get_running_loop()
    try:
        agen = engine.synthesize(LONG_SENTENCE, SynthesisOptions(voice="en-US"))
        first = await agen.__anext__()  # callback 1's audio; espeak is held inside callback 2
        assert await loop.run_in_executor(None, held.held.wait, 30)
        await agen.aclose()  # sets the job's cancel flag
        held.release.set()
        # espeak runs its jobs one at a time on one thread: this no-op runs once the cancelled job has ended.
        await loop.run_in_executor(Espeak.thread, lambda: None)
    finally:
        engine._steps = counter
    # Callback 2 was under way when the cancel came; callback 3 saw the flag and returned 1: espeak stopped there.
    assert held.calls == 2, (held.calls, full_steps)
    assert len(first.pcm) > 0


async def test_task_cancel_while_waiting_also_stops(engine):
    async def consume():
        async with contextlib.aclosing(engine.synthesize(LONG_SENTENCE, SynthesisOptions(voice="en-US"))) as pieces:
            async for _ in pieces:
                await asyncio.sleep(10)  # a stalled reader

    before = steps(engine)
    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.3)
    settled = steps(engine) - before
    await asyncio.sleep(0.3)
    assert steps(engine) - before == settled


async def test_mandarin_is_speech(engine):
    pcm, _ = await speak(engine, "你好，世界。今天天气很好。", voice="cmn")
    figures = speech_like(pcm, 22050)
    assert 1.5 < len(pcm) / 2 / 22050 < 8.0
    assert figures["rms"] > 0.02 and figures["clipped"] < 0.001
    assert figures["speech_band"] > 0.8 and figures["modulation"] > 0.8
    # A preset speaks its native language by default, another one when asked.
    vivian, _ = await speak(engine, "你好，世界。", voice="Vivian")
    vivian_en, _ = await speak(engine, "Hello world.", voice="Vivian", language="en")
    assert speech_like(vivian, 22050)["rms"] > 0.02 and speech_like(vivian_en, 22050)["rms"] > 0.02


async def test_speaking_rate_changes_duration(engine):
    normal, _ = await speak(engine, "hello world this is a test", voice="en-US")
    fast, _ = await speak(engine, "hello world this is a test", voice="en-US", speaking_rate=2.0)
    slow, _ = await speak(engine, "hello world this is a test", voice="en-US", speaking_rate=0.5)
    assert len(fast) < 0.7 * len(normal) < len(normal) < 0.7 * len(slow)


async def test_unknown_voice_and_unspoken_language(engine):
    with pytest.raises(NotFound, match="config.voice: 'nobody'"):
        await speak(engine, "hi", voice="nobody")
    with pytest.raises(InvalidArgument, match="config.language") as err:
        await speak(engine, "hi", voice="cmn", language="fr")
    assert "'cmn' does not speak 'fr'" in str(err.value)
    with pytest.raises(InvalidArgument, match="config.language"):
        await speak(engine, "hi", voice="Vivian", language="sw")  # Qwen has no Swahili; the stand-in neither
