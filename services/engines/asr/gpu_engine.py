"""GPU engine of asr: faster-whisper (CTranslate2) on CUDA with a large model from a mounted directory.

Same pipeline as the CPU engine (services/engines/asr/pipeline.py: Silero VAD on CPU, endpointing, two passes), different
passes: pass 2 is the big model (``asr.gpu.model_dir``, e.g. a CTranslate2 conversion of whisper large-v3;
``device="cuda"``, ``compute_type="float16"``, word timestamps); pass 1 re-decodes the utterance so far with the
same model (greedy) every ``asr.gpu.interim_interval_ms`` -- whisper has no incremental decoder, but on a GPU a
re-decode of a few seconds costs tens of ms, and it speaks every language whisper knows, unlike pocketsphinx.
Why faster-whisper and not FunASR: docs/asr.md#gpu-engine.

Heavy imports (faster_whisper, ctranslate2) happen in ``start``. CTranslate2 dlopens CUDA 12's ``libcublas.so.12``
(and no cuDNN); the library comes from NVIDIA's pip wheel (requirements-gpu.txt) and is dlopened here first, so the
image needs no LD_LIBRARY_PATH -- as written: no card has run this yet (scripts/asr_card.py is the prepared run).
Unlike the torch engines, this one does not check the driver at start (services/residency/gpu_host.py): it refuses
with FAILED_PRECONDITION only when CTranslate2 sees no CUDA device. The engine also runs with ``asr.gpu.device: cpu`` (int8), which is
how its code is tested on machines without a GPU (tests/asr/test_asr_engines.py, with the tiny.en model).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import glob
import importlib.util
import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from services.common.config.asr import AsrServiceConfig
from services.common.engines import AsrEngine, AsrStream, Offloadable, RecognitionOptions, WordTiming
from services.common.errors import FailedPrecondition, InvalidArgument
from services.engines.asr.budgets import FinalsInFlight
from services.engines.asr.cpu_engine import (
    REPEATING_COMPRESSION_RATIO,
    draft_budget,
    final_in_script,
    hint_prompt,
    in_script,
    spotting,
    whisper_language,
)
from services.engines.asr.finals import FinalText
from services.engines.asr.pipeline import TwoPassStream
from services.engines.asr.turn_model import TurnSupport
from services.engines.asr.vad import RATE, SileroVad

log = logging.getLogger("voicefleet.asr.gpu")


def preload_cuda_libraries() -> list[str]:
    """dlopen cuBLAS from NVIDIA's wheel (RTLD_GLOBAL) so CTranslate2's dlopen of libcublas.so.12 finds it. cuDNN
    is not loaded: CTranslate2 never uses it (requirements-gpu.txt)."""
    loaded = []
    for package, patterns in (("nvidia.cublas", ("libcublasLt.so*", "libcublas.so*")),):
        try:
            spec = importlib.util.find_spec(package)
        except ModuleNotFoundError:
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        lib_dir = Path(next(iter(spec.submodule_search_locations))) / "lib"
        for pattern in patterns:
            for path in sorted(glob.glob(str(lib_dir / pattern))):
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    loaded.append(os.path.basename(path))
                except OSError as e:
                    log.debug("could not preload %s: %s", path, e)
    return loaded


UNLOAD_WAIT_S = 10.0
# Utterances shorter than whisper's window are decoded as one window (WhisperGpu._one_window), unless the text repeats
# itself as a hallucination does (REPEATING_COMPRESSION_RATIO).
ONE_WINDOW_SAMPLES = 30 * 16000


class ModelGate:
    """Counts decodes in flight on the model, from every pool (finals on the final pool, interim re-decodes on the
    stream pool); ``drain`` closes it and waits for the count to reach zero. CTranslate2's ``unload_model`` does
    nothing while a replica is busy, so an offload that waited on one pool only could leave the weights on the card.
    A decode that arrives while closed waits for ``open`` (the residency layer reloads before it admits streams)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = 0
        self._closed = False

    @contextlib.contextmanager
    def use(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._closed)
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    @property
    def busy(self) -> int:
        return self._busy

    def drain(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._busy == 0)

    def open(self) -> None:
        with self._cond:
            self._closed = False
            self._cond.notify_all()


class WhisperGpu:
    """Both passes on one CTranslate2 Whisper model."""

    def __init__(self, config: AsrServiceConfig):
        self.config = config
        self.gpu = config.gpu
        self.model = None
        self.multilingual = True
        self.gate = ModelGate()

    def load(self) -> None:
        model_dir = Path(self.gpu.model_dir)
        if not (model_dir / "model.bin").is_file():
            raise FailedPrecondition(
                f"asr.gpu.model_dir: {model_dir} has no model.bin; mount a CTranslate2 Whisper model there"
                " (e.g. faster-whisper-large-v3; scripts download it on a machine with internet)"
            )
        if self.gpu.device == "cuda":
            preload_cuda_libraries()
            import ctranslate2

            if ctranslate2.get_cuda_device_count() == 0:
                raise FailedPrecondition("asr.engine: gpu needs a CUDA device, and CTranslate2 sees none")
        from faster_whisper import WhisperModel

        t0 = time.monotonic()
        self.model = WhisperModel(
            str(model_dir),
            device=self.gpu.device,
            device_index=self.gpu.device_index,
            compute_type=self.gpu.compute_type,
            num_workers=self.gpu.num_workers,
            local_files_only=True,
        )
        self.multilingual = self.model.model.is_multilingual
        log.info(
            "whisper %s loaded on %s (%s) in %.1fs",
            model_dir.name,
            self.gpu.device,
            self.gpu.compute_type,
            time.monotonic() - t0,
        )

    def recognize(self, audio: np.ndarray, language: str | None, hints: tuple[str, ...]) -> FinalText:
        with self.gate.use():
            return final_in_script(self._recognize(audio, language, hints), self.config.chinese_script)

    def prompt(self, audio: np.ndarray, language: str | None, hints: tuple[str, ...]) -> tuple[str | None, str | None]:
        """(language, initial prompt): asr.language_prompts applies to a detected language too, so a language not
        given is detected first (faster-whisper's detect_language on the first 30 s window: tens of ms on a GPU)."""
        if not language and self.multilingual:
            language, probability, _ = self.model.detect_language(audio)
            log.debug("detected %s (p=%.2f)", language, probability)
        return language, hint_prompt(hints, self.config.language_prompts.get(language or "", ""))

    def _recognize(self, audio: np.ndarray, language: str | None, hints: tuple[str, ...]) -> FinalText:
        language, prompt = self.prompt(audio, language, hints)
        options = dict(
            language=language,
            beam_size=self.gpu.beam_size,
            vad_filter=False,
            condition_on_previous_text=False,
            word_timestamps=True,
            initial_prompt=prompt,
        )
        decoded = self._one_window(audio, options) if len(audio) < ONE_WINDOW_SAMPLES else None
        if decoded is None:
            segments, info = self.model.transcribe(audio, **options)
            decoded = list(segments), info
        return self._final(*decoded, language)

    def _one_window(self, audio: np.ndarray, options: dict) -> tuple[list, object] | None:
        """An utterance (< 30 s) decoded as one window, or None when that decode repeats itself (then the sequential
        decode with its temperature fallback runs). faster-whisper's sequential ``transcribe`` with word timestamps
        seeks to the last word's end when a window's text does not close with a single timestamp, and decodes what
        is left: the pause after the utterance (PAD_AFTER and the silence before the end of speech). Whisper hears
        text in it ("我认认认论论论…" after a Mandarin prompt), each of the five fallback temperatures fails the
        compression check, and the "no speech" rule drops it at the end: six decodes for nothing, 9–29 s per final
        on the CPU with whisper base (2026-11-28). The batched pipeline decodes the given clip once."""
        from faster_whisper import BatchedInferencePipeline

        segments, info = BatchedInferencePipeline(self.model).transcribe(  # one per call: it keeps per-call state
            audio,
            **options,
            batch_size=1,
            without_timestamps=True,
        )
        segments = list(segments)
        if any(s.compression_ratio > REPEATING_COMPRESSION_RATIO for s in segments):
            log.info("a one-window final repeated itself; decoding it again with the temperature fallback")
            return None
        return segments, info

    def _final(self, segments: list, info, language: str | None) -> FinalText:
        words = tuple(
            WordTiming(w.word.strip(), int(w.start * 1000), int(w.end * 1000), round(float(w.probability), 3))
            for s in segments
            for w in (s.words or ())
        )
        confidence = float(np.mean([math.exp(s.avg_logprob) for s in segments])) if segments else 0.0
        text = " ".join(s.text.strip() for s in segments).strip()
        return FinalText(text, round(confidence, 3), info.language or (language or ""), words)

    def quick(self, audio: np.ndarray, language: str | None) -> str:
        """Pass 1: greedy, no timestamps, the utterance so far."""
        with self.gate.use():
            # No detection pass for interims (it would double their cost): the prompt only when the language is given.
            prompt = hint_prompt((), self.config.language_prompts.get(language or "", ""))
            segments, info = self.model.transcribe(
                audio,
                language=language,
                beam_size=1,
                vad_filter=False,
                condition_on_previous_text=False,
                without_timestamps=True,
                temperature=0.0,
                initial_prompt=prompt,
            )
            text = " ".join(s.text.strip() for s in segments).strip()
            return in_script(text, info.language, self.config.chinese_script)


class WhisperPartial:
    """Pass 1 of one stream on the GPU model: keep the utterance's audio, re-decode it when asked."""

    english_only = False

    def __init__(self, whisper: WhisperGpu, language: str | None):
        self._whisper = whisper
        self._language = language
        self.language = language or ""
        self._chunks: list[np.ndarray] = []

    def start(self) -> None:
        self._chunks = []

    def accept(self, pcm: np.ndarray) -> None:
        if len(pcm):
            self._chunks.append(pcm)

    def hypothesis(self) -> str:
        if not self._chunks:
            return ""
        audio = np.concatenate(self._chunks).astype(np.float32) / 32768.0
        return self._whisper.quick(audio, self._language)

    def end(self) -> None:
        self._chunks = []

    def release(self) -> None:
        self._chunks = []


class GpuAsrEngine(AsrEngine, Offloadable):
    name = "whisper-gpu"

    def __init__(self, service: str, config: AsrServiceConfig):
        self.service = service
        self.config = config
        self.interim_interval_ms = config.gpu.interim_interval_ms
        self.speculative_final_ms = config.speculative_final_ms
        self.turn = TurnSupport(service, config)  # semantic endpointing: the turn model, when its wheel is there
        self.vad: SileroVad | None = None
        self.final = WhisperGpu(config)
        # Spotting decodes are greedy, on a second or so of audio: a few ms on a card; as many as streams by default.
        self.spotting = spotting(service, self.name, config, default_slots=16)
        self.finals_in_flight = FinalsInFlight()
        self.draft_budget = draft_budget(service, self.name, config, default_slots=16)
        self.stream_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="asr-stream")
        self.final_pool = ThreadPoolExecutor(max_workers=config.gpu.num_workers, thread_name_prefix="asr-final")
        self._ready = False

    @property
    def device(self) -> str:
        return self.config.gpu.device

    def resident_bytes(self) -> int:
        if self.final.model is None or self.device != "cuda" or not self.final.model.model.model_is_loaded:
            return 0
        return (Path(self.config.gpu.model_dir) / "model.bin").stat().st_size  # float16 weights, as stored

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.vad = await loop.run_in_executor(self.stream_pool, SileroVad, self.service)
        await loop.run_in_executor(self.stream_pool, self.turn.load)  # refuses to start when the default needs it
        await loop.run_in_executor(self.final_pool, self.final.load)
        noise = np.random.default_rng(0).normal(0, 0.01, RATE).astype(np.float32)
        await loop.run_in_executor(
            self.final_pool, self.final.recognize, noise, None if self.final.multilingual else "en", ()
        )
        self._ready = True

    async def close(self) -> None:
        self.stream_pool.shutdown(wait=False, cancel_futures=True)
        self.final_pool.shutdown(wait=False, cancel_futures=True)

    # Residency (a GPU lease holder; services/residency/model_residency.py): CTranslate2 moves the weights itself.
    # On CUDA, unload_model(to_cpu=True) keeps them in host memory and frees the device's (its CUDA allocator cache
    # with them); load_model() copies them back: no second read from disk. On a CPU device host memory IS the
    # device's, so to_cpu would keep everything (CTranslate2 does nothing): the model is unloaded whole and
    # load_model() reads it again.
    # Decodes still running on either pool (an ended stream's last interim, a speculative final) are drained first:
    # the drain and the unload run on a thread of their own, as a closed gate parks a pool's threads.
    async def offload(self) -> None:
        """Weights off the device (new streams fail until ``reload``; the residency layer waits for live ones)."""
        self._ready = False
        if self.final.model is not None:
            model, to_cpu, gate = self.final.model.model, self.device == "cuda", self.final.gate

            def drain_and_unload() -> None:
                gate.drain()
                # CTranslate2 counts a batch active until its worker thread lets go, a moment after the caller
                # has its result: unload_model returns without unloading until then. Retry for a while.
                deadline = time.monotonic() + UNLOAD_WAIT_S
                while True:
                    model.unload_model(to_cpu=to_cpu)
                    if not model.model_is_loaded:
                        return
                    if time.monotonic() > deadline:
                        raise FailedPrecondition(
                            f"asr: CTranslate2 kept the model loaded {UNLOAD_WAIT_S:.0f}s after its last decode"
                        )
                    time.sleep(0.01)

            await asyncio.to_thread(drain_and_unload)

    async def reload(self) -> None:
        if self.final.model is None:
            await asyncio.get_running_loop().run_in_executor(self.final_pool, self.final.load)
        elif not self.final.model.model.model_is_loaded:
            await asyncio.to_thread(self.final.model.model.load_model)
        self.final.gate.open()
        self._ready = True

    def check_options(self, options: RecognitionOptions) -> None:
        self.turn.check(options.endpointing)
        language = whisper_language(options.language)
        if not self.final.multilingual and language not in (None, "en"):
            raise InvalidArgument("config.language", f"the mounted model ({self.config.gpu.model_dir}) is English-only")

    async def open_stream(self, options: RecognitionOptions) -> AsrStream:
        if not self._ready:
            raise FailedPrecondition("asr is still loading its model; retry when the service reports SERVING")
        language = whisper_language(options.language)
        if language is None and not self.final.multilingual:
            language = "en"
        partial = WhisperPartial(self.final, language) if options.interim_results else None
        return TwoPassStream(self, options, language, partial)
