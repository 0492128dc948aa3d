"""A TTS engine that is a gRPC client of a backend's Synthesizer (deadlines, cancel and health:
services/remote/base.py).

Streaming text (StreamingSynthesize) is forwarded as a stream: the router checks each message (its own servicer
runs the same checks as a backend's), then passes config and every delta/flush/end on to ONE backend stream,
and the backend segments and speaks. So the backend's engine sees the text as it arrives (an engine that takes
streaming text natively gets it), the buffering policy is applied once, in one place, and audio text spans need no
translation. (The alternative, segmenting in the router and calling Synthesize per segment, would pay one RPC
per sentence and hide the text stream from engines that could use it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc

from services.common.audio import S16LE
from services.common.convert.tts import options_to_config, piece_from_proto, voice_from_proto
from services.common.engines import AudioPiece, BufferPolicy, SynthesisOptions, TextEvent, TtsEngine, VoiceInfo
from services.common.errors import VoiceError, from_rpc_error
from services.remote.base import Backend, RemoteEngine, failed
from voice.v1 import audio_pb2, synthesizer_pb2, synthesizer_pb2_grpc


class RemoteTtsEngine(RemoteEngine, TtsEngine):
    def __init__(self, backend: Backend, deadline_margin_s: float, voices_cache_s: float):
        super().__init__(backend, deadline_margin_s)
        self.service = backend.name
        self.stub = synthesizer_pb2_grpc.SynthesizerStub(backend.channel)
        self.voices_cache_s = voices_cache_s
        self._voices: list[VoiceInfo] = []
        self._voices_at = float("-inf")

    @property
    def native_sample_rate(self) -> int:
        return self._voices[0].native_sample_rate_hz if self._voices else 0

    @property
    def cached_voices(self) -> list[VoiceInfo]:
        """The last voice list ListVoices gave (possibly stale; empty before the first)."""
        return self._voices

    async def voices(self, time_remaining: float | None = 10.0, bounded_by_route: bool = False) -> list[VoiceInfo]:
        """Its voice list (cached ``voices_cache_s``). ``bounded_by_route``: the lookup's time is the route's own
        first-audio timeout, not the caller's deadline, so a backend that lets it run out is hung (a SIGSTOPped
        process answers nothing), which counts against its health like a synthesis that sent no audio in time."""
        if time.monotonic() - self._voices_at < self.voices_cache_s:
            return self._voices
        try:
            reply = await self.stub.ListVoices(
                synthesizer_pb2.ListVoicesRequest(), timeout=self._timeout(time_remaining)
            )
        except grpc.aio.AioRpcError as e:
            raise failed(self.backend, e, route_deadline=bounded_by_route) from None
        self._voices = [voice_from_proto(v, self.backend.name) for v in reply.voices]
        self._voices_at = time.monotonic()
        return self._voices

    async def synthesize(self, text: str, options: SynthesisOptions) -> AsyncIterator[AudioPiece]:
        request = synthesizer_pb2.SynthesizeRequest(
            request_id=options.request_id, text=text, config=options_to_config(options)
        )
        call = self.stub.Synthesize(request, timeout=self._timeout(options.time_remaining))
        async with contextlib.aclosing(self._pieces(call)) as pieces:
            async for piece in pieces:
                yield piece

    async def synthesize_text_stream(
        self, events: AsyncIterator[TextEvent], options: SynthesisOptions, policy: BufferPolicy
    ) -> AsyncIterator[AudioPiece]:
        call = self.stub.StreamingSynthesize(timeout=self._timeout(options.time_remaining))
        config = synthesizer_pb2.StreamingSynthesisConfig(
            synthesis=options_to_config(options),
            buffering=synthesizer_pb2.TextBufferPolicy(
                min_chars=policy.min_chars, max_wait_ms=round(policy.max_wait_s * 1000)
            ),
        )
        rejected: list[VoiceError] = []

        async def forward() -> None:
            """Our caller's checked events -> the backend stream. A bad message (raised by our caller's checks)
            ends the backend call; the reader below then raises it to our caller."""
            try:
                await call.write(
                    synthesizer_pb2.StreamingSynthesizeRequest(request_id=options.request_id, config=config)
                )
                done = False
                async for event in events:
                    if done:
                        continue  # after end_of_text: keep reading, only so that a bad message is still caught
                    if event.text:
                        await call.write(synthesizer_pb2.StreamingSynthesizeRequest(text_delta=event.text))
                    if event.flush:
                        await call.write(synthesizer_pb2.StreamingSynthesizeRequest(flush=True))
                    if event.end:
                        await call.write(synthesizer_pb2.StreamingSynthesizeRequest(end_of_text=True))
                        await call.done_writing()
                        done = True
                if not done:  # our caller half-closed without end_of_text: so do we
                    await call.done_writing()
            except VoiceError as e:
                rejected.append(e)
                call.cancel()
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                pass  # the backend call already ended; the reader reports why

        writer = asyncio.create_task(forward(), name=f"forward-text-{self.backend.name}")
        try:
            async with contextlib.aclosing(self._pieces(call)) as pieces:
                async for piece in pieces:
                    yield piece
            if rejected:
                raise rejected[0]
        except (asyncio.CancelledError, VoiceError):
            if rejected:  # we cancelled the backend call because our caller sent a bad message
                raise rejected[0] from None
            raise
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def _pieces(self, call) -> AsyncIterator[AudioPiece]:
        try:
            async for reply in call:
                yield piece_from_proto(reply)
            self.backend.record_success()
        except grpc.aio.AioRpcError as e:
            # DEADLINE_EXCEEDED here is the caller's deadline: no fault (a hung backend is counted by the failover's
            # first-audio timeout, which gives it ample time).
            raise failed(self.backend, e) from None
        finally:
            call.cancel()  # no-op when finished; stops the backend when our caller went away

    async def register_voice(
        self, voice_id: str, prompt_pcm: bytes, prompt_rate: int, transcript: str, language: str
    ) -> VoiceInfo:
        request = synthesizer_pb2.RegisterVoiceRequest(
            voice_id=voice_id,
            prompt_audio=prompt_pcm,
            prompt_format=audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=prompt_rate, channels=1),
            prompt_transcript=transcript,
            language=language,
        )
        try:
            reply = await self.stub.RegisterVoice(request, timeout=120.0)
        except grpc.aio.AioRpcError as e:
            raise from_rpc_error(e, self.backend.name) from None
        self._voices_at = float("-inf")  # the new voice shows in the next ListVoices
        return voice_from_proto(reply.voice)
