"""Failover: a request's route is a chain of backends; when one fails, the next takes over (docs/router.md#failover).

Text to speech (``RoutedTts``, one per request, made by policy.RouterTtsResolver):

* Synthesize: a backend that fails before its first audio (UNAVAILABLE, INTERNAL, RESOURCE_EXHAUSTED, ...) or sends
  no audio within the first-audio timeout (a hung process) is given up, and the request goes to the next backend
  of the chain, transparently, within the caller's deadline. A backend at capacity refuses at once
  (RESOURCE_EXHAUSTED, services/common/scheduler.py), so trying the next one costs one round trip; when every
  backend of the chain is full the caller gets RESOURCE_EXHAUSTED with the soonest retry hint among them. Once audio was sent the request is committed: a later
  failure ends it with that status (a retry would repeat what the caller already has).
* StreamingSynthesize: the router keeps the text of the stream (``TextLog``). When the backend fails mid-stream, the
  next one gets a new stream holding the text from the end of the last segment whose audio was sent (audio spans
  say where that is), then the rest of the text as it arrives. The segment that was cut mid-audio is not repeated:
  speech continues at the next sentence, never duplicating audio already sent. Spans stay in the caller's text.

Conversation: see ``FailoverStsEngine`` below.

Every failover is counted (voicefleet_router_failovers_total{from,to,reason}) and kept in ``FailoverLog`` for
Fleet.GetFleetStatus (``voicefleet status``).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from services.common import metrics
from services.common.engines import (
    AudioPiece,
    BufferPolicy,
    SynthesisOptions,
    TextEvent,
    TtsEngine,
    VoiceInfo,
)
from services.common.errors import DeadlineExceeded, VoiceError
from services.common.text import _STREAM_SENTENCE_END as _SENTENCE_END
from voice.v1 import fleet_pb2

log = logging.getLogger("voicefleet.router.failover")

# Backend statuses that move a request to the next backend of its chain, and the reason they are counted under.
FAILOVER_REASONS = {
    grpc.StatusCode.UNAVAILABLE: "unavailable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "deadline",
    grpc.StatusCode.INTERNAL: "internal",
    grpc.StatusCode.UNKNOWN: "internal",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "resource_exhausted",
}


def failover_reason(error: BaseException) -> str | None:
    return FAILOVER_REASONS.get(error.code) if isinstance(error, VoiceError) else None


class FailoverLog:
    """Recent failovers (newest first) for GetFleetStatus, and the metric."""

    def __init__(self, keep: int = 50):
        self.records: collections.deque[fleet_pb2.FailoverRecord] = collections.deque(maxlen=keep)

    def record(self, from_backend: str, to_backend: str, reason: str, request_id: str = "") -> None:
        metrics.FAILOVERS.labels(from_backend, to_backend, reason).inc()
        self.records.appendleft(
            fleet_pb2.FailoverRecord(
                from_backend=from_backend,
                to_backend=to_backend,
                reason=reason,
                at_unix_ms=int(time.time() * 1000),
                request_id=request_id,
            )
        )
        level = logging.DEBUG if reason == "unhealthy" else logging.WARNING  # one per request while it is down
        log.log(level, "failover %s -> %s (%s) request %s", from_backend, to_backend, reason, request_id or "-")


@dataclass(frozen=True)
class Candidate:
    """A backend of a request's chain that can serve it, and the voice it speaks there."""

    engine: TtsEngine  # a RemoteTtsEngine (it has .backend)
    voice: VoiceInfo

    @property
    def name(self) -> str:
        return self.engine.service


class _Stalled(Exception):
    pass


_DONE = object()


class RoutedTts(TtsEngine):
    """One request's route: the candidates in order; the first serves, the next ones take over (module doc)."""

    name = "remote"

    def __init__(
        self,
        candidates: list[Candidate],
        failovers: FailoverLog,
        first_audio_timeout_s: float,
        margin_s: float,
        passed_over: str = "",
    ):
        assert candidates
        self.candidates = candidates
        # The route's preferred backend when it was passed over for its health (counted once the request starts).
        self.passed_over = passed_over
        self.failovers = failovers
        self.first_audio_timeout_s = first_audio_timeout_s
        self.margin_s = margin_s
        primary = candidates[0].engine
        self.service = primary.service
        self.primary = primary

    @property
    def native_sample_rate(self) -> int:
        return self.candidates[0].voice.native_sample_rate_hz

    @property
    def served_by(self) -> str:
        return self.primary.served_by

    async def voices(self) -> list[VoiceInfo]:
        return await self.primary.voices()

    # --- attempts ---------------------------------------------------------------------------------------------
    def _attempt(self, i: int, options: SynthesisOptions, deadline: float | None, errors: list) -> tuple:
        """(candidate, options for it, first-audio wait) for attempt ``i``; raises when the deadline is spent."""
        cand = self.candidates[i]
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= self.margin_s:
            if errors:
                raise errors[-1]
            raise DeadlineExceeded(f"deadline too short to call {cand.name}; allow more time")
        wait = None
        if i + 1 < len(self.candidates):  # leave time for the fallback
            wait = self.first_audio_timeout_s if remaining is None else min(self.first_audio_timeout_s, remaining / 2)
        language = options.language if cand.voice.speaks(options.language or "") else cand.voice.languages[0]
        opts = dataclasses.replace(options, voice=cand.voice.id, language=language, time_remaining=remaining)
        return cand, opts, wait

    def _give_up(self, i: int, error: BaseException, request_id: str, errors: list) -> None:
        """Attempt ``i`` failed with ``error``: fail over to the next candidate, or raise."""
        reason = "no_audio" if isinstance(error, _Stalled) else failover_reason(error)
        if reason is None or i + 1 >= len(self.candidates):
            if isinstance(error, _Stalled):
                raise DeadlineExceeded(str(error)) from None
            if reason == "resource_exhausted":  # every backend is full: retry when the first one expects room
                hints = [e.retry_after_s for e in (*errors, error) if e.retry_after_s is not None]
                error.retry_after_s = min(hints, default=None)
            raise error
        cand = self.candidates[i]
        if reason == "no_audio":
            cand.engine.backend.record_failure("no_audio")
        errors.append(DeadlineExceeded(str(error)) if isinstance(error, _Stalled) else error)
        self.failovers.record(cand.name, self.candidates[i + 1].name, reason, request_id)

    # --- Synthesize ---------------------------------------------------------------------------------------------
    def _count_passed_over(self, request_id: str) -> None:
        if self.passed_over:
            self.failovers.record(self.passed_over, self.candidates[0].name, "unhealthy", request_id)

    async def synthesize(self, text: str, options: SynthesisOptions) -> AsyncIterator[AudioPiece]:
        self._count_passed_over(options.request_id)
        deadline = None if options.time_remaining is None else time.monotonic() + options.time_remaining
        errors: list[VoiceError] = []
        for i in range(len(self.candidates)):
            cand, opts, wait = self._attempt(i, options, deadline, errors)
            pieces = cand.engine.synthesize(text, opts)
            try:
                first = await asyncio.wait_for(anext(pieces, _DONE), wait)
            except TimeoutError:
                await pieces.aclose()
                self._give_up(i, _Stalled(f"{cand.name} sent no audio within {wait:.1f}s"), opts.request_id, errors)
                continue
            except VoiceError as e:
                await pieces.aclose()
                self._give_up(i, e, opts.request_id, errors)
                continue
            relay = metrics.ROUTER_RELAY.labels("Synthesize")
            async with contextlib.aclosing(pieces):
                if first is _DONE:
                    return
                yield first
                while True:  # committed: audio went out, a failure from here on is the caller's status
                    piece = await anext(pieces, _DONE)
                    if piece is _DONE:
                        return
                    received = time.perf_counter()
                    yield piece  # returns once the servicer has written it to the caller
                    relay.observe(time.perf_counter() - received)

    # --- StreamingSynthesize ------------------------------------------------------------------------------------
    async def synthesize_text_stream(
        self, events: AsyncIterator[TextEvent], options: SynthesisOptions, policy: BufferPolicy
    ) -> AsyncIterator[AudioPiece]:
        self._count_passed_over(options.request_id)
        text = TextLog(events)
        pump = asyncio.create_task(text.pump(), name="text-log")
        deadline = None if options.time_remaining is None else time.monotonic() + options.time_remaining
        errors: list[VoiceError] = []
        spoken_end = 0  # end of the last text span whose audio was sent
        relay = metrics.ROUTER_RELAY.labels("StreamingSynthesize")
        try:
            for i in range(len(self.candidates)):
                cand, opts, _ = self._attempt(i, options, deadline, errors)
                has_next = i + 1 < len(self.candidates)
                base = spoken_end
                pieces = cand.engine.synthesize_text_stream(text.replay(base), opts, policy)
                last_audio = time.monotonic()
                try:
                    async with contextlib.aclosing(pieces):
                        while True:
                            pending = asyncio.ensure_future(anext(pieces, _DONE))
                            while True:
                                done, _ = await asyncio.wait({pending}, timeout=0.1 if has_next else None)
                                if done:
                                    break
                                if text.stalled(spoken_end, last_audio, self.first_audio_timeout_s, policy):
                                    pending.cancel()
                                    await asyncio.wait({pending})
                                    raise _Stalled(
                                        f"{cand.name} sent no audio for {self.first_audio_timeout_s:.1f}s"
                                        " while text waited to be spoken"
                                    )
                            piece = pending.result()
                            if piece is _DONE:
                                return
                            last_audio = time.monotonic()
                            piece = piece.shifted(base)
                            spoken_end = max(spoken_end, piece.text_end)
                            received = time.perf_counter()
                            yield piece
                            relay.observe(time.perf_counter() - received)
                except (VoiceError, _Stalled) as e:
                    self._give_up(i, e, opts.request_id, errors)
                    log.info("%s: continuing the text stream at character %d", opts.request_id, spoken_end)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump


class TextLog:
    """The text of a StreamingSynthesize call as it arrives (deltas, flush positions, end), replayable from any
    character so a fallback backend can take the stream over."""

    def __init__(self, events: AsyncIterator[TextEvent]):
        self.events = events
        self.text = ""
        self.flushes: list[int] = []  # text positions of flushes
        self.ended = False  # end_of_text came
        self.done = False  # the caller's events are over (or failed)
        self.error: BaseException | None = None  # the caller's bad message, raised to whoever replays
        self.arrived: list[tuple[int, float]] = []  # (text length after a delta, when it came)
        self.marks: list[tuple[int, float]] = []  # (text position, when) of flushes and the end
        self._changed = asyncio.Event()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def pump(self) -> None:
        try:
            async for event in self.events:
                if event.text:
                    self.text += event.text
                    self.arrived.append((len(self.text), time.monotonic()))
                if event.flush:
                    self.flushes.append(len(self.text))
                    self.marks.append((len(self.text), time.monotonic()))
                if event.end:
                    self.ended = True
                    self.marks.append((len(self.text), time.monotonic()))
                self._wake()
        except VoiceError as e:
            self.error = e
        finally:
            self.done = True
            self._wake()

    async def replay(self, start: int) -> AsyncIterator[TextEvent]:
        """Events for the text from ``start``: what is there now, then the rest as it comes."""
        pos = start
        flush_i = bisect.bisect_right(self.flushes, start)
        sent_end = False
        while True:
            changed = self._changed
            while flush_i < len(self.flushes):
                at = self.flushes[flush_i]
                if at > pos:
                    yield TextEvent(text=self.text[pos:at])
                    pos = at
                flush_i += 1
                yield TextEvent(flush=True)
            if len(self.text) > pos:
                chunk, pos = self.text[pos:], len(self.text)
                yield TextEvent(text=chunk)
                continue  # more may have come while that was taken
            if self.ended and not sent_end:
                sent_end = True
                yield TextEvent(end=True)
                continue
            if self.error is not None:
                raise self.error
            if self.done:
                return
            await changed.wait()

    def _arrival(self, pos: int) -> float | None:
        """When the character at ``pos`` arrived."""
        i = bisect.bisect_right([n for n, _ in self.arrived], pos)
        return self.arrived[i][1] if i < len(self.arrived) else None

    def stalled(self, spoken_end: int, last_audio: float, timeout: float, policy: BufferPolicy) -> bool:
        """The backend owes audio and sent none for ``timeout`` since it became due: text past ``spoken_end`` that
        the segmenter speaks (a sentence end followed by whitespace, a flush, the end, or complete words once no
        text came for max-wait) and ``timeout`` passed since then and since the last audio."""
        pending = self.text[spoken_end:]
        if not pending.strip():
            return False
        due: list[float] = []
        sentence = _SENTENCE_END.search(self.text, spoken_end)
        if sentence is not None:
            # The whitespace after a full stop makes it a sentence end (CJK stops need none).
            at = self._arrival(min(sentence.end(), len(self.text) - 1))
            if at is not None:
                due.append(at)
        due += [t for pos, t in self.marks if pos > spoken_end]
        if any(c.isspace() for c in pending.strip()) or pending[-1:].isspace():  # complete words: the timer speaks
            due.append(self.arrived[-1][1] + policy.max_wait_s)
        if not due:
            return False  # one unfinished word: nothing is due yet
        return time.monotonic() - max(last_audio, min(due)) > timeout
