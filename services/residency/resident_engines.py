"""Engines wrapped so that every request holds their model resident (see ModelResidency.use).

The shared servicers need no change: a request to a COLD model waits (bounded: RESOURCE_EXHAUSTED with a retry hint
past ``max_waiting_requests``) while the model is loaded back. A TTS request holds it for one synthesis; an ASR
stream or a conversation session holds it from open until it is closed, so a live conversation is never cut by a
swap.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from services.common.engines import AsrEngine, AsrStream, StsEngine, StsSession, TtsEngine
from services.common.health import synthesis_probe
from services.residency.model_residency import RESIDENT, ModelResidency


class ResidentTtsEngine(TtsEngine):
    """A TTS engine whose model may be offloaded: every request holds it resident (see ModelResidency.use)."""

    def __init__(self, inner: TtsEngine, residency: ModelResidency):
        self.inner = inner
        self.residency = residency
        self.name = inner.name
        self.service = inner.service
        self.clones_voices = inner.clones_voices

    @property
    def native_sample_rate(self) -> int:
        return self.inner.native_sample_rate

    @property
    def scheduler(self):
        """The inner engine's SegmentScheduler: admission predicts a newcomer's first-audio wait from it."""
        return self.inner.scheduler

    async def start(self) -> None:
        await self.residency.load()

    async def close(self) -> None:
        await self.residency.close()
        await self.inner.close()

    async def voices(self):
        return await self.inner.voices()

    async def synthesize(self, text, options) -> AsyncIterator:
        async with self.residency.use():
            async with contextlib.aclosing(self.inner.synthesize(text, options)) as pieces:
                async for piece in pieces:
                    yield piece

    async def synthesize_text_stream(self, events, options, policy) -> AsyncIterator:
        async with self.residency.use():
            async with contextlib.aclosing(self.inner.synthesize_text_stream(events, options, policy)) as pieces:
                async for piece in pieces:
                    yield piece

    async def register_voice(self, *args, **kwargs):
        async with self.residency.use():
            return await self.inner.register_voice(*args, **kwargs)

    def resident_bytes(self) -> int:
        return self.inner.resident_bytes()

    async def probe(self) -> str | None:
        """The service's deep probe (services/common/health.py): a short synthesis, skipped while the model is off its
        device, so a probe never pulls a swapped-out model back onto the GPU."""
        if self.residency.state != RESIDENT:
            return "model not resident"
        return await synthesis_probe(self)()

    @property
    def device(self) -> str:
        return self.inner.device

    @property
    def served_by(self) -> str:
        return self.inner.served_by


# --- Recognition and conversation hold their model too (asr, moss_sts) -------------------------------------------
class _HeldUntilClosed:
    """Holds a ModelResidency (``use()``) from open until ``close`` (idempotent): an ASR stream or a conversation
    session keeps its model resident for its whole life, and its holder counts as busy meanwhile (busy holders are
    not revoked), so a live conversation is never cut by a swap."""

    def __init__(self, residency: ModelResidency):
        self._residency = residency
        self._stack = contextlib.AsyncExitStack()

    async def hold(self) -> None:
        await self._stack.enter_async_context(self._residency.use())

    async def release(self) -> None:
        await self._stack.aclose()


class _HeldStream:
    """What an ASR stream and a conversation session share: audio in, events out, and the hold released on close."""

    def __init__(self, inner, held: _HeldUntilClosed):
        self.inner, self._held = inner, held

    async def feed(self, pcm: bytes) -> None:
        await self.inner.feed(pcm)

    async def finish(self) -> None:
        await self.inner.finish()

    def events(self):
        return self.inner.events()

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            await self._held.release()


class _ResidentAsrStream(_HeldStream, AsrStream):
    async def pause_spotting(self, paused: bool) -> None:
        await self.inner.pause_spotting(paused)


class _ResidentStsSession(_HeldStream, StsSession):
    async def control(self, action: str, played_ms: int | None = None) -> None:
        await self.inner.control(action, played_ms)

    async def interrupt(self) -> None:
        await self.inner.interrupt()

    async def function_call_output(self, call_id: str, output: str) -> None:
        await self.inner.function_call_output(call_id, output)


class _ResidentEngine:
    """What the ASR and conversation wrappers share: the inner engine's face, loading through the residency, and
    opening a stream or session that holds the model until it is closed."""

    def __init__(self, inner, residency: ModelResidency):
        self.inner = inner
        self.residency = residency
        self.name = inner.name
        self.service = inner.service

    @property
    def native_sample_rate(self) -> int:
        return self.inner.native_sample_rate

    async def start(self) -> None:
        await self.residency.load()

    async def close(self) -> None:
        await self.residency.close()
        await self.inner.close()

    def check_options(self, options) -> None:
        self.inner.check_options(options)

    def resident_bytes(self) -> int:
        return self.inner.resident_bytes()

    @property
    def device(self) -> str:
        return self.inner.device

    @property
    def served_by(self) -> str:
        return self.inner.served_by

    async def _open_held(self, open_inner, wrap):
        held = _HeldUntilClosed(self.residency)
        await held.hold()
        try:
            return wrap(await open_inner(), held)
        except BaseException:
            await held.release()
            raise


class ResidentAsrEngine(_ResidentEngine, AsrEngine):
    """An ASR engine whose model may be offloaded: every stream holds it resident until the stream is closed."""

    async def open_stream(self, options) -> AsrStream:
        return await self._open_held(lambda: self.inner.open_stream(options), _ResidentAsrStream)


class ResidentStsEngine(_ResidentEngine, StsEngine):
    """A conversation engine whose model may be offloaded: every session holds it resident until it is closed."""

    async def voices(self):
        return await self.inner.voices()

    async def open_session(self, options) -> StsSession:
        return await self._open_held(lambda: self.inner.open_session(options), _ResidentStsSession)


def when_resident(residency: ModelResidency, probe: Callable[[], Awaitable[str | None]]):
    """A deep probe that is skipped while the model is off its device: a probe must never pull a swapped-out model
    back onto the card (ResidentTtsEngine.probe does the same for TTS)."""

    async def probe_if_resident() -> str | None:
        if residency.state != RESIDENT:
            return "model not resident"
        return await probe()

    return probe_if_resident
