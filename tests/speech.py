"""Test oracles for speech: what a listener would check.

- ``listen``: the strict listener, the intelligibility oracle of every test that asks "was the text said?". An
  open-vocabulary recognizer (faster-whisper ``base`` from its wheels, services/engines/asr/models.py; beam 5, greedy
  temperature 0, no prompt, English) that knows nothing of the expected text, scored by ``wer`` on normalised
  words (``words``: lower case, no punctuation, digits spelled out, and the signs a voice says as words spelled
  out: piper reads a brain's "2 + 2 = 4" as "two plus two equals four", and whisper may write either).
  ``INTELLIGIBLE`` (0.10) is the bound: on a sentence of up to nine words that is word-perfect, so one content word
  changed ("fox" -> "box") fails (tests/project/test_speech_oracle.py proves it on synthesized near-miss sentences);
  longer texts allow one error per ten words. Test sentences are ones both CPU voices say clearly (espeak-ng's
  "jumps" is heard as "dumps", so espeak tests use "the children are playing in the garden").
- No grammar-constrained oracle: pocketsphinx with a word loop over the test sentence's words (the previous oracle)
  scored piper saying "the quick brown box jumps over the hazy log" at WER 0.22 against the fox sentence and passed
  it. No test here needs a grammar, so none is kept.
- ``speech_like``: level and spectrum checks that silence, clipping and noise fail.
- ``speaker_embedding``: who is speaking, for voice-cloning tests: CAM++ (``campplus.onnx``, shipped in every
  CosyVoice model directory; CosyVoice's frontend computes its speaker embeddings with it) on Kaldi log-mel
  filterbanks computed here in numpy (``fbank``, Kaldi's defaults as CosyVoice calls them: 80 bins, no dither, per-
  utterance mean removed), so it runs wherever the ONNX file is, with onnxruntime and no torch. ``cosine`` compares
  two embeddings: a clone must be closer to its prompt speaker than to another speaker.
"""

from __future__ import annotations

import functools

import numpy as np

from bench import evaluation
from services.common import audio

# The strict listener's bound: corpus WER of what it heard against what was to be said.
INTELLIGIBLE = 0.10


# Signs the CPU voices say as words (a reply from the brain may be "2 + 2 = 4"), spelled out on both sides.
SAID_SIGNS = {"+": " plus ", "=": " equals "}


def said(text: str) -> str:
    """``text`` with the signs a voice says as words written as those words ("2 + 2 = 4" -> "2 plus 2 equals 4")."""
    for sign, word in SAID_SIGNS.items():
        text = text.replace(sign, word)
    return text


def words(text: str) -> list[str]:
    """Normalised words: lower case, no punctuation, digits spelled out ("4567" = "four five six seven"), said signs
    spelled out ("+" = "plus")."""
    return evaluation.words(said(text))


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of ``hypothesis`` against ``reference`` on normalised words."""
    return evaluation.wer([said(reference)], [said(hypothesis)])


# How the strict listener decodes (faster-whisper's transcribe options); bench/gpu_smoke.py decodes on a card the same way.
LISTEN_OPTIONS = dict(
    beam_size=5, temperature=0.0, condition_on_previous_text=False, without_timestamps=True, vad_filter=False
)


@functools.cache
def _whisper(model: str):
    """``model``: "base", "tiny.en", or a CTranslate2 Whisper model directory (scripts/asr_card.py's int8 tiny.en)."""
    from faster_whisper import WhisperModel

    from services.engines.asr.models import base_model_dir, tiny_en_dir

    named = {"tiny.en": tiny_en_dir, "base": base_model_dir}
    directory = named[model]() if model in named else model
    return WhisperModel(str(directory), device="cpu", compute_type="int8", cpu_threads=2)


def at_16k(pcm: bytes, rate: int) -> np.ndarray:
    """s16le mono ``pcm`` at ``rate`` as whisper's input: float32 at 16 kHz."""
    return np.frombuffer(audio.resample(pcm, rate, 16000), dtype=np.int16).astype(np.float32) / 32768.0


def listen(pcm: bytes, rate: int, model: str = "base", language: str = "en", prompt: str | None = None) -> str:
    """The strict listener: what an open-vocabulary recognizer hears in s16le mono ``pcm`` at ``rate``, in
    ``language`` (whisper's code: "en", "zh", ...; base is multilingual, tiny.en is not). ``prompt``: whisper's
    initial prompt, only a script hint that says nothing of the text (the asr service's asr.language_prompts: whisper
    base writes Chinese in Traditional characters without one)."""
    segments, _ = _whisper(model).transcribe(
        at_16k(pcm, rate), language=language, initial_prompt=prompt, **LISTEN_OPTIONS
    )
    return " ".join(s.text.strip() for s in segments)


def wer_within(reference: str, hypothesis: str) -> float:
    """The lowest WER of ``reference`` against any run of consecutive words of ``hypothesis``: was the text said,
    perhaps between other words (a dialogue model asked to read a sentence may frame it: "Sure. <sentence>")."""
    heard = words(hypothesis)
    n = len(words(reference))
    if not heard:
        return 1.0
    spans = {(i, j) for i in range(len(heard)) for j in range(i + 1, min(len(heard), i + 2 * n) + 1)}
    return min(wer(reference, " ".join(heard[i:j])) for i, j in spans)


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


# --- who is speaking --------------------------------------------------------------------------------------------
def _kaldi_mel_banks(bins: int, fft: int, rate: int, low: float = 20.0) -> np.ndarray:
    """Kaldi's triangular mel filters (mel = 1127 ln(1 + f/700), equal widths on the mel axis), (bins, fft/2 + 1)."""

    def mel(f):
        return 1127.0 * np.log(1.0 + np.asarray(f, dtype=np.float64) / 700.0)

    lo, hi = mel(low), mel(rate / 2)
    delta = (hi - lo) / (bins + 1)
    m = mel(np.arange(fft // 2) * rate / fft)  # Kaldi leaves out the Nyquist bin (a zero column below)
    banks = np.zeros((bins, fft // 2 + 1))
    for b in range(bins):
        left, centre, right = lo + b * delta, lo + (b + 1) * delta, lo + (b + 2) * delta
        up = (m - left) / (centre - left)
        down = (right - m) / (right - centre)
        banks[b, : fft // 2] = np.maximum(0.0, np.minimum(up, down))
    return banks


def fbank(x: np.ndarray, rate: int = 16000, bins: int = 80) -> np.ndarray:
    """Kaldi log-mel filterbank of float mono ``x`` (torchaudio.compliance.kaldi.fbank's defaults: 25 ms frames every
    10 ms, edges snipped, DC removed, pre-emphasis 0.97, Povey window, power spectrum, log floored at float32 eps)."""
    length, shift = rate * 25 // 1000, rate * 10 // 1000
    if len(x) < length:
        return np.zeros((0, bins), dtype=np.float32)
    count = 1 + (len(x) - length) // shift
    frames = np.lib.stride_tricks.sliding_window_view(np.asarray(x, dtype=np.float64), length)[::shift][:count].copy()
    frames -= frames.mean(axis=1, keepdims=True)
    frames[:, 1:] -= 0.97 * frames[:, :-1].copy()
    frames[:, 0] *= 1 - 0.97
    frames *= (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(length) / (length - 1))) ** 0.85
    fft = 1 << (length - 1).bit_length()
    power = np.abs(np.fft.rfft(frames, n=fft)) ** 2
    energies = power @ _kaldi_mel_banks(bins, fft, rate).T
    return np.log(np.maximum(energies, np.finfo(np.float32).eps)).astype(np.float32)


@functools.cache
def _campplus(path: str):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])


def speaker_embedding(pcm: bytes, rate: int, campplus_onnx: str) -> np.ndarray:
    """The CAM++ speaker embedding of s16le mono ``pcm`` (as CosyVoice's frontend computes it, at 16 kHz)."""
    x = np.frombuffer(audio.resample(pcm, rate, 16000), dtype=np.int16).astype(np.float32) / 32768.0
    feat = fbank(x)
    feat -= feat.mean(axis=0, keepdims=True)
    session = _campplus(campplus_onnx)
    return np.asarray(session.run(None, {session.get_inputs()[0].name: feat[None]})[0], dtype=np.float64).reshape(-1)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two embeddings (1: same direction)."""
    return float(np.dot(a, b) / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))
