"""The two-pass recognition stream shared by the CPU and GPU engines (the FunASR "2pass" pattern):

  16 kHz audio -> Silero VAD per 32 ms window -> Endpointer (SPEECH_START / SPEECH_END; in semantic mode the turn
                  model judges each pause: TURN_ESTIMATE, services/engines/asr/turn_model.py)
               -> pass 1, while speech lasts: a cheap incremental decoder; its changing hypothesis = interim results
               -> spotting, while an utterance is young and the stream asked for spot phrases: the pass-2 decoder,
                  greedy, on the utterance so far every few windows; a phrase heard = PHRASE_SPOTTED (before the final)
               -> drafts, when the stream asked: the same greedy decode every draft interval while spoken = DRAFT
               -> pass 2, started as a pause begins (speculative) or at each endpoint: an accurate decoder on the whole utterance = the final result

``TwoPassStream`` is a thin composition: it windows the audio, runs the VAD, hands each window and each endpointer
transition to the parts below, and sends what they make as events. Each part decides one thing and has its own
tests (tests/asr/stream/test_<module>.py):

  stream_audio.py   StreamAudio, StreamState   where the stream is: the audio kept for decoders, the utterance
  pause_judge.py    PauseJudge                 does a pause end the utterance / the turn (Endpointer, turn model,
                                               text check) -> SPEECH_END reasons, TURN_ESTIMATE
  speculation.py    SpeculativeFinal           pass 2 started as a pause begins; used or dropped at its end
  interims.py       Interims                   pass 1 -> interim results (budgeted across the engine)
  finals.py         Finals                     pass 2 at each endpoint -> the final
  spotting.py       PhraseSpotter              stop words in a young utterance -> PHRASE_SPOTTED
  drafts.py         Drafts                     the utterance so far, decoded again while spoken -> DRAFT
  quick_decodes.py  QuickDecodes               the greedy decodes spotting and drafts share
  budgets.py        InterimBudget, FinalsInFlight   optional work counted across an engine's streams

Work per stream runs in threads (VAD and pass 1 on the engine's stream pool, pass 2 on its final pool) so the event
loop never blocks. ``feed`` returns once its audio has been through VAD and pass 1 (and pass 2 when it ended an
utterance), which is the backpressure a fast sender feels. Cancel (``close``) stops at the step in flight: a VAD
batch or one final decode; decoders go back to their pool when that step ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import AsyncIterator
from typing import Protocol

import numpy as np

from services.common import metrics
from services.common.engines import RESULT, SPEECH_END, SPEECH_START, AsrEvent, AsrStream, RecognitionOptions
from services.common.errors import FailedPrecondition
from services.engines.asr import pause_judge
from services.engines.asr.budgets import FinalsInFlight, InterimBudget
from services.engines.asr.drafts import Drafts
from services.engines.asr.finals import FinalJob, FinalRecognizer, Finals
from services.engines.asr.interims import Interims, PartialDecoder
from services.engines.asr.pause_judge import PauseJudge
from services.engines.asr.quick_decodes import QuickDecodes
from services.engines.asr.speculation import SpeculativeFinal
from services.engines.asr.spotting import PhraseSpotter, Spotting
from services.engines.asr.stream_audio import PAD_AFTER, PAD_BEFORE, PREROLL, StreamAudio, StreamState, ms
from services.engines.asr.turn_model import TurnSupport
from services.engines.asr.vad import RATE, WINDOW, SileroVad, level_db


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


class TwoPassStream(AsrStream):
    def __init__(
        self,
        engine: PipelineEngineParts,
        options: RecognitionOptions,
        language: str | None,
        partial: PartialDecoder | None,
    ):
        self._engine = engine
        self._vad_state = engine.vad.new_state()
        turn: TurnSupport | None = getattr(engine, "turn", None)
        endpointing = pause_judge.resolve(turn, options.endpointing)  # refuses semantic mode without a turn model
        labels = (engine.service, engine.name)
        self._state = StreamState(language)
        self._audio = StreamAudio()
        self._finals = Finals(engine, language, options.phrase_hints, labels)
        self._speculation = SpeculativeFinal(getattr(engine, "speculative_final_ms", 0), self._decode_so_far, labels)
        self._pauses = PauseJudge(endpointing, turn, self._state, self._speculation, labels, options.request_id)
        self._ep = self._pauses.endpointer
        self._interims = Interims(
            partial, getattr(engine, "interim_budget", None), engine.interim_interval_ms, language, labels
        )
        self._events: asyncio.Queue = asyncio.Queue()
        quick = QuickDecodes(engine, self._state, self._so_far)
        self._spotter = PhraseSpotter.for_stream(
            getattr(engine, "spotting", None), options.spot_phrases, quick, self._state, self._emit, labels
        )
        self._drafts = Drafts.for_stream(
            getattr(engine, "draft_budget", None),
            options.draft_interval_ms,
            engine.finals_in_flight,
            quick,
            self._state,
            self._emit,
            labels,
        )
        self._ended = False
        self._inflight: concurrent.futures.Future | None = None  # the VAD/pass-1 step running in a thread
        self._released = False
        self._release_lock = threading.Lock()
        self._open = metrics.ASR_OPEN_DECODERS.labels(*labels)
        self._audio_seconds = metrics.ASR_AUDIO_SECONDS.labels(*labels)
        self._open.inc()

    # --- AsrStream ------------------------------------------------------------------------------------------
    async def feed(self, pcm: bytes) -> None:
        if self._state.closed or self._ended:
            raise FailedPrecondition("the recognition stream has ended; open a new stream to send more audio")
        samples = np.frombuffer(pcm, dtype=np.int16)
        self._audio_seconds.inc(len(samples) / RATE)
        end = self._audio.add(samples)
        if self._drafts is not None:
            self._drafts.arrived(end, time.monotonic())
        await self._drain(flush=False)

    async def pause_spotting(self, paused: bool) -> None:
        """The stream's step reads the flag at its next window: paused, the utterance being spotted stops and no
        new one starts spotting; resumed, utterances that start from then on are spotted."""
        if self._spotter is not None:
            self._spotter.paused = paused

    async def finish(self) -> None:
        if self._state.closed or self._ended:
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
        if self._state.closed:
            return
        self._state.closed = True
        self._speculation.cancel()
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
        self._interims.release()
        if self._spotter is not None:
            self._spotter.end()
        self._open.dec()

    async def _run(self, fn, *args):
        if self._state.closed:
            raise asyncio.CancelledError
        future = self._engine.stream_pool.submit(fn, *args)
        self._inflight = future
        return await asyncio.wrap_future(future)

    async def _drain(self, flush: bool) -> None:
        while True:
            if not flush and len(self._audio.pending) < WINDOW:
                return  # no whole VAD window yet: no step to run (a 20 ms message spares a hand-off to a thread)
            events, job = await self._run(self._step, flush)
            for event in events:
                self._emit(event)
            if job is None:
                return
            await self._finalize(job)

    def _emit(self, event: AsrEvent) -> None:
        if self._state.closed:
            return
        self._events.put_nowait(event)
        if event.kind == SPEECH_START and self._spotter is not None:
            self._spotter.started()
        if event.kind == RESULT and not event.result.is_final:
            self._interims.sent()

    # --- the step (a thread) --------------------------------------------------------------------------------
    def _step(self, flush: bool) -> tuple[list[AsrEvent], FinalJob | None]:
        """Thread: window the pending audio through VAD and pass 1 until it is used up or an utterance ends."""
        events: list[AsrEvent] = []
        job: FinalJob | None = None
        pending, real_end = self._audio.batch(flush)
        cursor = 0
        vad = self._engine.vad
        while job is None and len(pending) - cursor >= WINDOW:
            if self._state.closed:
                break
            window = pending[cursor : cursor + WINDOW]
            cursor += WINDOW
            start = self._audio.push(window)
            self._pauses.hear(window)
            wf = window.astype(np.float32) / 32768.0
            p = vad.probability(self._vad_state, wf)
            fed = False
            for t in self._ep.push(p, start, level_db(wf)):
                if t.kind == "candidate":
                    self._state.utt_start = t.offset
                    self._interims.begin(self._audio, t.offset)
                    if self._spotter is not None:
                        self._spotter.begin(t.offset, continued=job is not None)
                    fed = True  # the candidate was started with the buffer up to this window's end
                elif t.kind == "start":
                    events.append(self._speech_started(t.offset))
                    if self._drafts is not None:
                        self._drafts.speech_started(t.offset)
                    self._pauses.speech_started(t.offset)
                elif t.kind == "discard":
                    self._utterance_dropped()
                elif t.kind == "turn":
                    events.append(self._pauses.turn_event(t, self._state.index))
                elif t.kind == "end":
                    events.append(AsrEvent(SPEECH_END, offset_ms=ms(t.offset)))
                    job = self._utterance_ended(t.offset, t.reason)
            if not fed:
                self._interims.accept(window)
            if self._ep.state == "speech":
                interim = self._interims.maybe_look(self._state.index, self._state.utt_start, self._audio.pos)
                if interim is not None:
                    events.append(interim)
            if self._spotter is not None:
                self._spotter.after_window(self._audio.pos, self._state.utt_start)
            if self._drafts is not None and job is None and len(pending) - cursor < 2 * WINDOW:
                # at the live edge only (no backlog left in this step)
                sounding = self._ep.state == "speech" and self._ep.quiet_since is None
                self._drafts.maybe_draft(self._audio.pos, sounding, self._speculation.pending)
            if self._speculation.enabled and job is None and self._ep.state == "speech":
                # semantic mode: only drops a decode when speech resumed (the judgement starts it: PauseJudge._judge)
                self._speculation.maybe_start(self._pauses.pause_key(), self._audio.pos)
            if not self._ep.in_utterance and job is None:
                self._audio.trim(PREROLL)
        self._audio.pending = pending[cursor:]
        if flush and job is None and not self._state.closed and not len(self._audio.pending):
            for t in self._ep.flush(min(real_end, self._audio.pos)):
                if t.kind == "start":
                    events.append(self._speech_started(t.offset))
                elif t.kind == "end":
                    events.append(AsrEvent(SPEECH_END, offset_ms=ms(t.offset)))
                    job = self._utterance_ended(t.offset, t.reason)
                else:
                    self._utterance_dropped()
        return events, job

    def _speech_started(self, offset: int) -> AsrEvent:
        """The candidate utterance is confirmed: its SPEECH_START."""
        self._interims.speech_started()
        if self._spotter is not None:
            self._spotter.confirmed()
        return AsrEvent(SPEECH_START, offset_ms=ms(offset))

    def _utterance_dropped(self) -> None:
        """The candidate was too short (discarded): pass 1 and spotting stop."""
        self._interims.end()
        if self._spotter is not None:
            self._spotter.end()

    def _utterance_ended(self, end: int, reason: str) -> FinalJob:
        """The utterance ended at ``end``: what its final needs, taken now (the audio is trimmed after)."""
        future = self._speculation.take(self._pauses.pause_key(), reason)
        self._pauses.utterance_ended(reason)
        if self._spotter is not None:
            self._spotter.end()
        utt_start = self._state.utt_start
        self._interims.finish(utt_start, end)
        audio, audio_start = self._audio.utterance(utt_start, end + PAD_AFTER)
        job = FinalJob(self._state.index, utt_start, end, audio, audio_start, reason, time.monotonic(), future)
        if reason == "max_utterance":
            self._state.utt_start = end
            self._audio.trim(self._audio.pos - end + PAD_BEFORE)
        else:
            self._audio.trim(PREROLL)
        return job

    def _so_far(self) -> np.ndarray:
        """Thread: the utterance in progress up to the windowed position (float32), for pass 2 or a quick decode."""
        return self._audio.utterance(self._state.utt_start, self._audio.pos)[0]

    def _decode_so_far(self) -> concurrent.futures.Future:
        return self._finals.submit(self._so_far())

    # --- the final (the loop, between steps) ----------------------------------------------------------------
    async def _finalize(self, job: FinalJob) -> None:
        text = await self._finals.decode(job)
        if self._state.language is None and text.language not in ("", "en") and self._interims.english_only:
            # Detected another language: pass 1 (English pocketsphinx) would only make noise from here on.
            self._interims.drop()
        if text.language:
            self._state.heard_language = text.language
        self._emit(self._finals.result(job, text, self._audio.pos))
        self._finals.observe(job)
        self._state.index += 1
