"""CPU engine of asr: Silero VAD + pocketsphinx interims (pass 1) + faster-whisper finals (pass 2), all from wheels.

- pass 1: pocketsphinx 5.1.1 (its bundled en-US acoustic model, LM and dictionary), truly incremental:
  ``process_raw`` per 32 ms window, ``hyp()`` every ``asr.interim_interval_ms``. English only; its hypothesis is
  only an interim (it mishears synthetic speech often, docs/asr.md). A decoder takes ~0.3 s to create, so decoders
  are pooled and reused across streams.
- pass 2: faster-whisper (CTranslate2, int8 on CPU) on the whole utterance at each endpoint: ``tiny.en`` for English
  by default (``asr.english_model``), the multilingual ``base`` for other languages and auto-detect. Phrase hints go
  to whisper as its initial prompt ("Vocabulary: ..."), which biases decoding toward those words.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from services.common import languages, metrics
from services.common.config.asr import AsrServiceConfig
from services.common.engines import AsrEngine, AsrStream, RecognitionOptions
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.scheduler import cpu_cores
from services.engines.asr.budgets import FinalsInFlight, InterimBudget
from services.engines.asr.finals import FinalText
from services.engines.asr.models import base_model_dir, tiny_en_dir
from services.engines.asr.pipeline import TwoPassStream
from services.engines.asr.spotting import Spotting
from services.engines.asr.turn_model import TurnSupport
from services.engines.asr.vad import RATE, SileroVad

log = logging.getLogger("voicefleet.asr.cpu")


def whisper_language(language: str, field: str = "config.language") -> str | None:
    """BCP-47 -> whisper's language code ("en-US" -> "en", "zh-CN" -> "zh"); "" -> None (detect)."""
    if not language:
        return None
    from faster_whisper.tokenizer import _LANGUAGE_CODES

    code = languages.primary(language.replace("_", "-"))  # cmn (Mandarin) -> zh
    if code not in _LANGUAGE_CODES:
        raise InvalidArgument(
            field,
            f"{language!r} is not a language whisper knows; use a BCP-47 tag such as en-US, de-DE, zh-CN,"
            " or leave it empty to detect the language",
        )
    return code


def hint_prompt(hints: tuple[str, ...], language_prompt: str = "") -> str | None:
    """Whisper's initial prompt: the language's prompt (asr.language_prompts), then the phrase hints. A bare list of
    the phrases made whisper drop words of the utterance that the prompt already held ("she sells fresh fruit ..."
    lost its first words); "Vocabulary: ..." did not (docs/asr.md)."""
    parts = [language_prompt] if language_prompt else []
    if hints:
        parts.append(f"Vocabulary: {', '.join(hints)}.")
    return " ".join(parts) or None


# A decoded text whose gzip compression ratio is above this repeats itself (faster-whisper's own
# compression_ratio_threshold): the CPU engine's fitted-window final and the GPU engine's one-window final then decode
# again the way that cannot repeat.
REPEATING_COMPRESSION_RATIO = 2.4

# Spotting decodes (WhisperFinals.quick): the encoder window's floor, and the least mean log-probability of what they
# heard (measured on piper joe, docs/asr.md#spot-phrases).
SPOT_WINDOW_SECONDS = 2
SPOT_MIN_LOGPROB = -2.0

OPENCC = {"simplified": "t2s", "traditional": "s2t"}  # asr.chinese_script -> OpenCC's conversion


@functools.cache
def _opencc(conversion: str):
    from opencc import OpenCC  # opencc-python-reimplemented: OpenCC's tables in pure Python (Apache-2.0)

    return OpenCC(conversion)


def in_script(text: str, language: str | None, script: str) -> str:
    """A Chinese transcript in ``asr.chinese_script``: whisper's Simplified prompt steers the script but does not fix
    it (some short sentences came back in Traditional, docs/asr.md#mandarin). Other languages as is."""
    if language != "zh" or not text or script not in OPENCC:
        return text
    return _opencc(OPENCC[script]).convert(text)


def final_in_script(final: FinalText, script: str) -> FinalText:
    words = tuple(dataclasses.replace(w, word=in_script(w.word, final.language, script)) for w in final.words)
    return dataclasses.replace(final, text=in_script(final.text, final.language, script), words=words)


# Pass 1 only shows interims (whisper gives the final), so its search is narrowed for speed: no second (flat-lexicon)
# pass or lattice, the 2 best Gaussians, fewer active HMMs and words per frame, tighter beams. On the evaluation
# sentences (piper joe, 16 kHz, 2026-11-25) that cut pocketsphinx's compute from 0.27 to 0.09 of the audio for an
# interim WER of 0.14 instead of 0.11 (docs/asr.md#capacity).
INTERIM_SEARCH = dict(
    fwdflat=False, bestpath=False, topn=2, maxhmmpf=3000, maxwpf=5, beam=1e-40, wbeam=1e-30, pbeam=1e-40
)


# Whisper's fitted-window final sometimes says a short utterance twice ("What is the capital of France? What is the
# capital of France?") while its beam also holds it said once. More words than this a second of audio could not
# have been spoken at a conversational pace (~2.5-3.5 words/s; piper joe ~3), so the longer text is the repetition.
MAX_WORDS_PER_SECOND = 4.5


def said_once(
    text: str, alternatives: tuple[str, ...], seconds: float, looks_degenerate: Callable[[str], bool]
) -> str | None:
    """The beam's hypothesis that is ``text`` with its repeat left off, when ``text`` holds more words than
    ``seconds`` of audio could at a conversational pace: the hypothesis is ``text``'s beginning, what follows it in
    ``text`` begins as it does (the repeat), and it does not look degenerate itself; else None (decode again with the
    full window). A caller who really says a phrase twice says it at a pace the audio holds, and keeps the
    full-window decode."""
    words = spoken_words(text)
    if not seconds or len(words) <= MAX_WORDS_PER_SECOND * seconds:
        return None
    for alternative in alternatives:
        once = spoken_words(alternative)
        rest = words[len(once) :]
        if (
            once
            and rest
            and words[: len(once)] == once
            and rest[:2] == once[: len(rest[:2])]
            and not looks_degenerate(alternative)
        ):
            return alternative
    return None


def spoken_words(text: str) -> list[str]:
    return [w for w in (w.strip(".,!?;:\"'").lower() for w in text.split()) if w]


def repeats_itself(text: str, min_words: int = 3) -> bool:
    """True when a run of at least ``min_words`` words comes twice in a row: whisper's repetition failure. (A caller
    who really says a phrase twice only costs a decode with the full window.)"""
    words = spoken_words(text)
    for n in range(min_words, len(words) // 2 + 1):
        for start in range(len(words) - 2 * n + 1):
            if words[start : start + n] == words[start + n : start + 2 * n]:
                return True
    return False


class PocketsphinxPool:
    """Decoders for pass 1, in a process of their own (services/engines/asr/pass1_process.py: pocketsphinx thrashes on the
    GIL beside the asr process's other threads), each lent to one utterance at a time. Each holds its own copy of
    pocketsphinx's models (~90 MB PSS), so the pool makes no more than ``limit`` (the interim budget's slots, which
    bound the utterances in pass 1 at once) and few at start: ``warm`` makes the first, and whenever an utterance
    takes the last free one the child is asked for a spare, made while its inbox is empty (pass1_process.py)."""

    def __init__(self, limit: int = 0) -> None:
        from services.engines.asr.pass1_process import Pass1Process

        self.process = Pass1Process(RATE, INTERIM_SEARCH)
        self.limit = limit  # 0: no bound (a caller that owns its utterances, as the bench does)
        self._free: list = []
        self._lock = threading.Lock()
        self.created = 0

    def warm(self, count: int) -> None:
        """Make ``count`` decoders now (each loads its models, ~0.3 s), so the first callers do not wait for them."""
        decoders = [self.process.decoder(did) for did in self.process.warm(count)]
        with self._lock:
            self.created += len(decoders)
            self._free.extend(decoders)

    def acquire(self):
        with self._lock:
            decoder = self._free.pop() if self._free else None
            if decoder is None:
                self.created += 1  # made at its first start, blocking pass 1 meanwhile: a burst beat the spare
            spare = not self._free and (not self.limit or self.created < self.limit)
            if spare:
                self.created += 1
        if decoder is None:
            decoder = self.process.decoder(self.process.new_id())
        if spare:
            made_ahead = self.process.decoder(self.process.spare())
            with self._lock:
                self._free.append(made_ahead)
        return decoder

    def release(self, decoder) -> None:
        with self._lock:
            self._free.append(decoder)

    def close(self) -> None:
        self.process.close()


class PocketsphinxPartial:
    """Pass 1 of one utterance at a time: a pooled decoder, taken at the utterance's start and given back at its end
    (the pool holds one per utterance in pass 1 at once, not one per open stream)."""

    language = "en"
    english_only = True

    def __init__(self, pool: PocketsphinxPool):
        self._pool = pool
        self._decoder = None
        self._in_utt = False

    def start(self) -> None:
        if self._decoder is None:
            self._decoder = self._pool.acquire()
        if self._in_utt:
            self._decoder.end_utt()
        self._decoder.start_utt()
        self._in_utt = True

    def accept(self, pcm: np.ndarray) -> None:
        if len(pcm):
            self._decoder.process_raw(pcm.tobytes(), False, False)

    def hypothesis(self) -> str:
        hyp = self._decoder.hyp()
        return hyp.hypstr if hyp else ""

    def end(self) -> None:
        if self._in_utt:
            self._decoder.end_utt()
            self._in_utt = False
        self.release()

    def release(self) -> None:
        if self._decoder is not None:
            if self._in_utt:
                self._decoder.end_utt()
                self._in_utt = False
            self._pool.release(self._decoder)
            self._decoder = None


class WhisperFinals:
    """Pass 2 on CPU: tiny.en and multilingual base, int8."""

    def __init__(self, config: AsrServiceConfig):
        self.config = config
        self.tiny = None
        self.base = None

    def load(self) -> None:
        from faster_whisper import WhisperModel

        kw = dict(
            device="cpu",
            compute_type="int8",
            cpu_threads=self.config.whisper_threads,
            num_workers=self.config.final_workers,
            local_files_only=True,
        )
        t0 = time.monotonic()
        self.tiny = WhisperModel(str(tiny_en_dir()), **kw)
        self.base = WhisperModel(str(base_model_dir(self.config.model_cache_dir or None)), **kw)
        log.info("whisper tiny.en and base loaded in %.2fs", time.monotonic() - t0)

    def warm(self, audio: np.ndarray) -> None:
        """One fitted-window decode per model, and base's language detection, on ``audio``: the paths every final
        takes. Not ``recognize``: on warm-up noise its decode looks degenerate and falls back to the full 30 s window,
        which made the warm-up 2.57 s against 0.43 s and is no faster for having run once (0.65 s cold and warm; AMD
        EPYC, bench/results/cpu-probes-2026-11-28-amd/warmup.log)."""
        self._fitted_window(audio, "en", ())
        encoded = self._encode(self.base, audio)
        if encoded is not None:
            self._fitted_window(audio, self.detect(encoded[0]), (), True, encoded)

    def model_for(self, language: str | None, detected: bool = False):
        if language == "en" and self.config.english_model == "tiny.en" and not detected:
            return self.tiny, "tiny.en"
        return self.base, "base"

    def prompt(self, language: str | None, hints: tuple[str, ...]) -> str | None:
        return hint_prompt(hints, self.config.language_prompts.get(language or "", ""))

    def recognize(self, audio: np.ndarray, language: str | None, hints: tuple[str, ...]) -> FinalText:
        """Language known: one decode with the fitted window. Not known: base's encoder runs once on the fitted
        window (~2x the utterance, not 30 s); its language-detection head reads that encoding (one decoder step) and
        the decode in the detected language, with that language's prompt, reuses it. Either falls back to the full
        30 s window when the fitted decode looks degenerate or the utterance is too long for a fitted window."""
        return final_in_script(self._recognize(audio, language, hints), self.config.chinese_script)

    def _recognize(self, audio: np.ndarray, language: str | None, hints: tuple[str, ...]) -> FinalText:
        detected = False
        encoded = None
        if not language:
            encoded = self._encode(self.base, audio)
            if encoded is not None:
                language = self.detect(encoded[0])
                detected = True
        if language:
            fitted = self._fitted_window(audio, language, hints, detected, encoded)
            if fitted is not None:
                return fitted
        return self._full_window(audio, language, hints, detected)

    def _window(self, model, audio: np.ndarray, min_seconds: int | None = None):
        """(features in the fitted window, its seconds), or (None, 30) when the utterance needs the full window.
        ``min_seconds``: the window's floor (None: asr.final_window_min_seconds)."""
        extractor = model.feature_extractor
        features = extractor(audio)  # (n_mels, frames); called without chunk_length it changes nothing shared
        frames = features.shape[-1]
        per_second = extractor.sampling_rate // extractor.hop_length  # 100 frames
        floor = self.config.final_window_min_seconds if min_seconds is None else min_seconds
        seconds = max(floor, math.ceil(2 * frames / per_second))
        if seconds >= 30:
            return None, 30
        window = np.zeros((features.shape[0], seconds * per_second), dtype=np.float32)
        window[:, :frames] = features
        return window, seconds

    def _encode(self, model, audio: np.ndarray, min_seconds: int | None = None):
        """(the encoder's output on the fitted window, its seconds), or None when the utterance needs the full
        window. ctranslate2's detect_language and generate take an encoding as well as features."""
        import ctranslate2

        window, seconds = self._window(model, audio, min_seconds)
        if window is None:
            return None
        return model.model.encode(ctranslate2.StorageView.from_array(window[None]), to_cpu=False), seconds

    def detect(self, encoded) -> str:
        """The utterance's language by base's language-detection head on an encoding of the fitted window."""
        token, probability = self.base.model.detect_language(encoded)[0][0]
        language = token.strip("<|>")
        log.debug("detected %s (p=%.2f) on the fitted window", language, probability)
        return language

    def _fitted_window(
        self, audio: np.ndarray, language: str, hints: tuple[str, ...], detected: bool = False, encoded=None
    ) -> FinalText | None:
        """One decode with the encoder window fitted to the utterance (ctranslate2's Whisper.generate accepts any
        window up to 30 s; faster-whisper's transcribe always pads to 30 s); ``encoded``: base's encoding of that
        window, when detection made it. None when the utterance needs the full window, or when the decode looks
        degenerate the way faster-whisper's own fallbacks judge it (compression ratio above 2.4 or a run of words
        said twice in a row: repeating itself; mean log-probability below -1). With the shorter window whisper
        sometimes says a short utterance twice ("Hello. My name is Alice. Hello. My name is Alice."), which the
        compression ratio of so short a text does not catch."""
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_compression_ratio

        model, _ = self.model_for(language, detected)
        extractor = model.feature_extractor
        if encoded is None or model is not self.base:
            encoded = self._encode(model, audio)
        if encoded is None:
            return None
        encoding, seconds = encoded
        tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language)
        prompt_text = self.prompt(language, hints)
        previous = tokenizer.encode(" " + prompt_text.strip()) if prompt_text else []
        prompt = model.get_prompt(tokenizer, previous, without_timestamps=True)
        result = model.model.generate(
            encoding,
            [prompt],
            beam_size=self.config.beam_size,
            num_hypotheses=self.config.beam_size,  # the others for the text check (FinalText.alternatives)
            return_scores=True,
            max_length=min(model.max_length, 16 + int(10 * len(audio) / extractor.sampling_rate)),
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
        text = tokenizer.decode(tokens).strip()
        alternatives = tuple(
            tokenizer.decode([t for t in ids if t < tokenizer.eot]).strip() for ids in result.sequences_ids[1:]
        )
        # ctranslate2's score is the length-normalised log-probability (length_penalty 1), as faster-whisper reads it.
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)

        def looks_degenerate(said: str) -> bool:
            return get_compression_ratio(said) > REPEATING_COMPRESSION_RATIO or repeats_itself(said)

        unsure = avg_logprob < -1.0
        if text and (unsure or looks_degenerate(text)):
            once = (
                None
                if unsure
                else said_once(text, alternatives, len(audio) / extractor.sampling_rate, looks_degenerate)
            )
            if once is None:
                log.info(
                    "final looked degenerate with a %d s window (%r, logprob %.2f): full window",
                    seconds,
                    text,
                    avg_logprob,
                )
                return None
            # No second decode (the full window costs ~0.5-0.8 s more on a 2-core CPU, at the end of a turn).
            log.info("final said itself twice with a %d s window (%r): the beam's %r", seconds, text, once)
            text, alternatives = once, tuple(a for a in alternatives if a != once)
        return FinalText(
            text=text,
            confidence=round(math.exp(avg_logprob), 3) if text else 0.0,
            language=language,
            alternatives=alternatives,
        )

    def quick(self, audio: np.ndarray, language: str | None) -> str:
        """Spotting (RecognitionConfig.spot_phrases): a young utterance so far (at most ~1.5 s), greedy, no hints,
        the encoder window fitted with a floor of SPOT_WINDOW_SECONDS (the encoder is most of a decode's cost;
        docs/asr.md#spot-phrases measures it). Language not known: base detects it on the same encoding. A decode
        that looks unlikely (mean log-probability below SPOT_MIN_LOGPROB) hears nothing: whisper guessing words
        into a hum or a cut word must not make a phrase up."""
        from faster_whisper.tokenizer import Tokenizer

        detected = False
        encoded = None
        if not language:
            encoded = self._encode(self.base, audio, SPOT_WINDOW_SECONDS)
            if encoded is None:
                return ""
            language, detected = self.detect(encoded[0]), True
        model, _ = self.model_for(language, detected)
        if encoded is None or model is not self.base:
            encoded = self._encode(model, audio, SPOT_WINDOW_SECONDS)
        if encoded is None:
            return ""
        tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language)
        prompt_text = self.prompt(language, ())
        previous = tokenizer.encode(" " + prompt_text.strip()) if prompt_text else []
        prompt = model.get_prompt(tokenizer, previous, without_timestamps=True)
        result = model.model.generate(
            encoded[0],
            [prompt],
            beam_size=1,
            return_scores=True,
            max_length=min(model.max_length, 8 + int(8 * len(audio) / model.feature_extractor.sampling_rate)),
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        if not tokens or avg_logprob < SPOT_MIN_LOGPROB:
            return ""
        return in_script(tokenizer.decode(tokens).strip(), language, self.config.chinese_script)

    def _full_window(
        self, audio: np.ndarray, language: str | None, hints: tuple[str, ...], detected: bool = False
    ) -> FinalText:
        model, _ = self.model_for(language, detected)
        if not language:
            # Detected first (on whisper's first 30 s window) so that the language's prompt applies here too.
            language, probability, _ = model.detect_language(audio)
            log.debug("detected %s (p=%.2f) on the full window", language, probability)
        segments, info = model.transcribe(
            audio,
            language=language,
            beam_size=self.config.beam_size,
            vad_filter=False,  # our VAD already cut the utterance
            condition_on_previous_text=False,
            without_timestamps=True,
            initial_prompt=self.prompt(language, hints),
        )
        segments = list(segments)
        text = " ".join(s.text.strip() for s in segments).strip()
        confidence = float(np.mean([math.exp(s.avg_logprob) for s in segments])) if segments else 0.0
        return FinalText(text=text, confidence=round(confidence, 3), language=info.language or (language or ""))


def draft_budget(service: str, engine: str, config: AsrServiceConfig, default_slots: int = 0) -> InterimBudget:
    """An engine's budget of draft decodes in flight (asr.max_concurrent_drafts; 0: ``default_slots``, else half
    the cores, at least 1: a draft must not hold every core the speculative finals need)."""
    slots = config.max_concurrent_drafts or default_slots or max(1, cpu_cores() // 2)
    return InterimBudget(service, engine, slots, skipped=metrics.ASR_DRAFTS_SKIPPED)


def spotting(service: str, engine: str, config: AsrServiceConfig, default_slots: int = 0) -> Spotting:
    """An engine's spotting settings (asr.spot_*); its budget of utterances spotting at once (0 in the config:
    ``default_slots``, else 1 per core)."""
    slots = config.max_concurrent_spotting or default_slots or cpu_cores()
    return Spotting(
        config.spot_first_ms,
        config.spot_interval_ms,
        config.spot_window_ms,
        InterimBudget(service, engine, slots, skipped=metrics.ASR_SPOTTING_SKIPPED),
    )


def check_turn_model(config: AsrServiceConfig, needs_it: str) -> None:
    """At start, for a service whose configured default needs semantic endpointing (moss_sts's conversations): the
    turn model's file must be there; else exit naming the package (services/engines/asr/turn_model.py)."""
    from services.engines.asr.turn_model import TurnModelMissing, turn_model_path

    try:
        turn_model_path(config.turn_model_path)
    except TurnModelMissing as e:
        raise SystemExit(f"{needs_it}, but {e}") from None


class CpuAsrEngine(AsrEngine):
    name = "whisper-2pass"

    def __init__(self, service: str, config: AsrServiceConfig):
        self.service = service
        self.config = config
        self.interim_interval_ms = config.interim_interval_ms
        self.speculative_final_ms = config.speculative_final_ms
        self.turn = TurnSupport(service, config)  # semantic endpointing: the turn model, when its wheel is there
        self.vad: SileroVad | None = None
        self.final = WhisperFinals(config)
        self.interim_budget = InterimBudget(service, self.name, config.max_concurrent_interims or 4 * cpu_cores())
        self.partials = PocketsphinxPool(limit=self.interim_budget.slots)
        self.spotting = spotting(service, self.name, config)
        self.finals_in_flight = FinalsInFlight()
        self.draft_budget = draft_budget(service, self.name, config)
        # VAD + pass 1 of every stream (short steps), and pass 2 (whisper decodes) on their own threads.
        self.stream_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="asr-stream")
        self.final_pool = ThreadPoolExecutor(max_workers=config.final_workers, thread_name_prefix="asr-final")
        self._ready = False

    @property
    def served_by(self) -> str:
        return f"{self.service}/{self.name}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        # Warm up: a pass-1 decoder per core (at most one per interim slot). Making one loads its models (~0.3-0.5 s)
        # and blocks the pass-1 process meanwhile: made on demand at a stream's start, the first burst of callers
        # waited for them, and a stream sending faster than real time fell behind enough to miss the pause after it
        # (tests/fleet/test_conversation_fleet.py test_ten_minute_monologue...). Each holds its own copy of
        # pocketsphinx's models, ~90 MB (PSS 103 MB for one, 719 for eight, 2026-11-29,
        # bench/results/memory-2026-11-29/): warming one per interim slot (8 on 2 cores) was most of the asr's
        # memory. More are made ahead, while the pass-1 process is idle, as utterances take them (PocketsphinxPool).
        # Made in the pass-1 process, so while this process loads its own models.
        warm = min(self.interim_budget.slots, cpu_cores())
        partials = loop.run_in_executor(self.stream_pool, self.partials.warm, warm)
        try:
            self.vad = await loop.run_in_executor(self.stream_pool, SileroVad, self.service)
            await loop.run_in_executor(self.stream_pool, self.turn.load)  # refuses to start when the default needs it
            await loop.run_in_executor(self.final_pool, self.final.load)
            # One decode per whisper model.
            noise = (np.random.default_rng(0).normal(0, 0.01, RATE)).astype(np.float32)
            await loop.run_in_executor(self.final_pool, self.final.warm, noise)
        finally:
            await partials
        self._ready = True
        log.info("asr CPU engine ready in %.2fs (silero %s)", time.monotonic() - t0, self.vad.path.name)

    async def close(self) -> None:
        self.stream_pool.shutdown(wait=False, cancel_futures=True)
        self.final_pool.shutdown(wait=False, cancel_futures=True)
        self.partials.close()

    def check_options(self, options: RecognitionOptions) -> None:
        whisper_language(options.language)
        self.turn.check(options.endpointing)

    async def open_stream(self, options: RecognitionOptions) -> AsrStream:
        if not self._ready:
            raise FailedPrecondition("asr is still loading its models; retry when the service reports SERVING")
        language = whisper_language(options.language)
        # Pass 1 is English pocketsphinx: used for English and for auto-detect (until another language is heard).
        partial = None
        if options.interim_results and language in (None, "en"):
            partial = PocketsphinxPartial(self.partials)
        return TwoPassStream(self, options, language, partial)
