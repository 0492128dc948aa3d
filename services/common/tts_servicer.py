"""The Synthesizer servicer: validate, pick an engine, stream its audio in the caller's format, count everything.

One class serves every TTS-capable process. What differs is the ``EngineResolver``: a model service resolves to
its local engine; the router resolves to a remote engine by engine name, voice or mode (services/router/policy.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from typing import Protocol

from services.common import audio, metrics
from services.common.engines import AudioPiece, Routing, SynthesisOptions, TtsEngine, VoiceInfo
from services.common.errors import InvalidArgument, NotFound
from services.common.rpc import new_request_id, rpc
from voice.v1 import audio_pb2, synthesizer_pb2, synthesizer_pb2_grpc

VOICE_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MIN_PROMPT_S, MAX_PROMPT_S = 3.0, 30.0


class EngineResolver(Protocol):
    async def resolve(
        self, voice: str, language: str, routing: Routing, time_remaining: float | None
    ) -> tuple[TtsEngine, VoiceInfo]:
        """The engine and voice for a request; raises NotFound / InvalidArgument / Unavailable."""

    async def voices(self, service: str) -> list[VoiceInfo]:
        """Every voice this process can reach (``service`` filters, router only)."""

    def engine_for_registration(self, routing: Routing) -> TtsEngine: ...


class LocalEngineResolver:
    """A model service: one engine, voices checked locally."""

    def __init__(self, engine: TtsEngine):
        self.engine = engine

    async def resolve(
        self, voice: str, language: str, routing: Routing, time_remaining: float | None
    ) -> tuple[TtsEngine, VoiceInfo]:
        voices = await self.engine.voices()
        return self.engine, pick_voice(voices, voice, language, where=self.engine.service)

    async def voices(self, service: str) -> list[VoiceInfo]:
        return await self.engine.voices()

    def engine_for_registration(self, routing: Routing) -> TtsEngine:
        return self.engine


def pick_voice(voices: list[VoiceInfo], voice: str, language: str, where: str) -> VoiceInfo:
    """The requested voice (or the default, the first one), checked to speak ``language``."""
    if not voices:
        raise NotFound(f"{where} has no voices loaded")
    if voice:
        found = next((v for v in voices if v.id == voice), None)
        if found is None:
            known = ", ".join(v.id for v in voices[:20])
            raise NotFound(f"config.voice: {voice!r} is not a voice of {where}; ListVoices shows: {known}")
    else:
        found = voices[0]
    if language and not found.speaks(language):
        raise InvalidArgument(
            "config.language",
            f"voice {found.id!r} does not speak {language!r}; it speaks {', '.join(found.languages)}",
        )
    return found


def routing_from_proto(r) -> Routing:
    return Routing(mode=r.mode, engine=r.engine, latency_budget_ms=r.latency_budget_ms)


def voice_to_proto(v: VoiceInfo) -> synthesizer_pb2.Voice:
    return synthesizer_pb2.Voice(
        id=v.id,
        display_name=v.display_name,
        languages=list(v.languages),
        native_sample_rate_hz=v.native_sample_rate_hz,
        service=v.service,
        engine=v.engine,
        kind=synthesizer_pb2.VOICE_KIND_CLONED if v.cloned else synthesizer_pb2.VOICE_KIND_PRESET,
        description=v.description,
    )


class SynthesizerServicer(synthesizer_pb2_grpc.SynthesizerServicer):
    def __init__(
        self,
        service: str,
        resolver: EngineResolver,
        max_text_chars: int,
        max_chunk_ms: int | None = None,
        max_concurrent: int | None = None,
        default_deadline_s: float | None = None,
    ):
        self.service = service
        self.resolver = resolver
        self.max_text_chars = max_text_chars
        # None: pass engine pieces on as they come (the router: backends already chunked them).
        self.max_chunk_ms = max_chunk_ms
        self._slots = asyncio.Semaphore(max_concurrent) if max_concurrent else None
        self.default_deadline_s = default_deadline_s

    # --- Synthesize -------------------------------------------------------------------------------------------
    async def Synthesize(self, request, context):
        received = time.monotonic()
        request_id = request.request_id or new_request_id()
        self._check_text("text", request.text)
        options, fmt, engine = await self._prepare(request.config, request_id, context)
        async for chunk, span, served_by in self._stream(engine, request.text, options, fmt, received, "Synthesize"):
            yield synthesizer_pb2.SynthesizeResponse(
                request_id=request_id, audio=chunk, text_span=span, served_by=served_by
            )

    async def ListVoices(self, request, context):
        voices = await self.resolver.voices(request.service)
        if request.language:
            voices = [v for v in voices if v.speaks(request.language)]
        if request.service:
            voices = [v for v in voices if v.service == request.service]
        return synthesizer_pb2.ListVoicesResponse(
            request_id=request.request_id or new_request_id(), voices=[voice_to_proto(v) for v in voices]
        )

    async def RegisterVoice(self, request, context):
        if not VOICE_ID_RE.match(request.voice_id):
            raise InvalidArgument("voice_id", "must be 1..64 characters of A-Z a-z 0-9 _ . -")
        if not request.prompt_transcript.strip():
            raise InvalidArgument("prompt_transcript", "is empty; give the exact words spoken in prompt_audio")
        fmt = audio.input_format("prompt_format", request.prompt_format)
        audio.check_pcm("prompt_audio", request.prompt_audio)
        seconds = fmt.duration_s(request.prompt_audio)
        if not MIN_PROMPT_S <= seconds <= MAX_PROMPT_S:
            raise InvalidArgument(
                "prompt_audio", f"is {seconds:.1f} s long; give {MIN_PROMPT_S:.0f}..{MAX_PROMPT_S:.0f} s of speech"
            )
        engine = self.resolver.engine_for_registration(routing_from_proto(request.routing))
        voice = await engine.register_voice(
            request.voice_id, request.prompt_audio, fmt.sample_rate_hz, request.prompt_transcript, request.language
        )
        return synthesizer_pb2.RegisterVoiceResponse(
            request_id=request.request_id or new_request_id(), voice=voice_to_proto(voice)
        )

    # --- shared by Synthesize and StreamingSynthesize ---------------------------------------------------------
    def _check_text(self, field: str, text: str) -> None:
        if not text.strip():
            raise InvalidArgument(field, "is empty or only whitespace; send at least one word")
        if len(text) > self.max_text_chars:
            raise InvalidArgument(
                field,
                f"{len(text)} characters is over the limit of {self.max_text_chars};"
                " split it into several requests or stream it with StreamingSynthesize",
            )

    async def _prepare(self, config, request_id: str, context) -> tuple[SynthesisOptions, audio.PcmFormat, TtsEngine]:
        fmt_in = config.output_format
        if fmt_in.sample_rate_hz:  # range first: a bad rate is a bad request whatever the voice
            audio.check_rate("config.output_format.sample_rate_hz", fmt_in.sample_rate_hz)
        rate = config.speaking_rate or 1.0
        if not 0.5 <= rate <= 2.0:
            raise InvalidArgument("config.speaking_rate", f"{config.speaking_rate} is outside 0.5..2.0 (0 means 1.0)")
        routing = routing_from_proto(config.routing)
        remaining = context.time_remaining()
        if remaining is None:
            remaining = self.default_deadline_s
        engine, voice = await self.resolver.resolve(config.voice, config.language, routing, remaining)
        fmt = audio.output_format("config.output_format", fmt_in, voice.native_sample_rate_hz)
        options = SynthesisOptions(
            voice=voice.id,
            language=config.language or voice.languages[0],
            speaking_rate=rate,
            seed=config.seed,
            sample_rate_hz=fmt.sample_rate_hz,
            request_id=request_id,
            routing=routing,
            time_remaining=remaining,
        )
        return options, fmt, engine

    async def _stream(
        self,
        engine: TtsEngine,
        text: str,
        options: SynthesisOptions,
        fmt: audio.PcmFormat,
        received: float,
        method: str,
    ) -> AsyncIterator[tuple[audio_pb2.AudioChunk, audio_pb2.TextSpan, str]]:
        labels = (self.service, engine.served_by if self.service != engine.service else engine.name)
        async with self._slot(labels):
            started = time.monotonic()
            resampler: audio.StreamResampler | None = None
            max_bytes = fmt.bytes_for_ms(self.max_chunk_ms) if self.max_chunk_ms else None
            samples_sent = sequence = 0
            first = True
            span = audio_pb2.TextSpan()
            served_by = engine.served_by
            pieces = engine.synthesize(text, options)
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    piece: AudioPiece
                    if first:
                        metrics.TTS_ENGINE_FIRST_CHUNK.labels(*labels).observe(time.monotonic() - started)
                    if resampler is None or resampler.src_rate != piece.sample_rate_hz:
                        resampler = audio.StreamResampler(piece.sample_rate_hz, fmt.sample_rate_hz)
                    pcm = resampler.feed(piece.pcm)
                    span = audio_pb2.TextSpan(start_char=piece.text_start, end_char=piece.text_end)
                    served_by = piece.served_by
                    for part in audio.split_pcm(pcm, max_bytes) if max_bytes else ([pcm] if pcm else []):
                        yield self._chunk(part, fmt, samples_sent, sequence), span, served_by
                        if first:
                            metrics.TTS_TTFA.labels(*labels, method).observe(time.monotonic() - received)
                            first = False
                        samples_sent += len(part) // audio.BYTES_PER_SAMPLE
                        sequence += 1
            tail = resampler.feed(b"", last=True) if resampler else b""
            if tail:
                yield self._chunk(tail, fmt, samples_sent, sequence), span, served_by
                samples_sent += len(tail) // audio.BYTES_PER_SAMPLE
            if samples_sent:
                seconds = samples_sent / fmt.sample_rate_hz
                metrics.TTS_RTF.labels(*labels).observe((time.monotonic() - started) / seconds)

    @staticmethod
    def _chunk(pcm: bytes, fmt: audio.PcmFormat, offset: int, sequence: int) -> audio_pb2.AudioChunk:
        return audio_pb2.AudioChunk(format=fmt.to_proto(), data=pcm, offset_samples=offset, sequence=sequence)

    @contextlib.asynccontextmanager
    async def _slot(self, labels):
        if self._slots is None:
            yield
            return
        waited = time.monotonic()
        async with self._slots:
            metrics.QUEUE_WAIT.labels(*labels).observe(time.monotonic() - waited)
            yield


def instrument(servicer: SynthesizerServicer) -> SynthesizerServicer:
    """Wrap the servicer's RPCs with the shared error/metric handling, labelled with its service name."""
    for method in ("Synthesize", "ListVoices", "RegisterVoice"):
        bound = getattr(type(servicer), method)
        setattr(servicer, method, rpc(servicer.service, method)(bound).__get__(servicer))
    return servicer
