"""The Conversation servicer: validate the config, feed the session, relay its events in the caller's format.

One class serves moss_sts (a local STS engine) and the router (a remote engine that passes the session on).
The first message must carry the config; then audio frames and controls in any order. Limits (docs/conversation.md):
no message for ``idle_timeout_s`` -> DEADLINE_EXCEEDED; more than ``max_concurrent_sessions`` at once ->
RESOURCE_EXHAUSTED; the session's own limits (audio and turns per session) end it with RESOURCE_EXHAUSTED; a failed
turn is a TurnError event and the session goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from services.common import audio, metrics, tools
from services.common.asr_servicer import endpointing_defaults, endpointing_from_config, next_or_idle
from services.common.convert.sts import ACTIONS, event_fields, tool_choice_from_proto
from services.common.convert.tts import routing_from_proto
from services.common.engines import (
    END_OF_TURN_JUDGED,
    INTERRUPTED,
    REPLY_AUDIO,
    TURN_COMPLETE,
    TURN_ERROR,
    BargeIn,
    Endpointing,
    Sampling,
    SessionOptions,
    StsEngine,
    StsEvent,
)
from services.common.errors import InvalidArgument
from services.common.rpc import TAKEN_METADATA, request_id
from services.common.scheduler import Admission, cpu_cores
from voice.v1 import audio_pb2, conversation_pb2, conversation_pb2_grpc

DEFAULT_OUTPUT_RATE = 16_000
MAX_TEMPERATURE = 2.0
MAX_BARGE_IN_MS = 5000
MAX_BARGE_IN_PHRASES = 100
MAX_BARGE_IN_PHRASE_CHARS = 64
MAX_TOOL_TIMEOUT_MS = 600_000
MAX_TOOL_FILLER_MS = 60_000
# A new session at capacity waits this long for a place to free before it is refused: a caller who hangs up and calls
# again at once can overtake its own hang-up (the cancel and the new call race, across the router most of all).
ENDING_CALL_GRACE_S = 0.5
# Conversations a CPU cascade serves at once per core when moss_sts.max_concurrent_sessions is 0, measured: callers
# speaking complete lines at real time through the router, replies played out (bench/conversation_load.py, 2-core AMD
# EPYC, 2026-11-28): one session alone p95 1.89 s from speech end to first reply audio; 2 at once 2.20 / 3.16 s (each
# within twice the single p95); 3 at once 6.4-10.6 s, 4 at once 8.6-14.3 s. MOSS-Speech on a card: a fixed default
# until a card's bench says otherwise.
CPU_SESSIONS_PER_CORE = 1
GPU_SESSIONS = 4


def session_capacity(section) -> int:
    """moss_sts.max_concurrent_sessions, or its measured default for the engine on this machine (0 in the config)."""
    if section.max_concurrent_sessions:
        return section.max_concurrent_sessions
    return GPU_SESSIONS if section.engine == "gpu" else CPU_SESSIONS_PER_CORE * cpu_cores()


@dataclass(frozen=True)
class StsLimits:
    idle_timeout_s: float = 10.0
    max_concurrent_sessions: int = 4
    max_first_words_wait_s: float = 0.0  # 0: new sessions are not refused for the brain's queue
    max_system_prompt_chars: int = 4000
    max_tokens_limit: int = 1024
    endpointing: Endpointing = Endpointing(hangover_ms=400)
    barge_in_min_speech_ms: int = 500
    barge_in_stop_words: tuple[str, ...] = ()  # () = the dialogue's defaults (services/conversation/barge_in.py)
    barge_in_backchannels: tuple[str, ...] = ()
    barge_in_min_words: int = 0
    tool_timeout_s: float = 10.0
    tool_filler_s: float = 0.0

    @classmethod
    def from_config(cls, section) -> StsLimits:
        return cls(
            idle_timeout_s=section.idle_timeout_seconds,
            max_concurrent_sessions=session_capacity(section),
            max_first_words_wait_s=section.max_first_words_wait_ms / 1000,
            max_system_prompt_chars=section.max_system_prompt_chars,
            max_tokens_limit=section.max_tokens_limit,
            endpointing=endpointing_defaults(section.endpointing),
            barge_in_min_speech_ms=section.barge_in_min_speech_ms,
            barge_in_stop_words=tuple(section.barge_in_stop_words),
            barge_in_backchannels=tuple(section.barge_in_backchannels),
            barge_in_min_words=section.barge_in_min_words,
            tool_timeout_s=section.tool_timeout_ms / 1000,
            tool_filler_s=section.tool_filler_ms / 1000,
        )


class _FirstWordsWait:
    """Admission's predicted wait (``Admission.check``) for a conversation: what a committed turn would wait now
    before its reply starts (``StsEngine.first_words_wait_s``; 0 when the engine cannot say, or when no session is
    open: nothing is left of the load the recent turns waited behind)."""

    def __init__(self, engine: StsEngine, sessions: Callable[[], int] = lambda: 1):
        self.engine = engine
        self.sessions = sessions

    def predicted_first_audio(self) -> float:
        if self.at_rest():
            return 0.0
        return self.engine.first_words_wait_s() or 0.0

    def at_rest(self) -> bool:
        return not self.sessions()


class ConversationServicer(conversation_pb2_grpc.ConversationServicer):
    def __init__(self, service: str, engine: StsEngine, limits: StsLimits):
        self.service = service
        self.engine = engine
        self.limits = limits
        self._admission = Admission(
            service,
            limits.max_concurrent_sessions,
            limits.max_first_words_wait_s,
            field="moss_sts.max_concurrent_sessions",
            unit="sessions",
            wait_field="moss_sts.max_first_words_wait_ms",
            waits_for="start a turn's reply",
        )
        self._first_words = _FirstWordsWait(engine, lambda: self._admission.active)
        self.labels = (service, engine.served_by if service != engine.service else engine.name)
        # The latency series exist at 0 from the start, so a rate() on the dashboard sees the very first event.
        for histogram in (metrics.STS_FIRST_AUDIO, metrics.STS_BARGE_IN_TO_SILENCE):
            histogram.labels(*self.labels)
        for counter, values in (
            (metrics.STS_END_OF_TURN, ("complete", "incomplete", "vetoed")),
            (metrics.STS_PREEMPTIVE_REPLIES, ("used", "discarded")),
            (
                metrics.STS_BARGE_IN_DECISIONS,
                ("stop_word", "stop_word_spotted", "words", "long_speech", "stop_word_final"),
            ),
            (metrics.STS_BARGE_IN_REFUSED, ("backchannel", "short_speech", "own_words")),
        ):
            for value in values:
                counter.labels(*self.labels, value)

    async def Converse(self, request_iterator, context):
        requests = aiter(request_iterator)
        first = await self._next(requests)
        if first is None:
            raise InvalidArgument("config", "the stream ended before any message; send a config message first")
        payload = first.WhichOneof("payload")
        if payload == "audio":
            raise InvalidArgument(
                "config", "audio came before the config; the first message must carry config (input_format, ...)"
            )
        if payload != "config":
            raise InvalidArgument("config", f"the first message must carry config; it carried {payload or 'nothing'}")
        options, in_fmt, out_fmt = self._options(first.config, context)
        self.engine.check_options(options)
        await self._admission.room(ENDING_CALL_GRACE_S)
        with self._admission.stream(self._first_words) as free_place:  # a place, or RESOURCE_EXHAUSTED
            session = await self.engine.open_session(options)
            pump = asyncio.create_task(self._pump(requests, session, in_fmt))
            relay = _Relay(options.request_id, out_fmt, self.labels)
            try:
                # Taken: the router waits for this before it sends audio (services/remote/base.py, accepted()).
                await context.send_initial_metadata(TAKEN_METADATA)
                async for event in session.events():
                    for response in relay.responses(event):
                        yield response
                await pump  # its error (bad message, idle timeout, ...) is the call's status
            finally:
                # The call has ended (hang-up, half-close, error): its place is free now, not after the cleanup
                # below, which may wait for a transcription or a synthesis step to stop.
                free_place()
                pump.cancel()
                await session.close()
                with contextlib.suppress(BaseException):
                    await pump

    async def _next(self, requests):
        return await next_or_idle(requests, self.limits.idle_timeout_s, "moss_sts.idle_timeout_seconds")

    async def _pump(self, requests, session, fmt: audio.PcmFormat) -> None:
        engine_rate = self.engine.native_sample_rate or fmt.sample_rate_hz
        resampler = audio.StreamResampler(fmt.sample_rate_hz, engine_rate)
        try:
            while True:
                message = await self._next(requests)
                if message is None:
                    break
                payload = message.WhichOneof("payload")
                if payload == "config":
                    raise InvalidArgument("config", "was sent twice; send it only in the first message")
                if payload == "audio":
                    audio.check_pcm("audio", message.audio)
                    pcm = resampler.feed(message.audio)
                    if pcm:
                        await session.feed(pcm)
                elif payload == "control":
                    action = ACTIONS.get(message.control.action)
                    if action is None:
                        raise InvalidArgument(
                            "control.action",
                            "must be ACTION_INTERRUPT, ACTION_END_OF_TURN, ACTION_MUTE, ACTION_UNMUTE or ACTION_RESPOND",
                        )
                    control = message.control
                    await session.control(action, control.played_ms if control.HasField("played_ms") else None)
                elif payload == "function_call_output":
                    answer = message.function_call_output
                    if len(answer.output) > tools.MAX_OUTPUT_CHARS:
                        raise InvalidArgument(
                            "function_call_output.output",
                            f"{len(answer.output)} characters; at most {tools.MAX_OUTPUT_CHARS}",
                        )
                    await session.function_call_output(answer.call_id, answer.output)
                else:
                    raise InvalidArgument("payload", "a message carried nothing; send audio or a control")
            tail = resampler.feed(b"", last=True)
            if tail:
                await session.feed(tail)
            await session.finish()
        except BaseException:
            await session.close()  # ends session.events(); the handler then raises this error
            raise

    def _options(self, config, context) -> tuple[SessionOptions, audio.PcmFormat, audio.PcmFormat]:
        in_fmt = audio.input_format("config.input_format", config.input_format)
        out_fmt = audio.output_format("config.output_format", config.output_format, DEFAULT_OUTPUT_RATE)
        s = config.sampling
        temperature = s.temperature or Sampling.temperature
        if not 0 < temperature <= MAX_TEMPERATURE:
            raise InvalidArgument(
                "config.sampling.temperature", f"{s.temperature} is outside 0..{MAX_TEMPERATURE} (0 means 0.5)"
            )
        top_p = s.top_p or Sampling.top_p
        if not 0 < top_p <= 1:
            raise InvalidArgument("config.sampling.top_p", f"{s.top_p} is outside 0..1 (0 means 0.8)")
        if s.max_tokens > self.limits.max_tokens_limit:
            raise InvalidArgument(
                "config.sampling.max_tokens",
                f"{s.max_tokens} is over this server's limit of {self.limits.max_tokens_limit}",
            )
        if len(config.system_prompt) > self.limits.max_system_prompt_chars:
            raise InvalidArgument(
                "config.system_prompt",
                f"{len(config.system_prompt)} characters is over the limit of {self.limits.max_system_prompt_chars}",
            )
        endpointing = endpointing_from_config(config.endpointing, self.limits.endpointing)
        b = config.barge_in
        if b.min_speech_ms > MAX_BARGE_IN_MS:
            raise InvalidArgument("config.barge_in.min_speech_ms", f"{b.min_speech_ms} is over {MAX_BARGE_IN_MS}")
        if b.min_words > 50:
            raise InvalidArgument("config.barge_in.min_words", f"{b.min_words} is over 50 (0 means the default)")
        for name in ("stop_words", "backchannels"):
            phrases = getattr(b, name)
            if len(phrases) > MAX_BARGE_IN_PHRASES:
                raise InvalidArgument(
                    f"config.barge_in.{name}", f"{len(phrases)} entries; at most {MAX_BARGE_IN_PHRASES}"
                )
            for i, phrase in enumerate(phrases):
                if not phrase.strip() or len(phrase) > MAX_BARGE_IN_PHRASE_CHARS:
                    raise InvalidArgument(
                        f"config.barge_in.{name}[{i}]",
                        f"{phrase!r} must be a word or phrase of 1..{MAX_BARGE_IN_PHRASE_CHARS} characters",
                    )
        declared, choice = self._tools(config)
        if config.tool_timeout_ms > MAX_TOOL_TIMEOUT_MS:
            raise InvalidArgument(
                "config.tool_timeout_ms",
                f"{config.tool_timeout_ms} is over {MAX_TOOL_TIMEOUT_MS} (0 means the default)",
            )
        if config.tool_filler_ms > MAX_TOOL_FILLER_MS:
            raise InvalidArgument(
                "config.tool_filler_ms", f"{config.tool_filler_ms} is over {MAX_TOOL_FILLER_MS} (0 means never)"
            )
        filler_s = config.tool_filler_ms / 1000 if config.HasField("tool_filler_ms") else self.limits.tool_filler_s
        remaining = context.time_remaining()
        options = SessionOptions(
            input_sample_rate_hz=self.engine.native_sample_rate or in_fmt.sample_rate_hz,
            output_sample_rate_hz=out_fmt.sample_rate_hz,
            voice=config.voice,
            system_prompt=config.system_prompt,
            sampling=Sampling(temperature, top_p, s.max_tokens, s.seed),
            language=config.language,
            endpointing=endpointing,
            barge_in=BargeIn(
                not b.disabled,
                b.min_speech_ms or self.limits.barge_in_min_speech_ms,
                stop_words=tuple(b.stop_words) or self.limits.barge_in_stop_words,
                min_words=b.min_words or self.limits.barge_in_min_words,
                backchannels=tuple(b.backchannels) or self.limits.barge_in_backchannels,
            ),
            routing=routing_from_proto(config.routing),
            request_id=request_id(),
            time_remaining=remaining,
            client_cancels_echo=config.client_cancels_echo,
            tools=declared,
            tool_choice=choice,
            tool_timeout_s=(config.tool_timeout_ms / 1000) or self.limits.tool_timeout_s,
            tool_filler_s=filler_s,
        )
        return options, in_fmt, out_fmt

    @staticmethod
    def _tools(config):
        choice = tool_choice_from_proto(config.tool_choice)
        if choice is None:
            raise InvalidArgument("config.tool_choice.mode", f"{config.tool_choice.mode} is not a ToolChoice.Mode")
        declared = [
            tools.tool(t.name, t.description, t.parameters_json, f"config.tools[{i}]")
            for i, t in enumerate(config.tools)
        ]
        return tools.declared(declared, choice)


class _Relay:
    """Session events -> ConverseResponse messages: reply audio resampled per reply into the caller's format,
    sequence and offset counted over the session; metrics from the events."""

    def __init__(self, request_id: str, fmt: audio.PcmFormat, labels: tuple[str, str]):
        self.request_id = request_id
        self.fmt = fmt
        self.labels = labels
        self.resampler: audio.StreamResampler | None = None
        self.samples = 0
        self.sequence = 0

    def _response(self, turn: int, **event) -> conversation_pb2.ConverseResponse:
        return conversation_pb2.ConverseResponse(request_id=self.request_id, turn_index=turn, **event)

    def _audio(self, turn: int, pcm: bytes) -> conversation_pb2.ConverseResponse:
        chunk = audio_pb2.AudioChunk(
            format=self.fmt.to_proto(), data=pcm, offset_samples=self.samples, sequence=self.sequence
        )
        self.samples += len(pcm) // audio.BYTES_PER_SAMPLE
        self.sequence += 1
        return self._response(turn, reply_audio=chunk)

    def responses(self, event: StsEvent):
        kind, turn = event.kind, event.turn_index
        if kind == REPLY_AUDIO:
            piece = event.audio
            if self.resampler is None or self.resampler.src_rate != piece.sample_rate_hz:
                self.resampler = audio.StreamResampler(piece.sample_rate_hz, self.fmt.sample_rate_hz)
            pcm = self.resampler.feed(piece.pcm)
            if pcm:
                yield self._audio(turn, pcm)
            return
        if kind == INTERRUPTED:
            self.resampler = None  # the cut is a cut: the resampler's tail is not sent
            metrics.STS_INTERRUPTIONS.labels(*self.labels, event.reason).inc()
            if event.silence_after_s is not None:
                metrics.STS_BARGE_IN_TO_SILENCE.labels(*self.labels).observe(event.silence_after_s)
        elif kind == TURN_COMPLETE:
            r = event.result
            if self.resampler is not None and not r.interrupted:
                tail = self.resampler.feed(b"", last=True)
                if tail:
                    yield self._audio(turn, tail)
            self.resampler = None
            metrics.STS_TURNS.labels(*self.labels, "interrupted" if r.interrupted else "complete").inc()
            if r.timings.speech_end_to_first_audio is not None:
                metrics.STS_FIRST_AUDIO.labels(*self.labels).observe(r.timings.speech_end_to_first_audio)
        elif kind == END_OF_TURN_JUDGED and event.turn is not None:
            t = event.turn
            decision = (
                "vetoed"
                if t.vetoed_by_word
                else "complete"
                if t.complete
                else "sentence_end"
                if t.sentence_end
                else "incomplete"
            )
            metrics.STS_END_OF_TURN.labels(*self.labels, decision).inc()
        elif kind == TURN_ERROR:
            self.resampler = None
            metrics.STS_TURNS.labels(*self.labels, "error").inc()
        fields = event_fields(event)
        if fields:
            yield self._response(turn, **fields)
