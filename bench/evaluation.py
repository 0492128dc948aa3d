"""How asr is measured (tests/test_asr_*.py, bench/asr.py, docs/asr.md): real speech from the fleet's own CPU TTS
engines, padded with silence, and a word error rate on normalized words. Not part of any service (it speaks with
two services' engines): the tests and benches import it.

Voices: piper ``joe`` (cosyvoice_tts's CPU engine, natural VITS speech) and espeak-ng ``en-US`` (qwen_tts's CPU
engine, robotic formant speech), both run in process through their engine classes. Truth for speech start/end is
where the synthesized samples begin and end (first/last sample above 2% of the utterance's peak), at the rate the
recognizer is given, inside the padded buffer.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

import numpy as np

from services.common import audio

# 24 everyday sentences (commands, numbers, names, questions), lower case, no punctuation: the reference words.
SENTENCES = (
    "hello world this is a test",
    "please call me back when you get home",
    "the weather is nice and sunny today",
    "my order number is four five six seven",
    "can you tell me the time of the next train",
    "i would like to book a table for two people",
    "turn off the lights in the kitchen",
    "the meeting has been moved to friday afternoon",
    "we need more coffee in the office",
    "send the report to my manager before noon",
    "what is the capital city of france",
    "the quick brown fox jumps over the lazy dog",
    "she sells fresh fruit at the market on sunday",
    "remind me to water the plants tomorrow morning",
    "how much does a ticket to london cost",
    "my phone battery is almost empty",
    "the children are playing in the garden",
    "please speak a little more slowly",
    "open the window because it is warm in here",
    "our flight leaves at seven in the evening",
    "thank you very much for your help",
    "the doctor will see you in ten minutes",
    "i lost my keys somewhere in the house",
    "play some quiet music in the living room",
)

VOICES = ("joe", "espeak")

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def _number_words(digits: str) -> list[str]:
    """Whisper writes numbers as digits: "10" -> ten, "47" -> forty seven, "4567" -> four five six seven."""
    n = int(digits)
    if len(digits) <= 2 and n < 20:
        return [_ONES[n]]
    if len(digits) == 2:
        return [_TENS[n // 10 - 2]] + ([_ONES[n % 10]] if n % 10 else [])
    return [_ONES[int(d)] for d in digits]


def words(text: str) -> list[str]:
    """Lower-case words without punctuation; digits spelled out; "7 o'clock"-style apostrophes kept in words."""
    out: list[str] = []
    for token in re.findall(r"[a-z']+|\d+", text.lower().replace("-", " ")):
        out.extend(_number_words(token) if token.isdigit() else [token.strip("'")])
    return [w for w in out if w]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    d = np.arange(len(hyp) + 1)
    for i in range(1, len(ref) + 1):
        prev, d[0] = d.copy(), i
        for j in range(1, len(hyp) + 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (ref[i - 1] != hyp[j - 1]))
    return int(d[len(hyp)])


# A contraction and the words it stands for are the same speech: "France is Paris" said at a natural pace is
# written "France's Paris" by a listener as often as not. What each ending can stand for ("'s" is also a possessive,
# so a contraction is only ever expanded into a pair of words the other side has).
CONTRACTIONS = {
    "n't": ("not",),
    "'re": ("are",),
    "'ll": ("will",),
    "'ve": ("have",),
    "'m": ("am",),
    "'s": ("is", "has"),
    "'d": ("would", "had"),
}
_IRREGULAR_STEMS = {"won't": "will", "can't": "can", "shan't": "shall"}


def _expanded(side: list[str], other: list[str]) -> list[str]:
    """``side`` with each contraction written out where ``other`` has the words it stands for ("france's" next to
    "france is" -> "france", "is"); every other word as it is."""
    pairs = set(zip(other, other[1:], strict=False))
    out: list[str] = []
    for word in side:
        for ending, meanings in CONTRACTIONS.items():
            if word.endswith(ending) and len(word) > len(ending):
                stem = _IRREGULAR_STEMS.get(word, word[: -len(ending)])
                full = next((m for m in meanings if (stem, m) in pairs), None)
                if full:
                    out += [stem, full]
                    break
        else:
            out.append(word)
    return out


def spoken_edits(reference: str, hypothesis: str) -> int:
    """Word edits from ``reference`` to ``hypothesis`` on normalized words, a contraction counting as the words it
    stands for on either side."""
    ref, hyp = words(reference), words(hypothesis)
    return edit_distance(_expanded(ref, hyp), _expanded(hyp, ref))


def wer(references: list[str], hypotheses: list[str]) -> float:
    """Corpus word error rate: all edits over all reference words (a contraction heard for the words it stands for,
    or the reverse, is no edit: CONTRACTIONS)."""
    edits = sum(spoken_edits(r, h) for r, h in zip(references, hypotheses, strict=True))
    return edits / max(1, sum(len(words(r)) for r in references))


def characters(text: str) -> list[str]:
    """The characters a character error rate counts: letters and digits, lower case; no spaces, no punctuation."""
    return [c for c in text.lower() if c.isalnum()]


def cer(references: list[str], hypotheses: list[str]) -> float:
    """Corpus character error rate (for Chinese and other languages written without spaces): all edits over all
    reference characters. Characters are compared as written: Traditional 歡 against Simplified 欢 is an error."""
    edits = sum(edit_distance(characters(r), characters(h)) for r, h in zip(references, hypotheses, strict=True))
    return edits / max(1, sum(len(characters(r)) for r in references))


def truth_bounds(pcm: bytes) -> tuple[int, int]:
    """(first, last+1) sample of speech: above 2% of the peak."""
    x = np.abs(np.frombuffer(pcm, dtype=np.int16).astype(np.int32))
    loud = np.nonzero(x > 0.02 * max(1, int(x.max())))[0]
    return (int(loud[0]), int(loud[-1]) + 1) if len(loud) else (0, 0)


@dataclass(frozen=True)
class Utterance:
    text: str
    start_ms: float  # truth, in the padded stream
    end_ms: float


@dataclass(frozen=True)
class PaddedStream:
    pcm: bytes
    rate: int
    utterances: tuple[Utterance, ...]

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / self.rate


def padded_stream(
    speech: list[tuple[str, bytes, int]], rate: int, lead_s: float = 0.6, gap_s: float = 1.0, tail_s: float = 0.8
) -> PaddedStream:
    """Sentences (text, pcm, native rate) resampled to ``rate``, with silence before, between and after."""
    parts, utterances, pos = [], [], 0
    for i, (text, pcm, native) in enumerate(speech):
        silence = bytes(int((lead_s if i == 0 else gap_s) * rate) * 2)
        parts.append(silence)
        pos += len(silence) // 2
        at_rate = audio.resample(pcm, native, rate)
        first, last = truth_bounds(at_rate)
        utterances.append(Utterance(text, (pos + first) * 1000 / rate, (pos + last) * 1000 / rate))
        parts.append(at_rate)
        pos += len(at_rate) // 2
    parts.append(bytes(int(tail_s * rate) * 2))
    return PaddedStream(b"".join(parts), rate, tuple(utterances))


# --- beyond clean speech: noise at a given SNR, babble, the phone band ------------------------------------------
# What the noise tables (bench/asr_noise.py, docs/asr.md) and tests/asr/test_asr_noise.py feed the recognizer. All are
# deterministic (seeded), so a run is repeatable. SNR is speech power over noise power, speech power measured over
# the utterance (truth bounds), noise over the whole buffer; the noise covers the silence around the speech too.

PHONE_RATE = 8000
PHONE_BAND_HZ = (300.0, 3400.0)
BABBLE_TALKERS = 4


def _f32(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype=np.int16).astype(np.float64) / 32768.0


def _s16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1.0, 32767 / 32768) * 32768.0).round().astype(np.int16).tobytes()


def white_noise(samples: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, samples)


def babble(talkers: list[bytes], samples: int, seed: int = 0) -> np.ndarray:
    """Several talkers at once (each at equal power, looped from a random start): the noise of a crowded room."""
    rng = np.random.default_rng(seed)
    out = np.zeros(samples)
    for pcm in talkers:
        x = _f32(pcm)
        x = x / max(np.sqrt(np.mean(x**2)), 1e-9)
        start = int(rng.integers(0, len(x)))
        out += np.resize(np.roll(x, -start), samples)
    return out


def with_noise(pcm: bytes, noise: np.ndarray, snr_db: float) -> bytes:
    """``pcm`` plus ``noise`` scaled so that speech power / noise power = ``snr_db``."""
    x = _f32(pcm)
    first, last = truth_bounds(pcm)
    speech_power = np.mean(x[first:last] ** 2) if last > first else np.mean(x**2)
    noise = noise[: len(x)]
    scale = np.sqrt(speech_power / max(np.mean(noise**2), 1e-18) / 10 ** (snr_db / 10))
    return _s16(x + scale * noise)


def phone_band(pcm: bytes, rate: int) -> tuple[bytes, int]:
    """What a phone line carries: 8 kHz, band-passed to 300-3400 Hz. Returns (pcm, 8000)."""
    x = _f32(audio.resample(pcm, rate, PHONE_RATE))
    spectrum = np.fft.rfft(x)
    freqs = np.fft.rfftfreq(len(x), 1 / PHONE_RATE)
    low, high = PHONE_BAND_HZ
    # Raised-cosine edges 100 Hz wide, so the cut does not ring like a brick wall.
    gain = np.clip((freqs - (low - 100)) / 100, 0, 1) * np.clip(((high + 100) - freqs) / 100, 0, 1)
    gain = 0.5 - 0.5 * np.cos(np.pi * gain)
    return _s16(np.fft.irfft(spectrum * gain, n=len(x))), PHONE_RATE


# (name, noise kind, SNR dB, phone band): the conditions of the noise table.
CONDITIONS = (
    ("clean", None, None, False),
    ("white 20 dB", "white", 20.0, False),
    ("white 10 dB", "white", 10.0, False),
    ("white 0 dB", "white", 0.0, False),
    ("babble 20 dB", "babble", 20.0, False),
    ("babble 10 dB", "babble", 10.0, False),
    ("babble 0 dB", "babble", 0.0, False),
    ("phone band 8 kHz", None, None, True),
    ("phone band 8 kHz + babble 10 dB", "babble", 10.0, True),
)


class Speakers:
    """The two CPU TTS engines, in process, with every sentence synthesized once (cached)."""

    def __init__(self) -> None:
        self._engines: dict = {}
        self._cache: dict[tuple[str, str], tuple[bytes, int]] = {}

    async def start(self) -> None:
        from services.common.config.base import ChunkingConfig, EspeakConfig
        from services.engines.espeak_engine import EspeakTtsEngine
        from services.engines.piper_engine import PiperTtsEngine

        piper = PiperTtsEngine("asr_eval", ChunkingConfig(first_segment_max_chars=0))
        espeak = EspeakTtsEngine("asr_eval", ChunkingConfig(first_segment_max_chars=0), EspeakConfig())
        await asyncio.gather(piper.start(), espeak.start())
        self._engines = {"joe": (piper, "joe"), "espeak": (espeak, "en-US")}

    async def close(self) -> None:
        for engine, _ in self._engines.values():
            await engine.close()

    async def say(self, voice: str, text: str) -> tuple[bytes, int]:
        key = (voice, text)
        if key not in self._cache:
            from services.common.engines import SynthesisOptions

            engine, voice_id = self._engines[voice]
            pieces = [p async for p in engine.synthesize(text, SynthesisOptions(voice=voice_id, seed=7))]
            self._cache[key] = (b"".join(p.pcm for p in pieces), pieces[0].sample_rate_hz)
        return self._cache[key]

    async def say_all(self, texts=SENTENCES) -> None:
        for voice in self._engines:
            for text in texts:
                await self.say(voice, text)

    def padded(self, voice: str, texts: list[str], rate: int, **pads) -> PaddedStream:
        """Sentences already said (``say``/``say_all``) as one padded stream at ``rate``."""
        return padded_stream([(t, *self._cache[(voice, t)]) for t in texts], rate, **pads)

    def degraded(self, voice: str, text: str, condition: str, rate: int = 16000, seed: int = 0) -> tuple[bytes, int]:
        """``text`` (already said) padded with 0.5 s of silence each side, then put through ``condition`` (a name
        in CONDITIONS): (pcm, rate). Babble is BABBLE_TALKERS other evaluation sentences (SENTENCES) already said, by
        either voice: only those, so the noise does not depend on what else the process happened to say first (a
        test that said its own sentence earlier in the session changed the babble, and the WER, of a later one)."""
        _, kind, snr_db, phone = next(c for c in CONDITIONS if c[0] == condition)
        pcm = self.padded(voice, [text], rate, lead_s=0.5, tail_s=0.5).pcm
        if kind == "white":
            pcm = with_noise(pcm, white_noise(len(pcm) // 2, seed), snr_db)
        elif kind == "babble":
            said = [(v, t) for (v, t) in self._cache if t != text and t in SENTENCES]
            said.sort(key=lambda vt: (vt[1], vt[0]))
            pick = np.random.default_rng(seed + SENTENCES.index(text) if text in SENTENCES else seed)
            chosen = [said[int(i)] for i in pick.choice(len(said), BABBLE_TALKERS, replace=False)]
            talkers = [audio.resample(self._cache[vt][0], self._cache[vt][1], rate) for vt in chosen]
            pcm = with_noise(pcm, babble(talkers, len(pcm) // 2, seed), snr_db)
        if phone:
            return phone_band(pcm, rate)
        return pcm, rate


async def cpu_engine(**config):
    """The asr CPU engine in process, started (its defaults unless ``config`` overrides AsrServiceConfig fields)."""
    from services.common.config.asr import AsrServiceConfig
    from services.engines.asr.cpu_engine import CpuAsrEngine

    engine = CpuAsrEngine("asr_eval", AsrServiceConfig(port=1, **config))
    await engine.start()
    return engine


async def stream_through(engine, options, pcm16: bytes, on_event, pause_s: float = 0.0) -> None:
    """Feed 16 kHz ``pcm16`` into a stream of an in-process asr engine in 100 ms pieces (``pause_s`` after each: 0.1
    is real time), calling ``on_event`` with every event until the stream has ended and is closed."""
    stream = await engine.open_stream(options)

    async def consume():
        async for event in stream.events():
            on_event(event)

    task = asyncio.create_task(consume())
    for i in range(0, len(pcm16), 3200):
        await stream.feed(pcm16[i : i + 3200])
        if pause_s:
            await asyncio.sleep(pause_s)
    await stream.finish()
    await task
    await stream.close()


async def recognize(engine, pcm: bytes, rate: int) -> str:
    """Every final an in-process asr engine gives for ``pcm`` (resampled to 16 kHz as the servicer does), joined;
    interim results off."""
    from services.common.engines import RecognitionOptions

    finals: list[str] = []

    def keep_final(event) -> None:
        if event.result is not None and event.result.is_final:
            finals.append(event.result.transcript)

    options = RecognitionOptions(language="en-US", interim_results=False)
    await stream_through(engine, options, audio.resample(pcm, rate, 16000), keep_final)
    return " ".join(f for f in finals if f)


def requests(pcm: bytes, rate: int, config, chunk_ms: int = 100, realtime: bool = False, request_id: str = ""):
    """StreamingRecognize messages: the config, then ``chunk_ms`` pieces of audio (paced in real time if asked)."""
    import time

    from voice.v1 import recognizer_pb2

    yield recognizer_pb2.StreamingRecognizeRequest(request_id=request_id, config=config)
    step = rate * chunk_ms // 1000 * 2
    t0 = time.monotonic()
    for i, start in enumerate(range(0, len(pcm), step)):
        if realtime:
            time.sleep(max(0.0, t0 + i * chunk_ms / 1000 - time.monotonic()))
        yield recognizer_pb2.StreamingRecognizeRequest(audio=pcm[start : start + step])


def config(rate: int, language: str = "en-US", interim: bool = True, **endpointing):
    from voice.v1 import audio_pb2, recognizer_pb2

    return recognizer_pb2.RecognitionConfig(
        input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=rate, channels=1),
        language=language,
        interim_results=interim,
        endpointing=recognizer_pb2.EndpointingConfig(**endpointing),
    )


def cut_after(samples: np.ndarray, word: str, listener) -> int:
    """Sample of 16 kHz int16 ``samples`` where ``word`` (its last occurrence) ends: ``listener``'s (a faster-whisper
    WhisperModel) word timestamp, moved to the quietest 10 ms between 50 ms before it and 30 ms after it (timestamps
    are coarse; a cut must not clip a sound). Speech cut there and followed by silence is a speaker pausing
    mid-sentence with the prosody of one going on (semantic endpointing: tests/asr/test_asr_turn.py, bench/turn_model.py)."""
    x = samples.astype(np.float32) / 32768.0
    segments, _ = listener.transcribe(x, language="en", beam_size=5, word_timestamps=True)
    heard = [w for s in segments for w in s.words]
    ends = [w.end for w in heard if words(w.word) == [word]]
    if not ends:
        raise ValueError(f"the listener did not hear {word!r}: {[w.word for w in heard]}")
    end = int(ends[-1] * 16000)
    frames = range(max(0, end - 800), min(len(x) - 160, end + 480), 80)
    return min(frames, key=lambda i: float(np.mean(x[i : i + 160] ** 2)))
