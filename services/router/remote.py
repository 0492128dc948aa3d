"""Remote engines: gRPC clients of a backend that implement the same engine interfaces as local models.

Deadlines: a call to a backend gets the caller's remaining time minus a margin, so the router can still answer
DEADLINE_EXCEEDED itself. Cancel: when our caller goes away, the backend call is cancelled at once, which
cancels the backend's handler and stops its engine.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc

from services.common.audio import S16LE
from services.common.engines import AudioPiece, SynthesisOptions, TtsEngine, VoiceInfo
from services.common.errors import DeadlineExceeded, from_rpc_error
from services.router.backends import Backend
from voice.v1 import audio_pb2, synthesizer_pb2, synthesizer_pb2_grpc


class RemoteTtsEngine(TtsEngine):
    name = "remote"

    def __init__(self, backend: Backend, deadline_margin_s: float, voices_cache_s: float):
        self.backend = backend
        self.service = backend.name
        self.stub = synthesizer_pb2_grpc.SynthesizerStub(backend.channel)
        self.margin = deadline_margin_s
        self.voices_cache_s = voices_cache_s
        self._voices: list[VoiceInfo] = []
        self._voices_at = float("-inf")

    @property
    def native_sample_rate(self) -> int:
        return self._voices[0].native_sample_rate_hz if self._voices else 0

    @property
    def served_by(self) -> str:
        return f"{self.backend.name}/remote"

    def _timeout(self, time_remaining: float | None) -> float | None:
        if time_remaining is None:
            return None
        timeout = time_remaining - self.margin
        if timeout <= 0:
            raise DeadlineExceeded(f"deadline too short to call {self.backend.name}; allow more time")
        return timeout

    async def voices(self, time_remaining: float | None = 10.0) -> list[VoiceInfo]:
        if time.monotonic() - self._voices_at < self.voices_cache_s:
            return self._voices
        try:
            reply = await self.stub.ListVoices(
                synthesizer_pb2.ListVoicesRequest(), timeout=self._timeout(time_remaining)
            )
        except grpc.aio.AioRpcError as e:
            self.backend.record_failure()
            raise from_rpc_error(e, self.backend.name) from None
        self._voices = [
            VoiceInfo(
                id=v.id,
                display_name=v.display_name,
                languages=tuple(v.languages),
                native_sample_rate_hz=v.native_sample_rate_hz,
                service=v.service or self.backend.name,
                engine=v.engine,
                cloned=v.kind == synthesizer_pb2.VOICE_KIND_CLONED,
                description=v.description,
            )
            for v in reply.voices
        ]
        self._voices_at = time.monotonic()
        return self._voices

    async def synthesize(self, text: str, options: SynthesisOptions) -> AsyncIterator[AudioPiece]:
        request = synthesizer_pb2.SynthesizeRequest(
            request_id=options.request_id,
            text=text,
            config=synthesizer_pb2.SynthesisConfig(
                voice=options.voice,
                language=options.language,
                output_format=audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=options.sample_rate_hz, channels=1),
                speaking_rate=options.speaking_rate,
                seed=options.seed,
            ),
        )
        call = self.stub.Synthesize(request, timeout=self._timeout(options.time_remaining))
        try:
            async for reply in call:
                yield AudioPiece(
                    pcm=reply.audio.data,
                    sample_rate_hz=reply.audio.format.sample_rate_hz,
                    text_start=reply.text_span.start_char,
                    text_end=reply.text_span.end_char,
                    served_by=reply.served_by,
                )
            self.backend.record_success()
        except grpc.aio.AioRpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL):
                self.backend.record_failure()
            raise from_rpc_error(e, self.backend.name) from None
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
        v = reply.voice
        return VoiceInfo(
            id=v.id,
            display_name=v.display_name,
            languages=tuple(v.languages),
            native_sample_rate_hz=v.native_sample_rate_hz,
            service=v.service,
            engine=v.engine,
            cloned=True,
            description=v.description,
        )
