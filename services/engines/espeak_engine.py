"""CPU engine of qwen_tts: espeak-ng 1.52 (formant synthesis) from the ``espeakng-loader`` wheel, through ctypes.

Voices (listed from espeak's own ``espeak_ListVoices``, nothing invented):
  * every espeak language voice, id = its identifier's last part as ``espeak-ng -v`` takes it: ``en-US``,
    ``cmn`` (Mandarin), ``fr``, ``en`` (British English, espeak's name for it), ... languages = espeak's own tags;
  * Qwen3-TTS's 9 preset ids (Vivian, Ryan, ...) as espeak language voice + variant, see services/engines/qwen_presets.py.

Streaming: text is cut into segments (sentences; a long first sentence at its first clause); each segment is one
``espeak_Synth`` job on the process's espeak thread. espeak calls back every ``callback_ms`` of audio; each
callback is one engine step and is handed to the caller at once. The first piece of a stream is a single callback
(about 60 ms of audio: early first audio); after that, whatever has queued up is sent together, up to
``chunking.max_chunk_ms`` (fewer, larger messages). The next segment is queued only when the caller has taken the
previous one, so a slow reader never makes espeak run far ahead, and other streams get the synthesizer between
segments: the one synthesizer is the single worker of a SegmentScheduler (services/common/scheduler.py), which
gives it to a new stream's first segment before the next sentence of a stream that is ahead of playback.

Cancellation: when the caller stops iterating, the job's cancel flag is set; espeak's next callback returns 1 and
espeak stops (within one callback); a segment still waiting in line never starts.

Determinism: with ``espeak.deterministic`` (the default) the same text, voice, language, rate and seed give
bit-identical PCM on every run, in any order and interleaving with other streams: each segment runs on a freshly
loaded libespeak-ng seeded with the request's seed (0 -> 1). espeak-ng itself is not reproducible across
utterances in one process: it keeps pitch-flutter/phase state in C statics and seeds its noise from the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from services.common import languages, metrics
from services.common.config.base import ChunkingConfig, EspeakConfig
from services.common.engines import AudioPiece, ScheduledTtsEngine, SynthesisOptions, VoiceInfo
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.scheduler import Playback, SegmentScheduler
from services.common.text import FirstSegment, speech_segments
from services.common.voices import unknown_voice
from services.engines import qwen_presets as presets
from services.engines.espeak import DEFAULT_WPM, Espeak, EspeakVoice, SynthJob, bcp47

log = logging.getLogger("voicefleet.qwen_tts.espeak")

_VOICE_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_END = object()


@dataclass(frozen=True)
class _Route:
    """How one of our voice ids is spoken: per language tag, the espeak voice name to load."""

    info: VoiceInfo
    by_language: tuple[tuple[tuple[str, ...], str], ...]  # ((tags), espeak voice name)

    def espeak_voice(self, language: str) -> str:
        if not language:
            return self.by_language[0][1]
        for tags, name in self.by_language:
            if any(languages.matches(language, t) for t in tags):
                return name
        raise InvalidArgument(
            "config.language",
            f"voice {self.info.id!r} does not speak {language!r}; it speaks {', '.join(self.info.languages)}",
        )


class EspeakTtsEngine(ScheduledTtsEngine):
    name = "espeak"

    def __init__(
        self, service: str, chunking: ChunkingConfig, espeak: EspeakConfig | None = None, margin_ms: int = 300
    ):
        self.service = service
        self.chunking = chunking
        self.first_segment = chunking.first_segment()  # streaming text cuts its first segment early too
        self.config = espeak or EspeakConfig()
        self._espeak: Espeak | None = None
        self._routes: dict[str, _Route] = {}
        self._voices: list[VoiceInfo] = []
        self._steps = metrics.ENGINE_STEPS.labels(service, self.name)
        self._audio_seconds = metrics.TTS_AUDIO_SECONDS.labels(service, self.name)
        self._cancel_to_stop = metrics.TTS_CANCEL_TO_STOP.labels(service, self.name)
        # espeak is process-global: one synthesis at a time, so one worker, whatever scheduling.workers says.
        self.scheduler = SegmentScheduler(service, self.name, workers=1, margin_s=margin_ms / 1000)

    @property
    def native_sample_rate(self) -> int:
        return self._espeak.sample_rate if self._espeak else 22050

    @property
    def version(self) -> str:
        return self._espeak.version if self._espeak else ""

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        self._espeak = await loop.run_in_executor(
            Espeak.thread, Espeak.shared, self.config.callback_ms, self.config.deterministic
        )
        voices = await loop.run_in_executor(Espeak.thread, self._espeak.list_voices)
        variants = await loop.run_in_executor(Espeak.thread, self._espeak.list_voices, True)
        self._build_voices(voices, {v.short_id for v in variants})
        default = self.config.default_voice
        if default not in self._routes:
            raise FailedPrecondition(
                f"qwen_tts.espeak.default_voice: {default!r} is not an espeak voice here;"
                f" e.g. {', '.join(list(self._routes)[:12])}"
            )
        # The default voice first: a request with no voice gets it.
        self._voices.sort(key=lambda v: v.id != default)
        async with contextlib.aclosing(self.synthesize("Warm up.", SynthesisOptions(voice=default))) as pieces:
            async for _ in pieces:
                pass
        log.info(
            "espeak-ng %s: %d voices (%d espeak language voices + %d Qwen preset ids), warmed up in %.2fs",
            self.version,
            len(self._voices),
            len(voices),
            len(presets.PRESETS),
            time.monotonic() - t0,
        )

    def _build_voices(self, voices: list[EspeakVoice], variants: set[str]) -> None:
        rate = self.native_sample_rate
        by_short = {}
        for v in voices:
            if not _VOICE_ID_RE.match(v.short_id) or v.short_id in by_short:
                log.warning("skipping espeak voice %r: id %r is not usable or not unique", v.name, v.short_id)
                continue
            by_short[v.short_id] = v
            tags = tuple(dict.fromkeys(bcp47(t) for t in v.languages)) or (bcp47(v.short_id),)
            info = VoiceInfo(
                id=v.short_id,
                display_name=v.name,
                languages=tags,
                native_sample_rate_hz=rate,
                service=self.service,
                engine=self.name,
                description=f"espeak-ng {self.version} voice {v.identifier} (formant synthesis)",
            )
            self._routes[info.id] = _Route(info, ((tags, v.identifier),))
        for p in presets.PRESETS:
            if p.espeak_variant not in variants:
                log.warning("skipping preset %s: espeak has no variant %r", p.id, p.espeak_variant)
                continue
            table = []
            for lang in presets.languages_for(p):
                target = by_short.get(lang.espeak_voice)
                if target is None:
                    continue  # espeak lacks this language: the stand-in does not claim it
                tags = self._routes[target.short_id].info.languages
                table.append((tags, f"{target.identifier}+{p.espeak_variant}"))
            if not table:
                continue
            native = table[0][1].split("+")[0]
            info = VoiceInfo(
                id=p.id,
                display_name=f"{p.id} (CPU stand-in: espeak {native.rsplit('/', 1)[-1]} + variant {p.espeak_variant})",
                languages=tuple(dict.fromkeys(t for tags, _ in table for t in tags)),
                native_sample_rate_hz=rate,
                service=self.service,
                engine=self.name,
                description=(
                    f"Qwen3-TTS preset id; on this CPU engine it is espeak-ng's language voice for the requested"
                    f" language with voice variant {p.espeak_variant}, not Qwen's {p.description}"
                    " (that voice needs qwen_tts.engine: gpu)"
                ),
            )
            self._routes[info.id] = _Route(info, tuple(table))
        self._voices = [r.info for r in self._routes.values()]

    async def close(self) -> None:
        # The espeak thread and library belong to the process (espeak is process-global); nothing to release.
        return None

    async def voices(self) -> list[VoiceInfo]:
        if not self._voices:
            raise FailedPrecondition("espeak engine is still loading; retry when the service reports SERVING")
        return list(self._voices)

    def _route(self, voice: str) -> _Route:
        route = self._routes.get(voice or self.config.default_voice)
        if route is None:
            raise unknown_voice(voice, self._routes, f"{self.service}/{self.name}", service=self.service)
        return route

    async def _speak(
        self, text: str, options: SynthesisOptions, playback: Playback, first_segment: FirstSegment | None
    ) -> AsyncIterator[AudioPiece]:
        if self._espeak is None:
            raise FailedPrecondition("espeak engine is not started")
        espeak_voice = self._route(options.voice).espeak_voice(options.language)
        wpm = round(DEFAULT_WPM * (options.speaking_rate or 1.0))
        rate = self.native_sample_rate
        max_piece = max(2, int(rate * self.chunking.max_chunk_ms / 1000)) * 2
        loop = asyncio.get_running_loop()
        first = True
        for start, end in speech_segments(text, first_segment):
            queue: asyncio.Queue = asyncio.Queue()

            def sink(pcm: bytes, queue=queue) -> None:  # on the espeak thread, once per callback
                self._steps.inc()
                self._audio_seconds.inc(len(pcm) / 2 / rate)
                loop.call_soon_threadsafe(queue.put_nowait, pcm)

            job = SynthJob(text[start:end], espeak_voice, wpm, sink, seed=options.seed or 1)
            turn = await playback.acquire()  # the synthesizer, when this segment is due
            future = loop.run_in_executor(Espeak.thread, self._espeak.run, job)
            future.add_done_callback(lambda _f, queue=queue: queue.put_nowait(_END))
            future.add_done_callback(lambda _f, turn=turn: turn.release())
            try:
                while True:
                    item = await queue.get()
                    if item is _END:
                        break
                    pcm = item
                    if not first:  # after the first piece: send what has queued up, in one piece
                        parts = [pcm]
                        size = len(pcm)
                        while size < max_piece and not queue.empty():
                            nxt = queue.get_nowait()
                            if nxt is _END:
                                queue.put_nowait(_END)
                                break
                            parts.append(nxt)
                            size += len(nxt)
                        pcm = b"".join(parts)
                    first = False
                    playback.produced(len(pcm) / 2 / rate)
                    yield AudioPiece(
                        pcm=pcm, sample_rate_hz=rate, text_start=start, text_end=end, served_by=self.served_by
                    )
                future.result()  # espeak errors surface here
            except (GeneratorExit, asyncio.CancelledError):
                cancelled_at = time.monotonic()
                job.cancelled.set()  # the next callback returns 1; a job still in line never starts
                if future.done():
                    self._cancel_to_stop.observe(0.0)
                else:
                    future.add_done_callback(
                        lambda _f, t=cancelled_at: self._cancel_to_stop.observe(time.monotonic() - t)
                    )
                raise
