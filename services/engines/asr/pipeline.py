"""The two-pass recognition stream shared by the CPU and GPU engines (the FunASR "2pass" pattern):

  16 kHz audio -> Silero VAD per 32 ms window -> Endpointer (SPEECH_START / SPEECH_END; in semantic mode the turn
                  model judges each pause: TURN_ESTIMATE, services/engines/asr/turn_model.py)
               -> pass 1, while speech lasts: a cheap incremental decoder; its changing hypothesis = interim results
               -> spotting, while an utterance is young and the stream asked for spot phrases: the pass-2 decoder,
                  greedy, on the utterance so far every few windows; a phrase heard = PHRASE_SPOTTED (before the final)
               -> pass 2, at each endpoint: an accurate decoder on the whole utterance = the final result

Work per stream runs in threads (VAD and pass 1 on the engine's stream pool, pass 2 on its final pool) so the event
loop never blocks. ``feed`` returns once its audio has been through VAD and pass 1 (and pass 2 when it ended an
utterance), which is the backpressure a fast sender feels. Cancel (``close``) stops at the step in flight: a VAD
batch or one final decode; decoders go back to their pool when that step ends.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.common import metrics
from services.common.engines import (
    DRAFT,
    PHRASE_SPOTTED,
    RESULT,
    SEMANTIC_MODE,
    SPEECH_END,
    SPEECH_START,
    TEXT_CHECK_ON,
    TURN_ESTIMATE,
    AsrEvent,
    AsrStream,
    Draft,
    Hypothesis,
    RecognitionOptions,
    SpottedPhrase,
    TurnEstimate,
    WordTiming,
)
from services.common.errors import FailedPrecondition
from services.common.text import has_phrase, spoken_words
from services.common.turn_text import TextCheck, is_english
from services.engines.asr.turn_model import WINDOW_SAMPLES as TURN_WINDOW
from services.engines.asr.turn_model import TurnSupport
from services.engines.asr.vad import RATE, WINDOW, Endpointer, SileroVad, TextVeto, level_db

log = logging.getLogger("voicefleet.asr.pipeline")

PREROLL = int(0.3 * RATE)  # audio kept while silent, so decoders hear the start the VAD confirmed a bit late
PAD_BEFORE = int(0.2 * RATE)  # audio before the utterance's start given to both passes
PAD_AFTER = int(0.15 * RATE)  # audio after its end given to the final pass
# The turn model hears the turn from this long before its first speech (as Smart Turn's own pipeline gives it).
TURN_PRE_SPEECH = int(0.5 * RATE)
# Utterances that end the turn: the next speech starts a new one. (After max_silence the model had said the speaker
# was not done, and after max_utterance they were still talking: what follows continues the same turn.)
TURN_ENDING_REASONS = ("turn_complete", "sentence_end", "end_of_stream", "endpoint")
# The text check waits at most this long for the words before a pause (a final decode queued behind other streams'
# on a saturated server); past it the turn model alone decides.
TEXT_CHECK_WAIT_S = 3.0


class PartialDecoder(Protocol):
    """Pass 1: incremental. Called from one thread at a time."""

    #: Language of its hypotheses ("en" for pocketsphinx; "" when it follows the stream's language).
    language: str
    #: True when it only knows English: dropped for a stream whose detected language is another one.
    english_only: bool

    def start(self) -> None: ...
    def accept(self, pcm: np.ndarray) -> None: ...
    def hypothesis(self) -> str: ...
    def end(self) -> None: ...
    def release(self) -> None: ...


@dataclass(frozen=True)
class FinalText:
    text: str
    confidence: float
    language: str
    words: tuple[WordTiming, ...] = ()  # offsets relative to the audio given
    # The beam's other texts, best first, where the decode keeps them (the CPU engine's fitted window): only the text
    # check reads them (TwoPassStream._text_veto).
    alternatives: tuple[str, ...] = ()


class FinalRecognizer(Protocol):
    """Pass 2: a whole utterance (float32 16 kHz) -> text. Safe to call from several threads."""

    def recognize(self, audio: np.ndarray, language: str | None, hints: tuple[str, ...]) -> FinalText: ...

    def quick(self, audio: np.ndarray, language: str | None) -> str:
        """A cheap greedy decode of a short stretch (spotting: a young utterance so far); no hints."""


@dataclass
class _FinalJob:
    index: int
    start: int  # samples
    end: int
    audio: np.ndarray  # float32, from audio_start
    audio_start: int
    reason: str
    detected_at: float
    # A speculative decode of this utterance started during the hangover (see TwoPassStream._maybe_speculate).
    future: concurrent.futures.Future | None = None


class InterimBudget:
    """How many utterances, across every stream of an engine, run pass 1 at once (interims cost CPU per audio second;
    finals are what callers wait on). An utterance that starts when the budget is spent gets its final but no
    interims; streams are never refused for it. Thread-safe (pass 1 runs on the stream pool)."""

    def __init__(self, service: str, engine: str, slots: int, skipped=metrics.ASR_INTERIMS_SKIPPED):
        self.slots = slots
        self._used = 0
        self._lock = threading.Lock()
        self._skipped = skipped.labels(service, engine)

    def take(self) -> bool:
        with self._lock:
            if self._used >= self.slots:
                self._skipped.inc()
                return False
            self._used += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self._used -= 1


class FinalsInFlight:
    """Final decodes (speculative or not) submitted to an engine's final pool and not done yet, all streams counted:
    drafts are spare-capacity work and start only while none is (a draft beside a final slows the final a caller
    waits for)."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def track(self, future: concurrent.futures.Future) -> concurrent.futures.Future:
        with self._lock:
            self._count += 1
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: concurrent.futures.Future) -> None:
        with self._lock:
            self._count -= 1

    @property
    def idle(self) -> bool:
        return self._count == 0


class PipelineEngineParts(Protocol):
    service: str
    name: str
    vad: SileroVad
    stream_pool: concurrent.futures.Executor
    final_pool: concurrent.futures.Executor
    final: FinalRecognizer
    interim_interval_ms: int
    speculative_final_ms: int
    interim_budget: InterimBudget | None
    turn: TurnSupport | None  # semantic endpointing (None: silence mode only)
    spotting: Spotting | None  # spot phrases (None: not served)
    draft_budget: InterimBudget | None  # draft decodes in flight at once, all streams (None: drafts not served)
    finals_in_flight: FinalsInFlight


@dataclass(frozen=True)
class Spotting:
    """How an engine spots phrases (RecognitionConfig.spot_phrases; asr.spot_* in the config): the young utterance so
    far is decoded again by the final recognizer (``quick``) ``first_ms`` after its start, then every
    ``interval_ms`` (never two decodes of one stream at once) until ``window_ms``. ``budget``: utterances spotting at
    once across the engine's streams (an InterimBudget counting ASR_SPOTTING_SKIPPED)."""

    first_ms: int
    interval_ms: int
    window_ms: int
    budget: InterimBudget


def ms(samples: int) -> int:
    return samples * 1000 // RATE


class TwoPassStream(AsrStream):
    def __init__(
        self,
        engine: PipelineEngineParts,
        options: RecognitionOptions,
        language: str | None,
        partial: PartialDecoder | None,
    ):
        self._engine = engine
        self._options = options
        self._language = language  # whisper code, None = detect
        self._partial = partial  # None: no interim results
        self._vad_state = engine.vad.new_state()
        turn: TurnSupport | None = getattr(engine, "turn", None)
        endpointing = turn.resolve(options.endpointing) if turn is not None else options.endpointing
        self._semantic = endpointing.mode == SEMANTIC_MODE
        if self._semantic:
            if turn is None or turn.model is None:
                raise FailedPrecondition(
                    "config.endpointing.mode: semantic is not available on this server"
                    + (f": {turn.missing}" if turn is not None and turn.missing else "")
                )
            self._turn_model = turn.model
            veto = self._text_check(endpointing)
            self._ep = Endpointer(
                endpointing,
                self._judge,
                turn.judge_interval_ms,
                turn.heard_silence_ms,
                veto,
                self._sentence_check if veto is not None else None,
            )
        else:
            self._ep = Endpointer(endpointing)
        # Semantic mode: the last 8 s of audio (the turn model's window) and where the turn in progress started
        # (a turn may span utterances: one ended by max_silence goes on in the next).
        self._turn_audio: collections.deque[np.ndarray] = collections.deque(maxlen=TURN_WINDOW // WINDOW + 1)
        self._turn_start: int | None = None
        self._pending = np.zeros(0, dtype=np.int16)  # not yet windowed
        self._pos = 0  # samples windowed so far = stream offset of the next window
        self._windows: collections.deque[np.ndarray] = collections.deque()  # recent audio, _buf_start.._pos
        self._buf_start = 0
        self._index = 0  # utterance index
        self._utt_start = 0
        self._partial_on = False
        self._budget = getattr(engine, "interim_budget", None)
        self._budget_held = False  # this utterance holds a slot of the engine's interim budget
        self._since_look = 0
        self._last_hyp = ""
        self._start_wall: float | None = None
        self._interim_sent = False
        self._interim_compute = 0.0
        self._interval = int(engine.interim_interval_ms * RATE / 1000)
        self._speculate = int(getattr(engine, "speculative_final_ms", 0) * RATE / 1000)
        self._spec: tuple[int, concurrent.futures.Future] | None = None  # (silence start, decode)
        self._events: asyncio.Queue = asyncio.Queue()
        self._init_spotting(engine, options)
        self._init_drafts(engine, options)
        self._closed = False
        self._ended = False
        self._inflight: concurrent.futures.Future | None = None  # the VAD/pass-1 step running in a thread
        self._released = False
        self._release_lock = threading.Lock()
        labels = (engine.service, engine.name)
        self._open = metrics.ASR_OPEN_DECODERS.labels(*labels)
        self._first_interim = metrics.ASR_FIRST_INTERIM.labels(*labels)
        self._endpoint_latency = metrics.ASR_ENDPOINT_LATENCY.labels(*labels)
        self._rtf_final = metrics.ASR_RTF.labels(*labels, "final")
        self._rtf_interim = metrics.ASR_RTF.labels(*labels, "interim")
        self._audio_seconds = metrics.ASR_AUDIO_SECONDS.labels(*labels)
        self._speculative = {
            outcome: metrics.ASR_SPECULATIVE_FINALS.labels(*labels, outcome) for outcome in ("used", "dropped")
        }
        self._judgements = {
            outcome: metrics.ASR_TURN_JUDGEMENTS.labels(*labels, outcome)
            for outcome in ("complete", "incomplete", "vetoed")
        }
        self._labels = labels
        self._open.inc()

    def _init_spotting(self, engine: PipelineEngineParts, options: RecognitionOptions) -> None:
        """Spot phrases: thread-side state (``_step`` decides when to decode) and loop-side state (``_spotted``
        decides whether a decode's phrase can be sent: after its utterance's SPEECH_START, before its final)."""
        spotting: Spotting | None = getattr(engine, "spotting", None)
        phrases = [(p, tuple(spoken_words(p))) for p in options.spot_phrases]
        self._spotting = spotting if spotting is not None and phrases else None
        self._spot_phrases = [(p, w) for p, w in phrases if w]
        self._loop = asyncio.get_running_loop()
        # Thread side (the stream's step). Each candidate utterance that spots gets a serial.
        self._spot_serial = 0
        self._spot_on = False  # the utterance in progress is being spotted (holds a budget slot)
        self._spot_paused = False  # the caller paused spotting (pause_spotting; set on the loop, read here)
        self._spot_next = 0  # stream offset (samples) at which the next decode is due
        self._spot_until = 0
        self._spot_busy = False  # a decode of this stream is in flight (set here, cleared by its callback)
        self._spot_language: str | None = None  # the language of the stream's last final, for a stream that detects
        # Loop side. The serials of utterances confirmed by the SPEECH_STARTs _step returned, in order.
        self._start_serials: collections.deque[int] = collections.deque()
        self._starts = 0  # SPEECH_STARTs sent: the next utterance's index
        self._live_serial = 0  # serial of the utterance of the last SPEECH_START sent
        self._spot_found = 0  # serial of the last utterance a phrase was sent for (read by _step: stop spotting)
        self._spot_pending: tuple[int, AsrEvent] | None = None  # heard before its utterance was confirmed
        if self._spotting is not None:
            labels = (engine.service, engine.name)
            self._spot_cost = metrics.ASR_SPOT_DECODES.labels(*labels)
            self._spots_sent = metrics.ASR_PHRASES_SPOTTED.labels(*labels)

    def _init_drafts(self, engine: PipelineEngineParts, options: RecognitionOptions) -> None:
        """Drafts (RecognitionConfig.draft_interval_ms): ``_step`` decides when to decode (thread side), ``_drafted``
        whether the text still goes out (loop side: its utterance has no final yet)."""
        budget: InterimBudget | None = getattr(engine, "draft_budget", None)
        interval = options.draft_interval_ms if budget is not None else 0
        self._draft_budget = budget
        self._draft_interval = interval * RATE // 1000
        self._draft_next = 0  # stream offset (samples) at which the next draft is due
        self._draft_busy = False  # a draft decode of this stream is in flight (set here, cleared by its callback)
        self._last_draft: tuple[int, str] = (-1, "")  # loop side: the last Draft sent (utterance, text)
        # (stream sample where a fed piece ended, when it arrived): drafts only for audio arriving at the pace of
        # speech; one that came in a burst ends before a draft could help (appended on the loop, read by the step).
        self._arrived: collections.deque[tuple[int, float]] = collections.deque(maxlen=256)
        if interval:
            labels = (engine.service, engine.name)
            self._draft_cost = metrics.ASR_DRAFT_DECODES.labels(*labels)

    # --- AsrStream ------------------------------------------------------------------------------------------
    async def feed(self, pcm: bytes) -> None:
        if self._closed or self._ended:
            raise FailedPrecondition("the recognition stream has ended; open a new stream to send more audio")
        samples = np.frombuffer(pcm, dtype=np.int16)
        self._audio_seconds.inc(len(samples) / RATE)
        self._pending = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        if self._draft_interval:
            self._arrived.append((self._pos + len(self._pending), time.monotonic()))
        await self._drain(flush=False)

    async def pause_spotting(self, paused: bool) -> None:
        """The stream's step reads the flag at its next window: paused, the utterance being spotted stops and no
        new one starts spotting; resumed, utterances that start from then on are spotted."""
        self._spot_paused = paused

    async def finish(self) -> None:
        if self._closed or self._ended:
            return
        await self._drain(flush=True)
        self._ended = True
        self._events.put_nowait(None)

    async def events(self) -> AsyncIterator[AsrEvent]:
        while True:
            item = await self._events.get()
            if item is None:
                return
            yield item

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._spec is not None:
            self._spec[1].cancel()
        self._events.put_nowait(None)
        inflight = self._inflight
        if inflight is not None and not inflight.done():
            inflight.add_done_callback(lambda _f: self._release())  # the step in flight ends, then decoders go back
        else:
            self._release()

    # --- the loop -------------------------------------------------------------------------------------------
    def _release(self) -> None:
        with self._release_lock:
            if self._released:
                return
            self._released = True
        if self._partial is not None:
            try:
                self._partial.release()
            except Exception:  # noqa: BLE001 - a broken decoder must not keep the gauge up
                log.exception("releasing the interim decoder failed")
        self._give_back_budget()
        self._end_spotting()
        self._open.dec()

    async def _run(self, fn, *args):
        if self._closed:
            raise asyncio.CancelledError
        future = self._engine.stream_pool.submit(fn, *args)
        self._inflight = future
        return await asyncio.wrap_future(future)

    async def _drain(self, flush: bool) -> None:
        while True:
            if not flush and len(self._pending) < WINDOW:
                return  # no whole VAD window yet: no step to run (a 20 ms message spares a hand-off to a thread)
            events, job = await self._run(self._step, flush)
            for event in events:
                self._emit(event)
            if job is None:
                return
            await self._finalize(job)

    def _emit(self, event: AsrEvent) -> None:
        if self._closed:
            return
        self._events.put_nowait(event)
        if event.kind == SPEECH_START and self._spotting is not None:
            self._started()
        if event.kind == RESULT and not event.result.is_final and not self._interim_sent:
            self._interim_sent = True
            if self._start_wall is not None:
                self._first_interim.observe(time.monotonic() - self._start_wall)

    def _step(self, flush: bool) -> tuple[list[AsrEvent], _FinalJob | None]:
        """Thread: window the pending audio through VAD and pass 1 until it is used up or an utterance ends."""
        events: list[AsrEvent] = []
        job: _FinalJob | None = None
        pending = self._pending
        if flush and len(pending) % WINDOW:
            real_end = self._pos + len(pending)
            pending = np.concatenate([pending, np.zeros(WINDOW - len(pending) % WINDOW, dtype=np.int16)])
        else:
            real_end = self._pos + len(pending)
        cursor = 0
        vad = self._engine.vad
        while job is None and len(pending) - cursor >= WINDOW:
            if self._closed:
                break
            window = pending[cursor : cursor + WINDOW]
            cursor += WINDOW
            start = self._pos
            self._pos += WINDOW
            self._windows.append(window)
            if self._semantic:
                self._turn_audio.append(window)
            wf = window.astype(np.float32) / 32768.0
            p = vad.probability(self._vad_state, wf)
            fed = False
            for t in self._ep.push(p, start, level_db(wf)):
                if t.kind == "candidate":
                    self._begin_candidate(t.offset)
                    if self._spotting is not None:
                        self._begin_spotting(t.offset, continued=job is not None)
                    fed = True  # the candidate was started with the buffer up to this window's end
                elif t.kind == "start":
                    events.append(AsrEvent(SPEECH_START, offset_ms=ms(t.offset)))
                    self._start_wall = time.monotonic()
                    self._start_serials.append(self._spot_serial)
                    self._draft_next = t.offset + self._draft_interval
                    if self._turn_start is None:
                        self._turn_start = t.offset
                elif t.kind == "discard":
                    self._end_partial()
                    self._end_spotting()
                elif t.kind == "turn":
                    events.append(
                        self._turn_event(t.offset, t.probability, t.complete, t.silence, t.vetoed_by_word, t.sentence)
                    )
                elif t.kind == "end":
                    events.append(AsrEvent(SPEECH_END, offset_ms=ms(t.offset)))
                    job = self._make_job(t.offset, t.reason)
            if self._partial_on and not fed:
                t0 = time.perf_counter()
                self._partial.accept(window)
                self._interim_compute += time.perf_counter() - t0
                self._since_look += WINDOW
            if self._partial_on and self._ep.state == "speech" and self._since_look >= self._interval:
                interim = self._look()
                if interim is not None:
                    events.append(interim)
            if self._spot_on:
                self._maybe_spot()
            if self._draft_interval and job is None and len(pending) - cursor < 2 * WINDOW:
                self._maybe_draft()  # at the live edge only (no backlog left in this step)
            if self._speculate and job is None and self._ep.state == "speech":
                self._maybe_speculate()  # semantic mode: only drops a decode when speech resumed (see _judge)
            if not self._ep.in_utterance and job is None:
                self._trim(PREROLL)
        self._pending = pending[cursor:]
        if flush and job is None and not self._closed and not len(self._pending):
            for t in self._ep.flush(min(real_end, self._pos)):
                if t.kind == "start":
                    events.append(AsrEvent(SPEECH_START, offset_ms=ms(t.offset)))
                    self._start_wall = time.monotonic()
                    self._start_serials.append(self._spot_serial)
                elif t.kind == "end":
                    events.append(AsrEvent(SPEECH_END, offset_ms=ms(t.offset)))
                    job = self._make_job(t.offset, t.reason)
                else:
                    self._end_partial()
                    self._end_spotting()
        return events, job

    def _trim(self, keep: int) -> None:
        """Drop whole windows from the front, keeping at least ``keep`` samples."""
        while self._windows and (len(self._windows) - 1) * WINDOW >= keep:
            self._windows.popleft()
            self._buf_start += WINDOW

    def _slice(self, start: int, end: int) -> np.ndarray:
        first = max(0, (start - self._buf_start) // WINDOW)
        last = min(len(self._windows), -(-(end - self._buf_start) // WINDOW))
        if last <= first:
            return np.zeros(0, dtype=np.int16)
        base = self._buf_start + first * WINDOW
        joined = np.concatenate([self._windows[i] for i in range(first, last)])
        return joined[max(0, start - base) : max(0, end - base)]

    def _begin_candidate(self, offset: int) -> None:
        self._utt_start = offset
        self._start_wall = None
        self._interim_sent = False
        self._last_hyp = ""
        self._interim_compute = 0.0
        if self._partial is not None and not self._partial_on and self._budget is not None:
            self._budget_held = self._budget.take()
            if not self._budget_held:
                return  # over budget: this utterance gets its final only
        if self._partial is not None:
            t0 = time.perf_counter()
            self._partial.start()
            self._partial.accept(self._slice(offset - PAD_BEFORE, self._pos))
            self._interim_compute += time.perf_counter() - t0
            self._partial_on = True
            self._since_look = 0

    def _end_partial(self) -> None:
        if self._partial_on:
            self._partial.end()
            self._partial_on = False
        self._give_back_budget()

    def _give_back_budget(self) -> None:
        if self._budget_held:
            self._budget_held = False
            self._budget.give_back()

    def _look(self) -> AsrEvent | None:
        t0 = time.perf_counter()
        text = self._partial.hypothesis().strip()
        self._interim_compute += time.perf_counter() - t0
        self._since_look = 0
        if not text or text == self._last_hyp:
            return None
        old, new = self._last_hyp.split(), text.split()
        same = 0
        while same < min(len(old), len(new)) and old[same] == new[same]:
            same += 1
        self._last_hyp = text
        result = Hypothesis(
            transcript=text,
            is_final=False,
            utterance_index=self._index,
            utterance_start_ms=ms(self._utt_start),
            utterance_end_ms=ms(self._pos),
            audio_processed_ms=ms(self._pos),
            # Share of words unchanged since the previous interim: a rough "will it stay" (pass 1 is not pass 2).
            stability=round(0.9 * same / len(new), 3),
            language=self._partial.language or (self._language or ""),
        )
        return AsrEvent(RESULT, result=result)

    # --- spotting (RecognitionConfig.spot_phrases) ------------------------------------------------------------
    def _begin_spotting(self, offset: int, continued: bool) -> None:
        """Thread: a candidate utterance starts. ``continued``: it goes on from one cut at max_utterance (not young:
        not spotted)."""
        self._end_spotting()
        self._spot_serial += 1
        if continued or self._spot_paused or not self._spotting.budget.take():
            return
        self._spot_on = True
        self._spot_next = offset + self._spotting.first_ms * RATE // 1000
        self._spot_until = offset + self._spotting.window_ms * RATE // 1000

    def _end_spotting(self) -> None:
        if self._spot_on:
            self._spot_on = False
            self._spotting.budget.give_back()

    def _maybe_spot(self) -> None:
        """Thread, after each window of a spotted utterance: decode the utterance so far when one is due."""
        if self._spot_found == self._spot_serial or self._pos > self._spot_until or self._closed or self._spot_paused:
            self._end_spotting()  # a phrase was heard (one event per utterance), the utterance is no longer young,
            return  # or the caller paused spotting
        if self._spot_busy or self._pos < self._spot_next:
            return
        self._spot_next = self._pos + self._spotting.interval_ms * RATE // 1000
        self._spot_busy = True
        deliver = functools.partial(self._spotted, self._spot_serial, self._utt_start, self._pos)
        self._quick_decode("spotting", self._spot_cost, finished=self._spot_decoded, deliver=deliver)

    def _spot_decoded(self) -> None:
        self._spot_busy = False

    def _quick_decode(self, what: str, cost, *, finished, deliver) -> None:
        """Thread: a greedy decode of the utterance so far (the final recognizer's ``quick``: spotting, drafts) on the
        final pool, its compute observed in ``cost``. When it ends, ``finished()`` runs on the pool's thread; then,
        unless it was cancelled, failed (logged as a ``what`` decode) or the stream closed, ``deliver(text)`` on the
        loop. Not started (the pool is shut down: the engine is closing): ``finished()`` at once, nothing delivered."""
        audio, _ = self._utterance_audio(self._pos)
        language = self._language or self._spot_language

        def decode() -> str:
            t0 = time.perf_counter()
            try:
                return self._engine.final.quick(audio, language)
            finally:
                cost.observe(time.perf_counter() - t0)

        try:
            future = self._engine.final_pool.submit(decode)
        except RuntimeError:
            finished()
            return

        def done(f: concurrent.futures.Future) -> None:  # on the final pool's thread
            finished()
            if f.cancelled():
                return
            if f.exception() is not None:
                log.warning("a %s decode failed: %s", what, f.exception())
                return
            if self._closed:
                return
            with contextlib.suppress(RuntimeError):  # the event loop closed meanwhile
                self._loop.call_soon_threadsafe(deliver, f.result())

        future.add_done_callback(done)

    def _spotted(self, serial: int, utt_start: int, end: int, text: str) -> None:
        """Loop: a spotting decode of utterance ``serial`` heard ``text``. A phrase in it goes out now if its
        utterance is the one confirmed last and has no final yet, or right after its SPEECH_START if it is not
        confirmed yet; otherwise (discarded, or finalized) it is dropped."""
        if self._closed or serial <= self._spot_found:
            return
        heard = spoken_words(text)
        phrase = next((p for p, w in self._spot_phrases if has_phrase(heard, w)), None)
        if phrase is None:
            return
        spotted = SpottedPhrase(phrase, text.strip(), 0, ms(utt_start), ms(end))
        event = AsrEvent(PHRASE_SPOTTED, offset_ms=ms(end), spotted=spotted)
        if serial == self._live_serial:
            self._send_spotted(serial, event)
        elif serial > self._live_serial and self._spot_pending is None:
            self._spot_pending = (serial, event)

    def _started(self) -> None:
        """Loop: a SPEECH_START went out."""
        self._starts += 1
        self._live_serial = self._start_serials.popleft() if self._start_serials else 0
        pending, self._spot_pending = self._spot_pending, None
        if pending is not None and pending[0] == self._live_serial:
            self._send_spotted(*pending)
        elif pending is not None and pending[0] > self._live_serial:
            self._spot_pending = pending  # a later candidate's

    def _send_spotted(self, serial: int, event: AsrEvent) -> None:
        index = self._starts - 1
        if self._index != index:
            return  # its final went out already
        self._spot_found = serial
        spotted = dataclasses.replace(event.spotted, utterance_index=index)
        self._spots_sent.inc()
        self._emit(dataclasses.replace(event, spotted=spotted))

    # --- drafts (RecognitionConfig.draft_interval_ms) --------------------------------------------------------------
    def _maybe_draft(self) -> None:
        """Thread, after each window: decode the utterance so far when a draft is due. Only while the speaker is
        sounding (once a pause begins the speculative final takes the final recognizer, and a draft then would only
        slow it down; the final follows shortly anyway), and only while no final of any stream is being decoded."""
        if (
            self._ep.state != "speech"
            or self._ep.quiet_since is not None
            or self._spec is not None
            or self._draft_busy
            or self._pos < self._draft_next
            or self._closed
            or not self._engine.finals_in_flight.idle
            or not self._live()
        ):
            return
        if not self._draft_budget.take():
            self._draft_next = self._pos + WINDOW  # the engine's drafts are all in flight: try at the next window
            return
        self._draft_next = self._pos + self._draft_interval
        self._draft_busy = True
        deliver = functools.partial(self._drafted, self._index, self._utt_start, self._pos)
        self._quick_decode("draft", self._draft_cost, finished=self._draft_decoded, deliver=deliver)

    def _draft_decoded(self) -> None:
        self._draft_busy = False
        self._draft_budget.give_back()

    def _live(self) -> bool:
        """The last draft interval of audio arrived over at least half that long: a live speaker, not a burst (a
        file sent as fast as it reads, a client catching up)."""
        arrived = list(self._arrived)
        if not arrived:
            return False
        since = self._pos - self._draft_interval
        earlier = next((wall for end, wall in reversed(arrived) if end <= since), None)
        if earlier is None:
            return False  # it all came at once (or too long ago to tell)
        return arrived[-1][1] - earlier >= self._draft_interval / RATE / 2

    def _drafted(self, index: int, utt_start: int, end: int, text: str) -> None:
        """Loop: a draft of utterance ``index`` is done; it goes out unless that utterance's final went out first, or
        it says nothing new."""
        text = text.strip()
        if self._closed or self._index != index or not text or (index, text) == self._last_draft:
            return
        self._last_draft = (index, text)
        self._emit(AsrEvent(DRAFT, offset_ms=ms(end), draft=Draft(text, index, ms(utt_start), ms(end))))

    def _recognize(self, audio: np.ndarray) -> tuple[FinalText, float]:
        """Thread (final pool): pass 2 on one utterance; returns the text and the compute time."""
        t0 = time.perf_counter()
        text = self._engine.final.recognize(audio, self._language, self._options.phrase_hints)
        return text, time.perf_counter() - t0

    def _maybe_speculate(self) -> None:
        """Start pass 2 once the silence after speech has lasted ``speculative_final_ms``, before the hangover ends:
        if the utterance does end there, its final is (nearly) ready; if speech resumes, the decode is dropped.
        Semantic mode counts the silence by level alone (``Endpointer.quiet_since``): Silero's probability falls
        100-200 ms after the last word, about when the turn model first judges, and the decode then sat on the
        critical path (speech end -> final ~300 ms); from the level it is (nearly) done by the judgement. Its key is
        where the quiet began: sound again drops it, and so does a pause the VAD places elsewhere."""
        silence = self._pause_key()
        if self._spec is not None and self._spec[0] != silence:
            self._drop_speculation()  # speech came back: a decode still waiting in line never runs
        if silence is None or self._spec is not None or self._pos - silence < self._speculate:
            return
        self._start_speculation(silence)

    def _drop_speculation(self) -> None:
        self._spec[1].cancel()
        self._spec = None
        self._speculative["dropped"].inc()

    def _pause_key(self) -> int | None:
        """Where the pause a speculative final belongs to began: by level in semantic mode (the VAD's silence when the
        level never went quiet, as over steady noise), by the VAD otherwise."""
        if self._semantic and self._ep.quiet_since is not None:
            return self._ep.quiet_since
        return self._ep.silence_start

    def _utterance_audio(self, end: int) -> tuple[np.ndarray, int]:
        """Pass 2's input: the utterance from PAD_BEFORE before its start to ``end`` (float32), and the stream offset
        where it starts. At the very start of a stream less than PAD_BEFORE was heard before the speech: silence
        stands in for the rest (the offset is then before 0). Given speech from its first sample, whisper tiny.en
        dropped an utterance's short last word far more often ("… it takes to" heard as "… it takes?"; the text check
        needs that word: docs/asr.md#the-text-check)."""
        start = self._utt_start - PAD_BEFORE
        audio = self._slice(max(self._buf_start, start), end)
        if start < self._buf_start:
            audio = np.concatenate([np.zeros(self._buf_start - start, dtype=np.int16), audio])
        return audio.astype(np.float32) / 32768.0, start

    def _start_speculation(self, silence: int) -> None:
        audio, _ = self._utterance_audio(self._pos)
        self._spec = (
            silence,
            self._engine.finals_in_flight.track(self._engine.final_pool.submit(self._recognize, audio)),
        )

    def _judge(self, heard_end: int, speech_end: int) -> float:
        """Thread (the stream's step, inside push): the turn model on the turn's last 8 s up to ``heard_end``.
        A pause with no speculative final yet (quiet by the VAD before the level said so) starts one here, so it
        decodes while the model runs."""
        silence = self._pause_key()
        if self._spec is not None and self._spec[0] != silence:
            self._drop_speculation()  # a decode of an earlier pause (speech came back since)
        if self._speculate and self._spec is None and silence is not None:
            self._start_speculation(silence)
        start = self._turn_start if self._turn_start is not None else self._utt_start
        ring_start = self._pos - len(self._turn_audio) * WINDOW
        first = max(start - TURN_PRE_SPEECH, heard_end - TURN_WINDOW, ring_start)
        audio = np.concatenate(self._turn_audio)[first - ring_start : heard_end - ring_start]
        return self._turn_model.probability(audio.astype(np.float32) / 32768.0)

    def _turn_event(
        self,
        offset: int,
        probability: float,
        complete: bool,
        silence: int,
        vetoed_by_word: str = "",
        sentence: str = "",
    ) -> AsrEvent:
        self._judgements["vetoed" if vetoed_by_word else "complete" if complete else "incomplete"].inc()
        if vetoed_by_word:
            log.info(
                "turn kept open at %d ms: the turn model said complete (p=%.2f) but the text so far ends with %r"
                " (request %s)",
                ms(offset),
                probability,
                vetoed_by_word,
                self._options.request_id,
            )
        estimate = TurnEstimate(
            probability=round(probability, 4),
            complete=complete,
            silence_ms=ms(silence),
            offset_ms=ms(offset),
            utterance_index=self._index,
            vetoed_by_word=vetoed_by_word,
            sentence_end=bool(sentence),
            transcript=sentence,
        )
        return AsrEvent(TURN_ESTIMATE, offset_ms=ms(offset), turn=estimate)

    # --- the text check (semantic mode; services/common/turn_text.py) ------------------------------------------------
    def _text_check(self, endpointing) -> TextVeto | None:
        """The Endpointer's veto for this stream: None when the resolved setting is off."""
        if endpointing.text_check != TEXT_CHECK_ON:
            return None
        self._turn_text = TextCheck(endpointing.non_final_words)
        return self._text_veto

    def _pause_words(self) -> FinalText | None:
        """Thread (the stream's step, inside push, at a judgement): the speculative final of the utterance so far
        (started as the pause began, or here when speculative finals are off; it becomes the final if this pause
        ends the utterance, so waiting for it costs the caller nothing). None when it is missing or not English.
        The decode is the one keyed to this pause as ``_maybe_speculate`` keys it (by level in semantic mode): keyed
        by the VAD's silence instead, it dropped the decode started ~100 ms earlier and waited for a new one."""
        silence = self._pause_key()
        if silence is None:
            return None
        if self._spec is None or self._spec[0] != silence:
            if self._spec is not None:
                self._drop_speculation()
            self._start_speculation(silence)
        try:
            text, _ = self._spec[1].result(timeout=TEXT_CHECK_WAIT_S)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            return None
        except Exception:  # noqa: BLE001 - the final's own await reports a failed decode; the model decides here
            log.exception("the text check's decode failed")
            return None
        return text if is_english(text.language or self._language or "") else None

    def _text_veto(self) -> str:
        """The word before the pause that keeps the turn open when the model said complete ("" when none): the
        decode's, or that of another text of its beam with as many words (TextCheck.veto_beam). A weak last word sits
        on a knife's edge in whisper tiny.en: on an AVX2-only AMD EPYC "... how long it takes to" came out "... takes
        it?" with 128 ms of the pause and "... takes to" with 96, 160 or 200 ms, "to" among the beam's others then
        (bench/results/cpu-probes-2026-11-28-amd/)."""
        words = self._pause_words()
        return self._turn_text.veto_beam(words.text, words.alternatives) if words is not None else ""

    def _sentence_check(self) -> str:
        """When the model said incomplete: the words before the pause if they read as a finished sentence, else ""."""
        words = self._pause_words()
        return words.text if words is not None and self._turn_text.finished(words.text) else ""

    def _make_job(self, end: int, reason: str) -> _FinalJob:
        spec, self._spec = self._spec, None
        pause_ended = reason in ("endpoint", "turn_complete", "sentence_end", "max_silence")
        pause = self._pause_key()
        if spec is not None and not (pause_ended and spec[0] == pause):
            spec[1].cancel()
            self._speculative["dropped"].inc()
            spec = None
        elif spec is not None:
            self._speculative["used"].inc()
        if reason in TURN_ENDING_REASONS:
            self._turn_start = None
        self._end_spotting()
        if self._partial_on:
            t0 = time.perf_counter()
            self._end_partial()
            self._interim_compute += time.perf_counter() - t0
            if end > self._utt_start:
                self._rtf_interim.observe(self._interim_compute / ((end - self._utt_start) / RATE))
        audio, audio_start = self._utterance_audio(end + PAD_AFTER)
        job = _FinalJob(self._index, self._utt_start, end, audio, audio_start, reason, time.monotonic())
        if spec is not None:
            job.future = spec[1]
        if reason == "max_utterance":
            self._utt_start = end
            self._trim(self._pos - end + PAD_BEFORE)
        else:
            self._trim(PREROLL)
        return job

    async def _finalize(self, job: _FinalJob) -> None:
        future = job.future or self._engine.finals_in_flight.track(
            self._engine.final_pool.submit(self._recognize, job.audio)
        )
        # A cancel leaves this one decode to finish; nothing follows it.
        text, compute = await asyncio.wrap_future(future)
        if len(job.audio):
            self._rtf_final.observe(compute / (len(job.audio) / RATE))
        if (
            self._language is None
            and text.language not in ("", "en")
            and self._partial is not None
            and self._partial.english_only
        ):
            # Detected another language: pass 1 (English pocketsphinx) would only make noise from here on.
            self._run_later_release_partial()
        if text.language:
            self._spot_language = text.language
        words = tuple(
            WordTiming(w.word, w.start_ms + ms(job.audio_start), w.end_ms + ms(job.audio_start), w.confidence)
            for w in text.words
        )
        result = Hypothesis(
            transcript=text.text,
            is_final=True,
            utterance_index=job.index,
            utterance_start_ms=ms(job.start),
            utterance_end_ms=ms(job.end),
            audio_processed_ms=ms(self._pos),
            stability=1.0,
            confidence=text.confidence,
            language=text.language,
            words=words,
        )
        self._emit(AsrEvent(RESULT, result=result))
        self._endpoint_latency.observe(time.monotonic() - job.detected_at)
        metrics.ASR_UTTERANCES.labels(*self._labels, job.reason).inc()
        self._index += 1

    def _run_later_release_partial(self) -> None:
        partial, self._partial = self._partial, None
        self._partial_on = False
        self._give_back_budget()
        partial.release()
