"""The real recognizer behind a test's own stream wrapper: the dialogue tests watch or filter what passes between
the dialogue and a real asr engine (in process, or the asr service over gRPC), at the engine interface."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from services.common.engines import AsrEngine, AsrEvent, AsrStream, RecognitionOptions


class PassThroughStream(AsrStream):
    """An ASR stream that hands everything to ``inner``; a test overrides the part it watches or filters."""

    def __init__(self, inner: AsrStream):
        self.inner = inner

    async def feed(self, pcm: bytes) -> None:
        await self.inner.feed(pcm)

    async def finish(self) -> None:
        await self.inner.finish()

    def events(self) -> AsyncIterator[AsrEvent]:
        return self.inner.events()

    async def close(self) -> None:
        await self.inner.close()


class WrappedAsr(AsrEngine):
    """``inner``'s streams, each opened through ``wrap`` (a PassThroughStream of the test's)."""

    service = "asr"

    def __init__(self, inner: AsrEngine, wrap: Callable[[AsrStream], AsrStream], name: str):
        self.inner, self.wrap, self.name = inner, wrap, name

    @property
    def native_sample_rate(self) -> int:
        return self.inner.native_sample_rate

    async def open_stream(self, options: RecognitionOptions) -> AsrStream:
        return self.wrap(await self.inner.open_stream(options))
