"""An ASR engine that is a gRPC client of an asr backend's Recognizer.StreamingRecognize. The caller's audio goes on
as it came (no resampling here: ``native_sample_rate`` 0) and the backend's events come back unchanged.

Deadlines, cancel and health: services/remote/base.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from services.common.convert.asr import config_to_proto, event_from_proto
from services.common.engines import AsrEngine, AsrEvent, AsrStream, RecognitionOptions
from services.remote.base import Backend, RemoteEngine, RemoteStream
from voice.v1 import recognizer_pb2, recognizer_pb2_grpc


class RemoteAsrEngine(RemoteEngine, AsrEngine):
    service = "asr"

    def __init__(self, backend: Backend | None, deadline_margin_s: float):
        super().__init__(backend, deadline_margin_s)
        self.stub = recognizer_pb2_grpc.RecognizerStub(backend.channel) if backend else None

    async def open_stream(self, options: RecognitionOptions) -> AsrStream:
        self._check_usable("no asr backend is configured; add asr to fleet.services or set router.backends.asr")
        call = self.stub.StreamingRecognize(timeout=self._timeout(options.time_remaining))
        stream = RemoteAsrStream(self.backend, call)
        await stream._write(
            recognizer_pb2.StreamingRecognizeRequest(request_id=options.request_id, config=config_to_proto(options))
        )
        await stream.accepted()  # closed when it raises
        return stream


class RemoteAsrStream(RemoteStream, AsrStream):
    async def feed(self, pcm: bytes) -> None:
        await self._write(recognizer_pb2.StreamingRecognizeRequest(audio=pcm))

    async def pause_spotting(self, paused: bool) -> None:
        control = recognizer_pb2.SpottingControl(paused=paused)
        await self._write(recognizer_pb2.StreamingRecognizeRequest(spotting=control))

    async def events(self) -> AsyncIterator[AsrEvent]:
        async for reply in self._replies():
            yield event_from_proto(reply)
