"""An ASR engine that is a gRPC client of the asr backend's Recognizer.StreamingRecognize (same pattern as
RemoteTtsEngine). The caller's audio goes on as it came (no resampling here: ``native_sample_rate`` 0) and the
backend's events come back unchanged.

Deadlines: the backend call gets the caller's remaining time minus the caller's margin (the router's:
router.deadline_margin_ms). Cancel: closing the stream cancels the backend call at once, which cancels the backend's
handler and releases its decoders.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc

from services.common.asr_servicer import MODES
from services.common.audio import S16LE
from services.common.engines import (
    RESULT,
    SPEECH_END,
    SPEECH_START,
    TURN_ESTIMATE,
    AsrEngine,
    AsrEvent,
    AsrStream,
    Hypothesis,
    RecognitionOptions,
    TurnEstimate,
    WordTiming,
)
from services.common.errors import Unavailable, from_rpc_error
from services.remote.base import Backend, backend_timeout
from voice.v1 import audio_pb2, recognizer_pb2, recognizer_pb2_grpc

# Backend failures that count against its health (outlier detection).
BACKEND_FAULTS = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL)


class RemoteAsrEngine(AsrEngine):
    name = "remote"
    service = "asr"

    def __init__(self, backend: Backend | None, deadline_margin_s: float):
        self.backend = backend
        self.margin = deadline_margin_s
        self.stub = recognizer_pb2_grpc.RecognizerStub(backend.channel) if backend else None

    @property
    def native_sample_rate(self) -> int:
        return 0  # the backend resamples; audio crosses the network once, as the caller sent it

    @property
    def served_by(self) -> str:
        return f"{self.backend.name if self.backend else 'asr'}/remote"

    def _timeout(self, time_remaining: float | None) -> float | None:
        return backend_timeout(time_remaining, self.margin, self.backend.name)

    async def open_stream(self, options: RecognitionOptions) -> AsrStream:
        if self.backend is None:
            raise Unavailable("no asr backend is configured; add asr to fleet.services or set router.backends.asr")
        if not self.backend.usable():
            raise Unavailable(f"{self.backend.describe()}; retry shortly")
        call = self.stub.StreamingRecognize(timeout=self._timeout(options.time_remaining))
        stream = RemoteAsrStream(self.backend, call)
        await stream.send_config(options)
        return stream


def config_to_proto(options: RecognitionOptions) -> recognizer_pb2.RecognitionConfig:
    return recognizer_pb2.RecognitionConfig(
        input_format=audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=options.sample_rate_hz, channels=1),
        language=options.language,
        interim_results=options.interim_results,
        endpointing=endpointing_to_proto(options.endpointing),
        phrase_hints=list(options.phrase_hints),
    )


def endpointing_to_proto(e) -> recognizer_pb2.EndpointingConfig:
    """Engine Endpointing -> EndpointingConfig (Recognizer and Conversation configs alike)."""
    return recognizer_pb2.EndpointingConfig(
        threshold=e.threshold,
        min_speech_ms=e.min_speech_ms,
        hangover_ms=e.hangover_ms,
        max_utterance_ms=e.max_utterance_ms,
        mode=PROTO_MODES[e.mode],
        turn_threshold=e.turn_threshold,
        min_silence_ms=e.min_silence_ms,
        max_silence_ms=e.max_silence_ms,
    )


# Endpointing.mode -> EndpointingConfig.Mode ("" stays unspecified: the backend's default).
PROTO_MODES = {mode: proto for proto, mode in MODES.items()}


def event_from_proto(reply) -> AsrEvent:
    which = reply.WhichOneof("event")
    if which == "vad":
        kind = SPEECH_START if reply.vad.kind == recognizer_pb2.VadEvent.KIND_SPEECH_START else SPEECH_END
        return AsrEvent(kind, offset_ms=reply.vad.offset_ms)
    if which == "end_of_turn":
        t = reply.end_of_turn
        turn = TurnEstimate(
            probability=round(t.probability, 4),
            complete=t.complete,
            silence_ms=t.silence_ms,
            offset_ms=t.offset_ms,
            utterance_index=t.utterance_index,
        )
        return AsrEvent(TURN_ESTIMATE, offset_ms=t.offset_ms, turn=turn)
    r = reply.result
    return AsrEvent(
        RESULT,
        result=Hypothesis(
            transcript=r.transcript,
            is_final=r.is_final,
            utterance_index=r.utterance_index,
            utterance_start_ms=r.utterance_start_ms,
            utterance_end_ms=r.utterance_end_ms,
            audio_processed_ms=r.audio_processed_ms,
            stability=r.stability,
            confidence=r.confidence,
            language=r.language,
            words=tuple(WordTiming(w.word, w.start_ms, w.end_ms, w.confidence) for w in r.words),
        ),
    )


class RemoteAsrStream(AsrStream):
    def __init__(self, backend: Backend, call):
        self.backend = backend
        self.call = call
        self._finished = False
        self._closed = False

    async def send_config(self, options: RecognitionOptions) -> None:
        await self._write(
            recognizer_pb2.StreamingRecognizeRequest(request_id=options.request_id, config=config_to_proto(options))
        )

    async def _write(self, request) -> None:
        try:
            await self.call.write(request)  # waits for flow control: the backend's pace is the caller's
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass  # the call has ended; events() raises its status

    async def feed(self, pcm: bytes) -> None:
        await self._write(recognizer_pb2.StreamingRecognizeRequest(audio=pcm))

    async def finish(self) -> None:
        if not self._finished:
            self._finished = True
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await self.call.done_writing()

    async def events(self) -> AsyncIterator[AsrEvent]:
        try:
            while True:
                reply = await self.call.read()
                if reply is grpc.aio.EOF:
                    break
                yield event_from_proto(reply)
            code = await self.call.code()
            if code == grpc.StatusCode.CANCELLED and self.call.cancelled():
                return  # we cancelled it (close)
            if code != grpc.StatusCode.OK:
                raise from_rpc_error(_status_error(code, await self.call.details()), self.backend.name)
            self.backend.record_success()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and not (task and task.cancelling()):
                return  # we cancelled the backend call (close): the events simply end
            raise
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED and self._closed:
                return
            if e.code() in BACKEND_FAULTS:
                self.backend.record_failure()
            raise from_rpc_error(e, self.backend.name) from None

    async def close(self) -> None:
        self._closed = True
        self.call.cancel()  # no-op when finished; cancels the backend's handler when our caller went away


class _Status(grpc.aio.AioRpcError):
    pass


def _status_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return _Status(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)
