"""Regression goldens for the CPU TTS engines: what ``make golden`` writes and tests/common/test_tts_regression.py reads.

Regenerate ON PURPOSE only (a model, engine or dependency change that is meant to change the audio):
    make golden            # = python -m tests.golden.regenerate
then listen to / review the new WAVs and commit them with the reason. Tests never write goldens.

Layout: tests/golden/<engine>/<case>.wav (s16le mono at the engine's native rate) + tests/golden/manifest.json
(text, seed, rate, samples, sha256 of the PCM, the date and machine it was made on).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import platform
import sys
import time
from pathlib import Path

from services.common import audio
from services.common.config.base import ChunkingConfig, SchedulingConfig
from services.common.engines import SynthesisOptions

GOLDEN_DIR = Path(__file__).parent
MANIFEST = GOLDEN_DIR / "manifest.json"
SEED = 4242

CASES = {
    "fox": "the quick brown fox jumps over the lazy dog",
    "meeting": "Please call me back tomorrow morning. The meeting moved to room seven.",
}


def make_piper():
    from services.engines.piper_engine import PiperTtsEngine

    # No segment cache: every run synthesizes, so the determinism gate checks synthesis (which the cache relies on).
    return PiperTtsEngine("golden", ChunkingConfig(), SchedulingConfig(segment_cache_mb=0))


def make_espeak():
    from services.common.config.base import EspeakConfig
    from services.engines.espeak_engine import EspeakTtsEngine

    return EspeakTtsEngine("golden", ChunkingConfig(), EspeakConfig())


# The CPU engines under the regression gates, by name -> (factory, voice). Add an engine here and run make golden.
ENGINES = {
    "piper": (make_piper, "joe"),
    "espeak": (make_espeak, "en-US"),
}


async def synthesize(engine, voice: str, text: str, seed: int = SEED) -> tuple[bytes, list]:
    pieces = [p async for p in engine.synthesize(text, SynthesisOptions(voice=voice, seed=seed))]
    return b"".join(p.pcm for p in pieces), pieces


def sha256(pcm: bytes) -> str:
    return hashlib.sha256(pcm).hexdigest()


async def regenerate(names: list[str]) -> dict:
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    for name in names:
        factory, voice = ENGINES[name]
        engine = factory()
        await engine.start()
        try:
            entry = {}
            for case, text in CASES.items():
                pcm, _ = await synthesize(engine, voice, text)
                rate = engine.native_sample_rate
                (GOLDEN_DIR / name).mkdir(exist_ok=True)
                audio.write_wav(GOLDEN_DIR / name / f"{case}.wav", pcm, rate)
                entry[case] = {
                    "text": text,
                    "voice": voice,
                    "seed": SEED,
                    "rate": rate,
                    "samples": len(pcm) // 2,
                    "sha256": sha256(pcm),
                }
                print(f"{name}/{case}: {len(pcm) / 2 / rate:.2f} s, sha256 {entry[case]['sha256'][:16]}")
            manifest[name] = {
                "made": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
                "cases": entry,
            }
        finally:
            await engine.close()
    MANIFEST.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return manifest


if __name__ == "__main__":
    asyncio.run(regenerate(sys.argv[1:] or list(ENGINES)))
