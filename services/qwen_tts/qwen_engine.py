"""GPU engine of qwen_tts (simple): the official ``qwen-tts`` package in process, one sentence per call.

``Qwen3TTSModel.from_pretrained(model_dir, device_map=..., dtype=...)`` loads a CustomVoice checkpoint from the
mounted directory (its ``speech_tokenizer/`` and ``generation_config.json`` included; nothing is downloaded:
HF_HUB_OFFLINE is set). ``generate_custom_voice(text, speaker, language)`` returns whole waveforms (24 kHz) - the
package has no streaming output - so this engine streams at sentence granularity: the text is cut into segments
(a long first sentence at its first clause, for earlier first audio) and each segment is one engine step. A
cancelled stream finishes the step in flight (the GPU call cannot be interrupted) and starts no other.

Residency (docs/leases.md): ``offload()`` moves the talker model and the speech tokenizer's codec model (a plain
attribute of the model, not a registered submodule, so it is named on its own) to pinned host memory and empties
the CUDA cache; ``reload()`` moves them back (services/residency/torch_offload.py). Both run on the engine's one
model thread, after any generate call in flight. What stays on the card: the CUDA context (outside every
allocator) and nothing of the model.

Voices and languages come from the checkpoint itself (``get_supported_speakers`` / ``get_supported_languages``),
so a 1.7B or a fine-tuned checkpoint lists what it really has.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from services.common import metrics
from services.common.config.base import ChunkingConfig
from services.common.config.qwen_tts import QwenGpuConfig
from services.common.engines import AudioPiece, Offloadable, SynthesisOptions, TtsEngine, VoiceInfo
from services.common.errors import FailedPrecondition
from services.common.scheduler import Playback, SegmentScheduler
from services.common.text import FirstSegment, speech_segments
from services.common.voices import unknown_voice
from services.engines import qwen_presets as presets
from services.qwen_tts.vllm_omni_engine import check_rate, qwen_language_name, qwen_voice_info

log = logging.getLogger("voicefleet.qwen_tts.qwen")


class QwenTtsEngine(TtsEngine, Offloadable):
    name = "qwen_tts"

    def __init__(
        self,
        service: str,
        chunking: ChunkingConfig,
        gpu: QwenGpuConfig,
        margin_ms: int = 300,
        memory_budget_bytes: int = 0,
    ):
        """``memory_budget_bytes``: the lease's bytes, the cap of this process's CUDA allocator (docs/leases.md)."""
        self.service = service
        self.memory_budget_bytes = memory_budget_bytes
        self.chunking = chunking
        self.first_segment = chunking.first_segment()  # streaming text cuts its first segment early too
        self.config = gpu
        # One GPU worker: generate calls run one after another (the model is not re-entrant); the scheduler picks
        # which segment goes next (a new stream's first before a running stream's next, docs/scheduling.md).
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qwen-tts")
        self.scheduler = SegmentScheduler(service, self.name, workers=1, margin_s=margin_ms / 1000)
        self._model = None
        self._offload = None  # HostOffload over the model's modules, made at load
        self._rate = 24000
        self._voices: list[VoiceInfo] = []
        self._steps = metrics.ENGINE_STEPS.labels(service, self.name)
        self._audio_seconds = metrics.TTS_AUDIO_SECONDS.labels(service, self.name)
        self._cancel_to_stop = metrics.TTS_CANCEL_TO_STOP.labels(service, self.name)

    @property
    def native_sample_rate(self) -> int:
        return self._rate

    @property
    def device(self) -> str:
        return self.config.device

    def resident_bytes(self) -> int:
        """Measured: 0 while offloaded; the CUDA allocator's reserved bytes on a card, the tensors' bytes on CPU."""
        if self._offload is None:
            return 0
        return self._offload.resident_bytes()

    @staticmethod
    def model_modules(model) -> list:
        """What holds the weights: the talker model and the speech tokenizer's codec (qwen_tts.inference:
        ``Qwen3TTSModel.model``; ``model.speech_tokenizer`` is a ``Qwen3TTSTokenizer`` whose ``.model`` is the codec)."""
        modules = [model.model]
        codec = getattr(getattr(model.model, "speech_tokenizer", None), "model", None)
        if codec is not None:
            modules.append(codec)
        return modules

    async def offload(self) -> None:
        """Weights to pinned host memory, the CUDA cache emptied (the residency calls this on revoke)."""
        if self._offload is None:
            return
        moved = await asyncio.get_running_loop().run_in_executor(self._executor, self._offload.offload)
        log.info("qwen-tts offloaded: %s", moved.line())

    async def reload(self) -> None:
        if self._offload is None:
            raise FailedPrecondition("qwen-tts: reload before the model was ever loaded (start() loads it)")
        moved = await asyncio.get_running_loop().run_in_executor(self._executor, self._offload.reload)
        log.info("qwen-tts reloaded: %s", moved.line())

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        self._model = await loop.run_in_executor(self._executor, self._load)
        from services.residency.torch_offload import HostOffload

        self._offload = HostOffload(self.model_modules(self._model))
        speakers = [str(s) for s in (self._model.get_supported_speakers() or [])]
        if not speakers:
            raise FailedPrecondition(
                f"qwen_tts.gpu.model_dir: {self.config.model_dir} is not a CustomVoice checkpoint (no preset speakers)"
            )
        supported = {str(lang).lower() for lang in (self._model.get_supported_languages() or [])}
        infos = []
        for speaker in speakers:
            info = qwen_voice_info(self.service, self.name, speaker, " (qwen-tts, sentence by sentence)")
            p = presets.preset(speaker)
            langs = presets.languages_for(p) if p else presets.LANGUAGES
            spoken = [lang for lang in langs if lang.name.lower() in supported] if supported else list(langs)
            infos.append(
                dataclasses.replace(info, languages=tuple(t for lang in spoken for t in lang.tags)) if spoken else info
            )
        order = {p.id: i for i, p in enumerate(presets.PRESETS)}
        self._voices = sorted(infos, key=lambda v: order.get(v.id, len(order)))
        await loop.run_in_executor(
            self._executor, self._generate, "Warm up.", self._voices[0].id, "English", self.config.default_seed
        )
        log.info(
            "qwen-tts %s loaded on %s with speakers %s in %.1fs",
            self.config.model_dir,
            self.config.device,
            ", ".join(v.id for v in self._voices),
            time.monotonic() - t0,
        )

    def _load(self):
        model_dir = Path(self.config.model_dir)
        if not (model_dir / "config.json").exists():
            raise FailedPrecondition(
                f"qwen_tts.gpu.model_dir: {model_dir} holds no Qwen3-TTS checkpoint (config.json missing);"
                " mount the weights there"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from qwen_tts import Qwen3TTSModel

        if self.config.device.startswith("cuda"):
            from services.residency.gpu_host import cap_torch_process

            cap_torch_process(torch, "qwen_tts", self.config.device, self.memory_budget_bytes)
        dtype = getattr(torch, self.config.dtype)
        return Qwen3TTSModel.from_pretrained(str(model_dir), device_map=self.config.device, dtype=dtype)

    def _generate(self, text: str, speaker: str, language: str, seed: int) -> tuple[bytes, int]:
        import numpy as np
        import torch

        from services.common import audio

        torch.manual_seed(seed)  # sampling (do_sample) is seeded: same request, same audio
        wavs, rate = self._model.generate_custom_voice(text=text, speaker=speaker, language=language)
        self._rate = int(rate)
        return audio.to_int16(np.asarray(wavs[0], dtype=np.float32)).tobytes(), int(rate)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._model = self._offload = None

    async def voices(self) -> list[VoiceInfo]:
        if not self._voices:
            raise FailedPrecondition("qwen-tts engine is still loading; retry when the service reports SERVING")
        return list(self._voices)

    def _step_done_after_cancel(self, cancelled_at: float, _future) -> None:
        self._steps.inc()
        self._cancel_to_stop.observe(time.monotonic() - cancelled_at)

    def synthesize(self, text: str, options: SynthesisOptions) -> AsyncIterator[AudioPiece]:
        return self._speak(text, options, self.scheduler.playback(), self.first_segment)

    def _text_stream_speaker(self):
        # Streaming text: the segmenter already cut the first segment early (self.first_segment); the segments it
        # hands over are spoken as whole sentences.
        return functools.partial(self._speak, playback=self.scheduler.playback(), first_segment=None)

    async def _speak(
        self, text: str, options: SynthesisOptions, playback: Playback, first_segment: FirstSegment | None
    ) -> AsyncIterator[AudioPiece]:
        info = next((v for v in self._voices if v.id.lower() == (options.voice or self._voices[0].id).lower()), None)
        if info is None:
            raise unknown_voice(options.voice, (v.id for v in self._voices), self.served_by, service=self.service)
        language = qwen_language_name(info, options.language)
        check_rate(self.served_by, options.speaking_rate)
        seed = options.seed or self.config.default_seed
        loop = asyncio.get_running_loop()
        for start, end in speech_segments(text, first_segment):
            async with playback.turn():
                future = loop.run_in_executor(self._executor, self._generate, text[start:end], info.id, language, seed)
                try:
                    pcm, rate = await asyncio.shield(future)
                except (asyncio.CancelledError, GeneratorExit):
                    future.add_done_callback(functools.partial(self._step_done_after_cancel, time.monotonic()))
                    raise
            playback.produced(len(pcm) / 2 / rate)
            self._steps.inc()
            self._audio_seconds.inc(len(pcm) / 2 / rate)
            try:
                yield AudioPiece(pcm=pcm, sample_rate_hz=rate, text_start=start, text_end=end, served_by=self.served_by)
            except GeneratorExit:
                self._cancel_to_stop.observe(0.0)
                raise
