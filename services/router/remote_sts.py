"""The router's STS engine: a gRPC client of moss_sts's Conversation.Converse (the remote engine pattern of
RemoteTtsEngine / RemoteAsrEngine). The router's ConversationServicer checks the config and every message exactly as
moss_sts does, then this passes them on to ONE backend session; the backend's events come back unchanged.

Audio crosses the network once: user audio goes on as the caller sent it (``native_sample_rate`` 0: the backend
resamples) and the backend is asked for reply audio in the caller's output rate.

Deadlines: a Converse call with a deadline gives the backend the remaining time minus router.deadline_margin_ms; a
call without one gets none (a conversation is long-lived; the backend's session limits and idle timeout apply).
Cancel: closing the session cancels the backend call at once, which cancels the backend's handler and stops its
reply generation and recognition.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc

from services.common.audio import S16LE
from services.common.engines import (
    END_OF_TURN,
    END_OF_TURN_JUDGED,
    INTERRUPT,
    INTERRUPTED,
    MUTE,
    REPLY_AUDIO,
    REPLY_TEXT,
    STATE,
    TURN_COMPLETE,
    TURN_ERROR,
    UNMUTE,
    USER_TRANSCRIPT,
    AudioPiece,
    SessionOptions,
    StsEngine,
    StsEvent,
    StsSession,
    TurnEstimate,
    TurnResult,
    TurnTimings,
)
from services.common.errors import Unavailable, from_rpc_error
from services.common.sts_servicer import STATE_NAMES
from services.remote.asr import endpointing_to_proto, event_from_proto
from services.remote.base import backend_timeout
from services.router.backends import Backend
from voice.v1 import audio_pb2, conversation_pb2, conversation_pb2_grpc, routing_pb2

BACKEND_FAULTS = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL)
ACTIONS = {
    INTERRUPT: conversation_pb2.ConversationControl.ACTION_INTERRUPT,
    END_OF_TURN: conversation_pb2.ConversationControl.ACTION_END_OF_TURN,
    MUTE: conversation_pb2.ConversationControl.ACTION_MUTE,
    UNMUTE: conversation_pb2.ConversationControl.ACTION_UNMUTE,
}


class RemoteStsEngine(StsEngine):
    name = "remote"
    service = "moss_sts"

    def __init__(self, backend: Backend | None, deadline_margin_s: float):
        self.backend = backend
        self.margin = deadline_margin_s
        self.stub = conversation_pb2_grpc.ConversationStub(backend.channel) if backend else None

    @property
    def native_sample_rate(self) -> int:
        return 0  # the backend resamples

    @property
    def served_by(self) -> str:
        return f"{self.backend.name if self.backend else 'moss_sts'}/remote"

    def _timeout(self, time_remaining: float | None) -> float | None:
        return backend_timeout(time_remaining, self.margin, self.backend.name)

    async def open_session(self, options: SessionOptions) -> StsSession:
        if self.backend is None:
            raise Unavailable(
                "no conversation backend is configured; add moss_sts to fleet.services or set router.backends.moss_sts"
            )
        if not self.backend.usable():
            raise Unavailable(f"{self.backend.describe()}; retry shortly")
        call = self.stub.Converse(timeout=self._timeout(options.time_remaining))
        session = RemoteStsSession(self.backend, call)
        await session._write(
            conversation_pb2.ConverseRequest(request_id=options.request_id, config=config_to_proto(options))
        )
        return session


def config_to_proto(options: SessionOptions) -> conversation_pb2.ConversationConfig:
    e, s, b = options.endpointing, options.sampling, options.barge_in
    return conversation_pb2.ConversationConfig(
        input_format=audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=options.input_sample_rate_hz, channels=1),
        output_format=audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=options.output_sample_rate_hz, channels=1),
        voice=options.voice,
        system_prompt=options.system_prompt,
        sampling=conversation_pb2.SamplingConfig(
            temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=s.seed
        ),
        language=options.language,
        endpointing=endpointing_to_proto(e),
        barge_in=conversation_pb2.BargeInConfig(
            disabled=not b.enabled,
            min_speech_ms=b.min_speech_ms,
            stop_words=list(b.stop_words),
            min_words=b.min_words,
            backchannels=list(b.backchannels),
        ),
        routing=routing_pb2.Routing(
            mode=options.routing.mode,
            engine=options.routing.engine,
            latency_budget_ms=options.routing.latency_budget_ms,
        ),
    )


def event_from_response(reply: conversation_pb2.ConverseResponse) -> StsEvent | None:
    kind, turn = reply.WhichOneof("event"), reply.turn_index
    if kind == "state":
        return StsEvent(STATE, turn, state=STATE_NAMES.get(reply.state.state, ""))
    if kind == "user_transcript":
        result = event_from_proto(_AsResult(reply.user_transcript)).result
        return StsEvent(USER_TRANSCRIPT, turn, transcript=result)
    if kind == "reply_text":
        return StsEvent(REPLY_TEXT, turn, text=reply.reply_text.delta)
    if kind == "reply_audio":
        a = reply.reply_audio
        return StsEvent(
            REPLY_AUDIO, turn, audio=AudioPiece(a.data, a.format.sample_rate_hz, 0, 0, served_by="moss_sts/remote")
        )
    if kind == "interrupted":
        i = reply.interrupted
        return StsEvent(INTERRUPTED, turn, reason=i.reason, audio_sent_ms=i.audio_sent_ms, heard_text=i.heard_text)
    if kind == "turn_complete":
        c, t = reply.turn_complete, reply.turn_complete.timings
        timings = TurnTimings(
            speech_end_to_first_audio=t.speech_end_to_first_audio_ms / 1000 if t.speech_end_to_first_audio_ms else None,
            speech_end_to_transcript=t.speech_end_to_transcript_ms / 1000 if t.speech_end_to_transcript_ms else None,
            transcript_to_first_text=t.transcript_to_first_text_ms / 1000 if t.transcript_to_first_text_ms else None,
            reply_audio=t.reply_audio_ms / 1000,
            speech_end_to_commit=t.speech_end_to_commit_ms / 1000 if t.speech_end_to_commit_ms else None,
            discarded_replies=t.discarded_replies,
            preemptive=t.preemptive,
        )
        return StsEvent(
            TURN_COMPLETE, turn, result=TurnResult(c.user_text, c.reply_text, c.interrupted, timings, c.served_by)
        )
    if kind == "turn_error":
        return StsEvent(TURN_ERROR, turn, code=reply.turn_error.code, message=reply.turn_error.message)
    if kind == "end_of_turn":
        e = reply.end_of_turn
        estimate = TurnEstimate(e.probability, e.complete, e.silence_ms, e.offset_ms, e.utterance_index)
        return StsEvent(END_OF_TURN_JUDGED, turn, turn=estimate)
    return None


class _AsResult:
    """Adapts a RecognitionResult to the shape services/remote/asr.py event_from_proto reads (a response with .result)."""

    def __init__(self, result):
        self.result = result

    def WhichOneof(self, _name: str) -> str:  # noqa: N802 - protobuf's spelling
        return "result"


class RemoteStsSession(StsSession):
    def __init__(self, backend: Backend, call):
        self.backend = backend
        self.call = call
        self._finished = False
        self._closed = False

    async def _write(self, request) -> None:
        try:
            await self.call.write(request)  # waits for flow control: the backend's pace is the caller's
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
            pass  # the call has ended; events() raises its status

    async def feed(self, pcm: bytes) -> None:
        await self._write(conversation_pb2.ConverseRequest(audio=pcm))

    async def control(self, action: str) -> None:
        await self._write(
            conversation_pb2.ConverseRequest(control=conversation_pb2.ConversationControl(action=ACTIONS[action]))
        )

    async def finish(self) -> None:
        if not self._finished:
            self._finished = True
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
                await self.call.done_writing()

    async def events(self) -> AsyncIterator[StsEvent]:
        try:
            while True:
                reply = await self.call.read()
                if reply is grpc.aio.EOF:
                    break
                event = event_from_response(reply)
                if event is not None:
                    yield event
            code = await self.call.code()
            if code == grpc.StatusCode.CANCELLED and self.call.cancelled():
                return
            if code != grpc.StatusCode.OK:
                raise from_rpc_error(_status_error(code, await self.call.details()), self.backend.name)
            self.backend.record_success()
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED and self.call.cancelled():
                return
            if e.code() in BACKEND_FAULTS:
                self.backend.record_failure()
            raise from_rpc_error(e, self.backend.name) from None
        except asyncio.CancelledError:
            # A read pending when we cancelled the call ourselves (close(): the caller sent a bad message) raises
            # CancelledError; that ends the events, it is not this task being cancelled.
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                return
            raise

    async def close(self) -> None:
        self._closed = True
        self.call.cancel()  # no-op when finished; cancels the backend's handler when our caller went away


class _Status(grpc.aio.AioRpcError):
    pass


def _status_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return _Status(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)
