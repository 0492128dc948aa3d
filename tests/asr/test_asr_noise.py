"""ASR regression bounds beyond clean speech: the asr CPU engine (VAD + whisper tiny.en finals, in process) on every
third evaluation sentence, clean and with white or babble noise at 10 dB SNR (bench/evaluation.py
``Speakers.degraded``; the noise runs through the silence around the speech too). The full table (20/10/0 dB, the
phone band, all 24 sentences) is `make bench` (bench/asr_noise.py) and docs/asr.md#noise-and-the-phone-band; the
bounds here sit above what it measured, so they fail a real regression (noise reaching whisper unscaled, a VAD that
cuts speech in noise) rather than run-to-run jitter."""

from __future__ import annotations

import pytest

from bench import evaluation as ev

# `make test`'s second lane (word error rates on whole files in process: no clock): scripts/test-lanes.sh.
pytestmark = pytest.mark.background

SENTENCES = list(ev.SENTENCES[0::3])
# Corpus WER bounds per (voice, condition): what these 8 sentences (61 words) measured on 2026-11-25 (2 cores AMD
# EPYC; the noise is seeded and both voices are deterministic, so a rerun hears the same), plus a margin of about
# five words (8 points), for another machine's arithmetic; joe clean and in white noise keep their older, tighter
# bounds. Measured: joe 0 / 1.6 / 11.5 %, espeak 3.3 / 37.7 / 8.2 % (clean / white 10 dB / babble 10 dB; espeak's
# formant speech drowns in white noise: its fricatives are noise-like). The same sentences against the wrong
# references (each transcript scored against the next sentence) score over 100 %: every bound fails that, and the
# test checks it on each run. On all 24 (make bench, 2026-11-23): joe 2.1 / 5.9 / 13.9 %, espeak 8.0 / 31.0 / 18.2 %.
WER_BOUND = {
    ("joe", "clean"): 0.05,
    ("joe", "white 10 dB"): 0.10,
    ("joe", "babble 10 dB"): 0.20,
    ("espeak", "clean"): 0.12,
    ("espeak", "white 10 dB"): 0.46,
    ("espeak", "babble 10 dB"): 0.17,
}


@pytest.fixture(scope="module")
def engine(asr_engine):
    """The session's in-process asr CPU engine (tests/conftest.py)."""
    return asr_engine


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize(("voice", "condition"), list(WER_BOUND), ids=[f"{v}-{c}" for v, c in WER_BOUND])
async def test_wer_in_noise_stays_within_its_bound(asr_speakers, engine, voice, condition):
    heard = [await ev.recognize(engine, *asr_speakers.degraded(voice, text, condition)) for text in SENTENCES]
    error = ev.wer(SENTENCES, heard)
    print(f"\nWER {voice} {condition}: {error:.3f}")
    misheard = [(t, h) for t, h in zip(SENTENCES, heard, strict=True) if ev.wer([t], [h])]
    assert error <= WER_BOUND[voice, condition], (error, misheard)
    # The bound fails garbage: the same transcripts scored against the wrong sentences do not pass it.
    assert ev.wer(SENTENCES[1:] + SENTENCES[:1], heard) > WER_BOUND[voice, condition]


def test_noise_is_mixed_at_the_asked_snr(asr_speakers):
    """The degraded audio holds the speech at the asked speech-to-noise ratio (so the table means what it says)."""
    import numpy as np

    text = SENTENCES[0]
    clean, rate = asr_speakers.degraded("joe", text, "clean")
    x = np.frombuffer(clean, dtype=np.int16).astype(np.float64)
    first, last = ev.truth_bounds(clean)
    for condition, snr in (("white 10 dB", 10.0), ("babble 10 dB", 10.0), ("white 0 dB", 0.0)):
        noisy, noisy_rate = asr_speakers.degraded("joe", text, condition)
        assert noisy_rate == rate
        noise = np.frombuffer(noisy, dtype=np.int16).astype(np.float64) - x
        measured = 10 * np.log10(np.mean(x[first:last] ** 2) / np.mean(noise**2))
        assert abs(measured - snr) < 0.5, (condition, measured)
    phone, phone_rate = asr_speakers.degraded("joe", text, "phone band 8 kHz")
    assert phone_rate == 8000
    spectrum = np.abs(np.fft.rfft(np.frombuffer(phone, dtype=np.int16).astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(phone) // 2, 1 / 8000)
    assert spectrum[(freqs < 200) | (freqs > 3500)].sum() < 1e-3 * spectrum.sum(), "energy outside the phone band"
