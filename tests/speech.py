"""Test oracles for speech: what a listener would check.

- ``listen``: the strict listener, the intelligibility oracle of every test that asks "was the text said?". An
  open-vocabulary recognizer (faster-whisper ``base`` from its wheels, services/engines/asr/models.py; beam 5, greedy
  temperature 0, no prompt, English) that knows nothing of the expected text, scored by ``wer`` on normalised
  words (``words``: lower case, no punctuation, digits spelled out). ``INTELLIGIBLE`` (0.10) is the bound: on a
  sentence of up to nine words that is word-perfect, so one content word changed ("fox" -> "box") fails
  (tests/project/test_speech_oracle.py proves it on synthesized near-miss sentences); longer texts allow one error per
  ten words. Test sentences are ones both CPU voices say clearly (espeak-ng's "jumps" is heard as "dumps", so
  espeak tests use "the children are playing in the garden").
- No grammar-constrained oracle: pocketsphinx with a word loop over the test sentence's words (the previous oracle)
  scored piper saying "the quick brown box jumps over the hazy log" at WER 0.22 against the fox sentence and passed
  it. No test here needs a grammar, so none is kept.
- ``speech_like``: level and spectrum checks that silence, clipping and noise fail.
"""

from __future__ import annotations

import functools

import numpy as np

from bench import evaluation
from services.common import audio

# The strict listener's bound: corpus WER of what it heard against what was to be said.
INTELLIGIBLE = 0.10


def words(text: str) -> list[str]:
    """Normalised words: lower case, no punctuation, digits spelled out ("4567" = "four five six seven")."""
    return evaluation.words(text)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of ``hypothesis`` against ``reference`` on normalised words."""
    return evaluation.wer([reference], [hypothesis])


@functools.cache
def _whisper(model: str):
    from faster_whisper import WhisperModel

    from services.engines.asr.models import base_model_dir, tiny_en_dir

    directory = tiny_en_dir() if model == "tiny.en" else base_model_dir()
    return WhisperModel(str(directory), device="cpu", compute_type="int8", cpu_threads=2)


def listen(pcm: bytes, rate: int, model: str = "base", language: str = "en") -> str:
    """The strict listener: what an open-vocabulary recognizer hears in s16le mono ``pcm`` at ``rate``, in
    ``language`` (whisper's code: "en", "zh", ...; base is multilingual, tiny.en is not)."""
    x = np.frombuffer(audio.resample(pcm, rate, 16000), dtype=np.int16).astype(np.float32) / 32768.0
    segments, _ = _whisper(model).transcribe(
        x,
        language=language,
        beam_size=5,
        temperature=0.0,
        condition_on_previous_text=False,
        without_timestamps=True,
        vad_filter=False,
    )
    return " ".join(s.text.strip() for s in segments)


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate of ``hypothesis`` against ``reference`` (letters and digits, as written)."""
    return evaluation.cer([reference], [hypothesis])


def intelligible(text: str, pcm: bytes, rate: int) -> tuple[float, str]:
    """(WER, what was heard): the strict listener on ``pcm`` against ``text``; pass when WER <= INTELLIGIBLE."""
    heard = listen(pcm, rate)
    return wer(text, heard), heard


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
