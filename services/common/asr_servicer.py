"""The Recognizer servicer: validate, resample to the engine's rate, enforce the stream limits, relay events.

One class serves the asr service (a local engine) and the router (a remote engine that passes the stream on).
Limits (docs/asr.md): a message over ``max_message_bytes`` is refused by gRPC itself (RESOURCE_EXHAUSTED); no message
for ``idle_timeout_seconds`` -> DEADLINE_EXCEEDED; more than ``max_stream_seconds`` of audio -> RESOURCE_EXHAUSTED;
an utterance reaching max_utterance_ms gets its final there (not an error); more than ``max_concurrent_streams``
at once -> RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass

from services.common import audio
from services.common.convert.asr import endpointing_values, event_fields
from services.common.endpointing import BadSetting, from_config, resolve
from services.common.engines import AsrEngine, Endpointing, RecognitionOptions
from services.common.errors import DeadlineExceeded, InvalidArgument, ResourceExhausted
from services.common.rpc import TAKEN_METADATA, request_id
from services.common.scheduler import Admission, cpu_cores
from services.common.text import spoken_words
from voice.v1 import recognizer_pb2, recognizer_pb2_grpc

MAX_HINTS = 100
MAX_HINT_CHARS = 1000
# RecognitionConfig.spot_phrases: as many and as long as a conversation's barge-in stop words may be.
MAX_SPOT_PHRASES = 100
MAX_SPOT_PHRASE_CHARS = 64
# RecognitionConfig.draft_interval_ms: 0 (off) or this range; a draft more often than 200 ms would mostly repeat one.
DRAFT_INTERVAL_MS = (200, 10_000)
# Audio handed to the engine per step when a whole recording comes in one Recognize request.
RECOGNIZE_PIECE_S = 1.0


@dataclass(frozen=True)
class AsrLimits:
    idle_timeout_s: float = 10.0
    max_stream_s: float = 3600.0
    max_concurrent_streams: int = 16
    defaults: Endpointing = Endpointing()

    @classmethod
    def from_config(cls, section, in_front: bool = False) -> AsrLimits:
        """Limits from the asr section. ``in_front`` (the router): a capacity left at 0 is the asr service's to work
        out from its own cores, so the router does not cap streams and passes the service's refusal on."""
        capacity = section.max_concurrent_streams or (MAX_STREAMS if in_front else streams_per_core(section.engine))
        defaults = endpointing_defaults(section.endpointing)
        if in_front:
            # Unspecified stays so: the backend resolves it.
            defaults = dataclasses.replace(defaults, mode="", text_check="", non_final_words=())
        return cls(
            idle_timeout_s=section.idle_timeout_seconds,
            max_stream_s=section.max_stream_seconds,
            max_concurrent_streams=capacity,
            defaults=defaults,
        )


# CPU engine capacity per core, measured (docs/asr.md#capacity): on 2 cores 12 streams kept speech end -> final p95
# under 1.5 s without interims and 8 with an interim for every utterance (2026-11-25; a slower day of the same VM
# kind: 10 and 6). Past the interim budget (4 per core) a stream gets finals only, so 5 per core keeps every
# admitted stream's finals in time. GPU engines: a fixed default, until a card's bench says otherwise.
CPU_STREAMS_PER_CORE = 5
GPU_STREAMS = 16
MAX_STREAMS = 1000  # the most asr.max_concurrent_streams may say


def streams_per_core(engine: str) -> int:
    """The default ``max_concurrent_streams`` (0 in the config) for an engine on this machine."""
    return CPU_STREAMS_PER_CORE * cpu_cores() if engine == "cpu" else GPU_STREAMS


def endpointing_defaults(section) -> Endpointing:
    """An endpointing config section (config.base.endpointing_section) as the defaults of a stream's fields."""
    return from_config(section)


class RecognizerServicer(recognizer_pb2_grpc.RecognizerServicer):
    def __init__(self, service: str, engine: AsrEngine, limits: AsrLimits, default_deadline_s: float | None = None):
        self.service = service
        self.engine = engine
        self.limits = limits
        self.default_deadline_s = default_deadline_s
        self._admission = Admission(service, limits.max_concurrent_streams, 0, field="asr.max_concurrent_streams")

    # --- StreamingRecognize -----------------------------------------------------------------------------------
    async def StreamingRecognize(self, request_iterator, context):
        requests = aiter(request_iterator)
        first = await self._next(requests)
        if first is None:
            raise InvalidArgument("config", "the stream ended before any message; send a config message first")
        payload = first.WhichOneof("payload")
        if payload == "audio":
            raise InvalidArgument("config", "audio came before the config; the first message must carry config")
        if payload != "config":
            raise InvalidArgument("config", "the first message must carry config (input_format, language, ...)")
        options, fmt = self._options(first.config, context)
        with self._admission.stream():  # a slot, or RESOURCE_EXHAUSTED at once
            stream = await self.engine.open_stream(options)
            pump = asyncio.create_task(self._pump(requests, stream, fmt, options.sample_rate_hz))
            try:
                # Taken: a fleet client waits for this before it sends audio (services/remote/base.py, accepted()).
                await context.send_initial_metadata(TAKEN_METADATA)
                async for event in stream.events():
                    yield recognizer_pb2.StreamingRecognizeResponse(
                        request_id=options.request_id, **event_fields(event)
                    )
                await pump  # its error (bad message, idle timeout, ...) is the call's status
            finally:
                pump.cancel()
                await stream.close()
                with contextlib.suppress(BaseException):
                    await pump

    async def _next(self, requests):
        return await next_or_idle(requests, self.limits.idle_timeout_s, "asr.idle_timeout_seconds")

    async def _pump(self, requests, stream, fmt: audio.PcmFormat, engine_rate: int) -> None:
        resampler = audio.StreamResampler(fmt.sample_rate_hz, engine_rate)
        seconds = 0.0
        try:
            while True:
                message = await self._next(requests)
                if message is None:
                    break
                payload = message.WhichOneof("payload")
                if payload == "config":
                    raise InvalidArgument("config", "was sent twice; send it only in the first message, then audio")
                if payload == "spotting":
                    await stream.pause_spotting(message.spotting.paused)
                    continue
                if payload != "audio":
                    raise InvalidArgument("audio", "a message after the config must carry audio (or spotting)")
                audio.check_pcm("audio", message.audio)
                seconds += fmt.duration_s(message.audio)
                if seconds > self.limits.max_stream_s:
                    raise ResourceExhausted(
                        f"audio: the stream passed {self.limits.max_stream_s:g} s of audio (asr.max_stream_seconds);"
                        " open a new stream to go on"
                    )
                pcm = resampler.feed(message.audio)
                if pcm:
                    await stream.feed(pcm)
            tail = resampler.feed(b"", last=True)
            if tail:
                await stream.feed(tail)
            await stream.finish()
        except BaseException:
            await stream.close()  # ends stream.events(); the handler then raises this error
            raise

    # --- Recognize --------------------------------------------------------------------------------------------
    async def Recognize(self, request, context):
        if not request.HasField("config"):
            raise InvalidArgument("config", "is required (input_format at least)")
        options, fmt = self._options(request.config, context)
        audio.check_pcm("audio", request.audio)
        if not request.audio:
            raise InvalidArgument("audio", "is empty; send the recording (s16le mono in config.input_format)")
        pcm = audio.resample(request.audio, fmt.sample_rate_hz, options.sample_rate_hz)
        with self._admission.stream():  # a slot, or RESOURCE_EXHAUSTED at once
            stream = await self.engine.open_stream(options)
            pump = asyncio.create_task(self._feed_all(stream, pcm, options.sample_rate_hz))
            try:
                async for event in stream.events():
                    yield recognizer_pb2.RecognizeResponse(request_id=options.request_id, **event_fields(event))
                await pump
            finally:
                pump.cancel()
                await stream.close()
                with contextlib.suppress(BaseException):
                    await pump

    @staticmethod
    async def _feed_all(stream, pcm: bytes, rate: int) -> None:
        try:
            for piece in audio.split_pcm(pcm, int(rate * RECOGNIZE_PIECE_S) * audio.BYTES_PER_SAMPLE):
                await stream.feed(piece)
            await stream.finish()
        except BaseException:
            await stream.close()
            raise

    # --- shared -----------------------------------------------------------------------------------------------
    def _options(self, config, context) -> tuple[RecognitionOptions, audio.PcmFormat]:
        fmt = audio.input_format("config.input_format", config.input_format)
        endpointing = endpointing_from_config(config.endpointing, self.limits.defaults)
        hints = tuple(h.strip() for h in config.phrase_hints)
        if len(hints) > MAX_HINTS or sum(len(h) for h in hints) > MAX_HINT_CHARS:
            raise InvalidArgument(
                "config.phrase_hints", f"at most {MAX_HINTS} phrases and {MAX_HINT_CHARS} characters in all"
            )
        if any(not h for h in hints):
            raise InvalidArgument("config.phrase_hints", "has an empty phrase; remove it")
        remaining = context.time_remaining()
        options = RecognitionOptions(
            language=config.language,
            interim_results=config.interim_results,
            endpointing=endpointing,
            phrase_hints=hints,
            spot_phrases=spot_phrases(config.spot_phrases),
            draft_interval_ms=draft_interval(config.draft_interval_ms),
            sample_rate_hz=self.engine.native_sample_rate or fmt.sample_rate_hz,
            request_id=request_id(),
            time_remaining=remaining if remaining is not None else self.default_deadline_s,
        )
        self.engine.check_options(options)
        return options, fmt


def draft_interval(value: int) -> int:
    low, high = DRAFT_INTERVAL_MS
    if value and not low <= value <= high:
        raise InvalidArgument("config.draft_interval_ms", f"{value} must be 0 (no drafts) or {low}..{high}")
    return value


def spot_phrases(phrases) -> tuple[str, ...]:
    """RecognitionConfig.spot_phrases checked: at most MAX_SPOT_PHRASES, each a word or phrase (something left after
    normalising: lower case, punctuation dropped) of at most MAX_SPOT_PHRASE_CHARS characters."""
    if len(phrases) > MAX_SPOT_PHRASES:
        raise InvalidArgument("config.spot_phrases", f"{len(phrases)} phrases; at most {MAX_SPOT_PHRASES}")
    for i, phrase in enumerate(phrases):
        if len(phrase) > MAX_SPOT_PHRASE_CHARS or not spoken_words(phrase):
            raise InvalidArgument(
                f"config.spot_phrases[{i}]",
                f"{phrase[:80]!r} must be a word or phrase of 1..{MAX_SPOT_PHRASE_CHARS} characters",
            )
    return tuple(phrase.strip() for phrase in phrases)


def endpointing_from_config(e, d: Endpointing) -> Endpointing:
    """A request's EndpointingConfig checked against this server's defaults/limits ``d`` (0 fields take defaults):
    the bounds of services/common/endpointing.py's SETTINGS, INVALID_ARGUMENT naming the field refused.

    One place for the rules, shared by Recognizer and Conversation configs."""
    try:
        return resolve(endpointing_values(e), d)
    except BadSetting as bad:
        raise InvalidArgument(f"config.endpointing.{bad.name}", bad.message) from None


async def next_or_idle(requests, idle_timeout_s: float, setting: str):
    """The next client message, None at the end of the stream, DEADLINE_EXCEEDED after ``idle_timeout_s`` of
    silence from the client (``setting`` names the config field). Shared by Recognizer and Conversation streams."""
    try:
        return await asyncio.wait_for(anext(requests), idle_timeout_s)
    except StopAsyncIteration:
        return None
    except TimeoutError:
        raise DeadlineExceeded(
            f"audio: no message for {idle_timeout_s:g} s ({setting}); send audio"
            " continuously (silence counts) or close the stream"
        ) from None
