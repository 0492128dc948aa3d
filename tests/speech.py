"""Test oracles for speech: what a listener would check. pocketsphinx (a real recognizer from its wheel)
transcribes; level and spectrum checks catch silence, clipping and noise."""

from __future__ import annotations

import re

import numpy as np

from services.common import audio

# Words a grammar may choose from besides the expected ones, so a wrong or noisy audio picks wrong words.
DISTRACTORS = "goodbye moon that was trial fox jumps over lazy dog seven nine red blue green yes no stop go".split()


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def wer(reference: str, hypothesis: str) -> float:
    ref, hyp = words(reference), words(hypothesis)
    d = np.zeros((len(ref) + 1, len(hyp) + 1), dtype=int)
    d[:, 0] = range(len(ref) + 1)
    d[0, :] = range(len(hyp) + 1)
    for i in range(1, len(ref) + 1):
        for j in range(1, len(hyp) + 1):
            d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]))
    return d[len(ref), len(hyp)] / max(1, len(ref))


def transcribe(pcm: bytes, rate: int, vocabulary: list[str] | None = None) -> str:
    """pocketsphinx transcript. With ``vocabulary``: a free word loop over those words (any order, any count)."""
    from pocketsphinx import Decoder

    decoder = Decoder(samprate=16000, loglevel="FATAL")
    if vocabulary:
        alternatives = " | ".join(sorted(set(vocabulary)))
        decoder.add_jsgf_string("loop", f"#JSGF V1.0; grammar loop; public <s> = ( {alternatives} )+ ;")
        decoder.activate_search("loop")
    pcm16 = audio.resample(pcm, rate, 16000)
    decoder.start_utt()
    decoder.process_raw(pcm16, full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr if hyp else ""


def speech_like(pcm: bytes, rate: int) -> dict:
    """Level and spectrum figures that silence, clipping and white noise fail."""
    x = np.frombuffer(pcm, dtype=np.int16).astype(np.float64) / 32768.0
    rms = float(np.sqrt(np.mean(x**2)))
    clipped = float(np.mean(np.abs(x) > 0.999))
    spectrum = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / rate)
    speech_band = spectrum[(freqs >= 100) & (freqs <= 4000)].sum() / max(spectrum.sum(), 1e-12)
    # Speech comes in syllables: its 20 ms frame energy varies a lot; stationary noise does not.
    frame = rate // 50
    energies = np.array([np.mean(x[i : i + frame] ** 2) for i in range(0, len(x) - frame, frame)])
    modulation = float(np.std(energies) / max(np.mean(energies), 1e-12))
    return {"rms": rms, "clipped": clipped, "speech_band": float(speech_band), "modulation": modulation}
