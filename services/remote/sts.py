"""An STS engine that is a gRPC client of a moss_sts backend's Conversation.Converse. The router's
ConversationServicer checks the config and every message exactly as moss_sts does, then this passes them on to ONE
backend session; the backend's events come back unchanged.

Audio crosses the network once: user audio goes on as the caller sent it (``native_sample_rate`` 0: the backend
resamples) and the backend is asked for reply audio in the caller's output rate.

Deadlines: a Converse call with a deadline gives the backend the remaining time minus the margin; a call without one
gets none (a conversation is long-lived; the backend's session limits and idle timeout apply). Cancel and health:
services/remote/base.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from services.common.convert.sts import PROTO_ACTIONS, config_to_proto, event_from_response
from services.common.engines import SessionOptions, StsEngine, StsEvent, StsSession
from services.remote.base import Backend, RemoteEngine, RemoteStream
from voice.v1 import conversation_pb2, conversation_pb2_grpc


class RemoteStsEngine(RemoteEngine, StsEngine):
    service = "moss_sts"

    def __init__(self, backend: Backend | None, deadline_margin_s: float):
        super().__init__(backend, deadline_margin_s)
        self.stub = conversation_pb2_grpc.ConversationStub(backend.channel) if backend else None

    async def open_session(self, options: SessionOptions) -> StsSession:
        self._check_usable(
            "no conversation backend is configured; add moss_sts to fleet.services or set router.backends.moss_sts"
        )
        call = self.stub.Converse(timeout=self._timeout(options.time_remaining))
        session = RemoteStsSession(self.backend, call)
        await session._write(
            conversation_pb2.ConverseRequest(request_id=options.request_id, config=config_to_proto(options))
        )
        await session.accepted()  # closed when it raises
        return session


class RemoteStsSession(RemoteStream, StsSession):
    async def feed(self, pcm: bytes) -> None:
        await self._write(conversation_pb2.ConverseRequest(audio=pcm))

    async def control(self, action: str, played_ms: int | None = None) -> None:
        control = conversation_pb2.ConversationControl(action=PROTO_ACTIONS[action], played_ms=played_ms)
        await self._write(conversation_pb2.ConverseRequest(control=control))

    async def function_call_output(self, call_id: str, output: str) -> None:
        answer = conversation_pb2.FunctionCallOutput(call_id=call_id, output=output)
        await self._write(conversation_pb2.ConverseRequest(function_call_output=answer))

    async def events(self) -> AsyncIterator[StsEvent]:
        served_by = f"{self.backend.name}/remote"
        async for reply in self._replies():
            event = event_from_response(reply, served_by)
            if event is not None:
                yield event
