"""``DialogueSession``: the composition of the dialogue's parts around one ASR stream (the package docstring,
services/conversation/dialogue/__init__.py, draws them).

The session owns what ties the parts together: the recognizer stream (open, rotate at ACTION_END_OF_TURN, read), the
user turn being heard (its finals so far, its start), the state (LISTENING -> THINKING -> SPEAKING -> LISTENING), the
reply task of each turn and the events to the caller. Each decision is a part's: the commit (turn_commit.py), speech
over the reply (overlap.py), the pacing of reply audio (playout.py), what was heard of it (heard.py), the bounded
context (context.py), the level of the caller's audio (caller_sound.py, long_turn.py), stream time and the
recognizer's pace (stream_time.py), reading ahead (read_ahead.py).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator

import grpc

from services.common import audio, metrics
from services.common.engines import (
    DRAFT,
    END_OF_TURN,
    END_OF_TURN_JUDGED,
    INTERRUPT,
    INTERRUPTED,
    LISTENING,
    MUTE,
    PHRASE_SPOTTED,
    REPLY_AUDIO,
    REPLY_TEXT,
    RESPOND,
    RESULT,
    SPEAKING,
    SPEECH_END,
    SPEECH_START,
    STATE,
    THINKING,
    TURN_COMPLETE,
    TURN_ERROR,
    TURN_ESTIMATE,
    UNMUTE,
    USER_TRANSCRIPT,
    AsrEngine,
    AsrStream,
    AudioPiece,
    Draft,
    Hypothesis,
    RecognitionOptions,
    SessionOptions,
    SpottedPhrase,
    StsEvent,
    StsSession,
)
from services.common.errors import FailedPrecondition, InvalidArgument, ResourceExhausted, VoiceError
from services.common.tools import recognizer_hints
from services.conversation.barge_in import DEFAULT_STOP_WORDS, words
from services.conversation.dialogue.caller_sound import CallerSound
from services.conversation.dialogue.context import Context, Message
from services.conversation.dialogue.function_calls import CompletedCall, FunctionCalls
from services.conversation.dialogue.heard import heard_text
from services.conversation.dialogue.limits import RATE, DialogueLimits
from services.conversation.dialogue.long_turn import LongTurnGate
from services.conversation.dialogue.overlap import Overlap, reply_echo
from services.conversation.dialogue.playout import Playout
from services.conversation.dialogue.read_ahead import ReadAhead
from services.conversation.dialogue.reply import Reply, UserTurn
from services.conversation.dialogue.stream_time import RecognizerPace, StreamTime
from services.conversation.dialogue.turn_commit import COMMIT, DISCARD, TurnCommit
from services.conversation.dialogue.turn_end import turn_end
from services.conversation.echo import EchoCanceller
from services.conversation.relay import AudioRing, EventRelay, shifted
from services.conversation.turn_words import JUDGEMENT_WAIT_MS, TurnSigns, WordsJudge

log = logging.getLogger("voicefleet.conversation.dialogue")

USER_AUDIO_PAD_MS = 200  # audio kept before a user turn's start for engines that answer audio
DEFAULT_TOOL_TIMEOUT_S = 10.0  # a function call's wait for its output when the options name none (the servicer does)


class ReplySink:
    """What ``generate_reply`` writes to: text deltas as they come, audio pieces (paced to playback, playout.py), and
    function calls (function_calls.py)."""

    def __init__(self, playout: Playout, reply: Reply, calls: FunctionCalls | None = None):
        self._playout = playout
        self._reply = reply
        self._calls = calls

    @property
    def reply_text(self) -> str:
        return self._reply.text

    async def text(self, delta: str) -> None:
        await self._playout.text(self._reply, delta)

    async def audio(self, piece: AudioPiece) -> None:
        await self._playout.audio(self._reply, piece)

    async def function_call(self, name: str, arguments: str, filler=None) -> CompletedCall:
        """Call the caller's function ``name`` (once the turn has committed) and return the call with its output;
        both join the context with the turn. ``filler``: how the reply says its filler while the output is late."""
        if self._calls is None:
            raise FailedPrecondition("this session takes no function calls")
        done = await self._calls.call(self._reply, name, arguments, filler)
        self._reply.calls.append(done)
        return done


class DialogueSession(StsSession):
    """Turn-taking around an ASR stream; subclasses give ``generate_reply``."""

    #: Engines that answer the user's audio itself (MOSS-Speech) keep each turn's audio (bounded).
    keeps_user_audio = False
    #: Engines with a text brain read the user's words ahead of the turn (``read_ahead``); the others ask for no
    #: drafts.
    reads_ahead = False
    #: Engines with a text brain judge a candidate end of turn by its words too (``judge_words``, turn_words.py).
    judges_words = False
    #: Engines that can reply without a user turn (ACTION_RESPOND: a greeting, a prompt after a silence). A text
    #: brain continues the conversation; MOSS-Speech answers the user's speech and says nothing without it.
    speaks_unprompted = True

    def __init__(self, service: str, served_by: str, asr: AsrEngine, options: SessionOptions, limits: DialogueLimits):
        self.service = service
        self.served_by = served_by
        self.asr = asr
        self.options = options
        self.limits = limits
        self.system_prompt = options.system_prompt or limits.default_system_prompt
        self.max_tokens = options.sampling.max_tokens or limits.default_max_tokens
        self.context = Context(limits.max_context_turns, limits.max_context_chars)
        # The last reply that ended whole and what the context kept of it: a caller that played it from a buffer
        # may say later how much it played (INTERRUPT with played_ms while listening: _cut_last_reply).
        self._last_kept: tuple[Reply, Message] | None = None
        self._relay = EventRelay()  # events to the caller: (event, what a REPLY_AUDIO/TURN_COMPLETE accounts for)
        self._stream: AsrStream | None = None
        self._spotting = self._spotting_paused = False  # the stream spots the stop words; paused (set at open)
        self._stream_lock = asyncio.Lock()  # feed vs. end-of-turn stream rotation
        self._asr_task: asyncio.Task | None = None
        self._turn_task: asyncio.Task | None = None
        self._gen_task: asyncio.Task | None = None
        self._reply: Reply | None = None
        self._closing = False
        self._finishing = False
        self.state = LISTENING
        self.turn = 0  # index of the turn being heard or answered
        self.turns_done = 0
        self._muted = False
        self._session_s = 0.0
        self._labels = (service, served_by.rsplit("/", 1)[-1])
        # Stream time (ms of user audio fed, across ASR stream rotations), wall times of its arrival, and how far
        # behind it the recognizer reports.
        self._time = StreamTime()
        self._pace = RecognizerPace(self._time)
        self._sound = CallerSound()
        # The user turn being heard.
        self._pending: list[str] = []
        self._pending_chars = 0
        self._turn_start_ms: int | None = None
        self._speech_active = False
        self._last_speech_end_ms: int | None = None
        self._utterances = 0  # SPEECH_STARTs seen on the current ASR stream (= next utterance index)
        # The turn model's last judgement (utterance index, probability) and the last final (utterance index,
        # confidence): the signs the words judgement weighs with the words (turn_words.py TurnSigns).
        self._last_judged: tuple[int, float] | None = None
        self._last_final: tuple[int, float] | None = None
        self._overlap = Overlap(options.barge_in, limits.barge_in_unheard_ms, self._labels)
        # The brain's reading of a candidate's words (turn_words.py): unfinished words wait for more speech.
        words_judge = None
        if self.judges_words and limits.words_unfinished_below is not None:
            words_judge = WordsJudge(
                self.judge_words,
                limits.words_unfinished_below,
                self._labels,
                self._check_commit,
                sure=limits.words_sure,
            )
        # Preemptive reply: started at a candidate end of turn, held until the user has been silent turn_commit_ms.
        self._commit_rule = TurnCommit(limits.turn_commit_ms, options.endpointing, words_judge, limits.words_doubt_ms)
        self._words = words_judge
        self._read_ahead = ReadAhead(self.read_ahead, self._labels)
        self._playout = Playout(limits, self._emit, lambda: self._set_state(SPEAKING))
        # The agent's calls of the caller's functions (function_calls.py).
        self._calls = FunctionCalls(
            self._emit, options.tool_timeout_s or DEFAULT_TOOL_TIMEOUT_S, self._labels, options.tool_filler_s
        )
        # The reply leaking back into the caller's microphone is cancelled before anything listens to it, unless the
        # caller's own canceller did that already.
        cancel = limits.echo_cancellation and not options.client_cancels_echo
        self._echo = EchoCanceller(RATE) if cancel else None
        self._echo_resampler: audio.StreamResampler | None = None
        # Over-long turn: recognition off until the user pauses.
        self._long_turn = LongTurnGate()
        # Recent user audio for engines that answer audio (bounded: the longest turn + padding).
        self._audio_ring = AudioRing(int((limits.max_user_turn_s + 2) * RATE))

    # --- StsSession -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._open_stream()
        self._emit(StsEvent(STATE, self.turn, state=LISTENING))

    async def feed(self, pcm: bytes) -> None:
        if self._relay.ended or self._closing:
            raise FailedPrecondition("the conversation has ended; open a new session to talk again")
        seconds = len(pcm) / 2 / RATE
        self._session_s += seconds
        if self._session_s > self.limits.max_session_s:
            raise ResourceExhausted(
                f"audio: the session passed {self.limits.max_session_s:g} s of audio (moss_sts.max_session_seconds);"
                " open a new session to go on"
            )
        now = time.monotonic()
        if self._echo is not None:
            pcm = self._echo.process(pcm)  # whole 10 ms frames: a remainder comes with the next call
        if self.keeps_user_audio:
            self._audio_ring.append(pcm)
        to_asr = pcm
        if self._muted:
            to_asr = bytes(len(pcm))
        elif self._long_turn.skipping:
            self._long_turn.listen(pcm, self.options.endpointing.hangover_ms)
            to_asr = bytes(len(pcm))  # silence: the recognizer ends the utterance, nothing new is recognized
        async with self._stream_lock:
            self._time.fed(len(pcm) // 2, now)
            if self._stream is not None and self._spotting and self._spotting_paused != (self.state == LISTENING):
                self._spotting_paused = self.state == LISTENING
                await self._stream.pause_spotting(self._spotting_paused)
            if self._stream is not None and to_asr:
                await self._stream.feed(to_asr)
        if to_asr and not self._muted:
            self._sound.track(to_asr, self._time.fed_ms)
        self._check_limits()
        if self._commit_rule.candidate is not None:
            await asyncio.sleep(0)  # let the recognizer's events for this audio (a SPEECH_START) be read first
        self._check_commit()

    async def control(self, action: str, played_ms: int | None = None) -> None:
        if action == INTERRUPT:
            if self.state != LISTENING:
                self._interrupt("client", played_ms)
            elif played_ms is not None:
                self._cut_last_reply(played_ms)
            return  # listening: nothing to stop (not an error)
        if action == MUTE:
            self._muted = True
        elif action == UNMUTE:
            self._muted = False
        elif action == END_OF_TURN:
            await self._end_turn_now()
        elif action == RESPOND:
            await self._respond()
        else:
            raise InvalidArgument("control.action", f"unknown action {action!r}")

    async def _end_turn_now(self) -> None:
        if self._commit_rule.candidate is not None and not self._speech_active:
            self._commit()  # the reply is ready or on its way: release it now
        elif self.state == LISTENING and self._user_has_the_turn():
            await self._rotate_stream()

    def _user_has_the_turn(self) -> bool:
        return bool(self._pending) or self._speech_active or self._turn_start_ms is not None

    async def _respond(self) -> None:
        """ACTION_RESPOND: the agent takes a turn of its own, from the conversation so far (no user message)."""
        if self.state != LISTENING or self._closing:
            return  # the agent has the turn already
        if self._commit_rule.candidate is not None or self._user_has_the_turn():
            await self._end_turn_now()  # the user said something: that is what is answered
            return
        if not self.speaks_unprompted:
            raise FailedPrecondition(
                f"control.action: ACTION_RESPOND: {self.served_by} answers the user's speech and cannot speak without"
                " it; send user audio (or ACTION_END_OF_TURN after it)"
            )
        now = time.monotonic()
        turn = UserTurn(self.turn, "", None, None, now, commit_wall=now, unprompted=True)
        self._set_state(THINKING)
        self._turn_task = asyncio.create_task(self._run_turn(turn), name=f"dialogue-turn-{turn.index}")

    async def function_call_output(self, call_id: str, output: str) -> None:
        self._calls.answer(call_id, output)

    async def finish(self) -> None:
        if self._finishing or self._closing:
            return
        self._finishing = True
        async with self._stream_lock:
            if self._stream is not None:
                await self._stream.finish()

    async def events(self) -> AsyncIterator[StsEvent]:
        async for event, extra in self._relay.items():
            if event.kind == REPLY_AUDIO:
                reply, piece, samples = extra
                if reply.interrupted_reason:
                    continue  # audio of a reply interrupted while this chunk waited: never sent
                if Playout.taken(reply, piece, samples, event.audio.sample_rate_hz):
                    log.debug(
                        "turn %d's reply starts playing at %d ms of the caller's audio",
                        reply.turn.index,
                        self._time.fed_ms,
                    )
                if self._echo is not None:
                    self._render_echo(event.audio)
            elif event.kind == TURN_COMPLETE and extra is not None:
                reply, heard, interrupted = extra  # timings as sent: audio still queued at turn end went out first
                event = dataclasses.replace(event, result=reply.result(heard, interrupted))
            yield event

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        tasks = (self._gen_task, self._turn_task, self._asr_task, self._read_ahead.task)
        if self._words is not None:
            self._words.cancel()
        for task in tasks:
            if task is not None:
                task.cancel()
        if self._stream is not None:
            await self._stream.close()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._relay.end()
        if self._echo is not None:
            self._echo.close()
        await self.release()

    # --- for subclasses -------------------------------------------------------------------------------------
    @abc.abstractmethod
    async def generate_reply(self, turn: UserTurn, sink: ReplySink) -> None:
        """Answer ``turn`` given ``self.context`` (which does not hold the turn yet): text deltas and audio pieces
        into ``sink``. Cancelled on interruption (stop at the next step). Raise VoiceError for a failed turn."""

    async def read_ahead(self, text: str) -> bool:
        """The user's words so far (``reads_ahead`` engines; the turn is not over): let the brain evaluate them now,
        so that the turn's own request resumes from them. False: skipped (the brain is busy); raise for a failed one
        (logged; the turn is unaffected)."""
        return False

    async def judge_words(self, text: str) -> float | None:
        """``judges_words`` engines: the reply model's log P(the user's turn ends after ``text``), None when it cannot
        say (turn_words.py); raise for a failed reading (logged; the commit goes on without it)."""
        return None

    def assistant_message(self, reply: Reply, heard: str) -> Message | None:
        """What the context keeps of a reply (the text heard; engines that answer audio may keep audio too)."""
        return Message("assistant", heard) if heard else None

    async def release(self) -> None:
        """Free per-session resources (temp files, decoder state)."""

    # --- events ---------------------------------------------------------------------------------------------
    def _emit(self, event: StsEvent, chunk: tuple | None = None) -> None:
        self._relay.put((event, chunk))

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self._emit(StsEvent(STATE, self.turn, state=state))

    # --- recognition ----------------------------------------------------------------------------------------
    async def _open_stream(self) -> None:
        e = self.options.endpointing
        b = self.options.barge_in
        # The stop words, spotted early by the recognizer (its final recognizer on the young utterance): pass 1 often
        # misses a lone "stop", and its final comes only after the utterance ends (docs/conversation.md#barge-in).
        spot = tuple(w for w in (b.stop_words or DEFAULT_STOP_WORDS) if words(w)) if b.enabled else ()
        options = RecognitionOptions(
            language=self.options.language,
            interim_results=True,
            phrase_hints=recognizer_hints(self.options.tools),  # a tool's argument values (tools.py)
            spot_phrases=spot,
            draft_interval_ms=self.limits.brain_read_ahead_ms if self.reads_ahead else 0,
            endpointing=e,
            sample_rate_hz=RATE,
            request_id=self.options.request_id,
            time_remaining=self.options.time_remaining,
        )
        self._stream = await self.asr.open_stream(options)
        # Stop words matter only while the agent speaks (or is about to): spotting is paused while the user has the
        # floor (feed sends the change with the next audio), which spares the asr a decode every spot_interval_ms of
        # each young utterance of theirs (docs/conversation.md#barge-in).
        self._spotting, self._spotting_paused = bool(spot), False
        self._time.new_stream()
        self._utterances = 0
        self._overlap.new_stream()
        self._asr_task = asyncio.create_task(self._asr_loop(self._stream), name="dialogue-asr")

    async def _rotate_stream(self) -> None:
        """ACTION_END_OF_TURN: finish the ASR stream (the utterance in progress gets its final now), open another."""
        async with self._stream_lock:
            old, old_task = self._stream, self._asr_task
            self._stream = None
            if old is not None:
                await old.finish()
            if old_task is not None:
                await asyncio.wait({old_task})
            await self._open_stream()

    async def _asr_loop(self, stream: AsrStream) -> None:
        try:
            async for event in stream.events():
                self._on_asr(event)
                self._check_limits()
        except asyncio.CancelledError:
            raise
        except VoiceError as e:
            self._fail_session(e)
            return
        except Exception as e:  # noqa: BLE001 - the session ends with it (INTERNAL)
            log.exception("recognition failed")
            self._fail_session(e)
            return
        if self._finishing and stream is self._stream and not self._closing:
            # The user's audio is over: answer the turn in progress (and any it leads to), then end the events.
            while not self._relay.ended:
                self._maybe_end_turn(force=True)
                task = self._turn_task
                if task is None or task.done():
                    break
                await asyncio.wait({task})
            self._ended_ok()

    def _ended_ok(self) -> None:
        self._relay.end()

    def _fail_session(self, error: BaseException) -> None:
        if self._relay.ended or self._closing:
            return
        if self._gen_task is not None:
            self._gen_task.cancel()
        self._relay.end(error)

    def _on_asr(self, event) -> None:
        abs_ms = self._time.abs_ms
        self._pace.report(event)
        if event.kind == PHRASE_SPOTTED and event.spotted is not None:
            self._on_spotted(event.spotted)
            return
        if event.kind == DRAFT and event.draft is not None:
            self._on_draft(event.draft)
            return
        if event.kind == TURN_ESTIMATE and event.turn is not None:
            if self.state == LISTENING and not self._long_turn.drop_results:
                t = event.turn
                self._last_judged = (t.utterance_index, t.probability)
                judged = dataclasses.replace(t, offset_ms=abs_ms(t.offset_ms))
                self._emit(StsEvent(END_OF_TURN_JUDGED, self.turn, turn=judged))
                if t.sentence_end and t.transcript and t.utterance_index not in self._overlap.ignored:
                    signs = TurnSigns(sound=t.probability)  # the words' confidence comes with their final
                    self._start_candidate(t.transcript.strip(), abs_ms(t.offset_ms - t.silence_ms), signs)
            return
        if event.kind == SPEECH_START:
            utt = self._utterances
            self._utterances += 1
            log.debug("speech start at %d ms: utterance %d (%s)", abs_ms(event.offset_ms), utt, self.state)
            self._speech_active = True
            start = abs_ms(event.offset_ms)
            self._long_turn.speech_started()  # the first speech after the over-long turn's pause
            if self.state == LISTENING:
                if self._commit_rule.candidate is not None:
                    self._discard_candidate()  # the user goes on: the turn was not over
                if self._turn_start_ms is None:
                    self._turn_start_ms = start
            else:
                self._overlap.began(utt, start)
            return
        if event.kind == SPEECH_END:
            log.debug("speech end at %d ms (%s)", abs_ms(event.offset_ms), self.state)
            self._speech_active = False
            self._last_speech_end_ms = abs_ms(event.offset_ms)
            if self.state != LISTENING:
                self._overlap.ended()
            return
        if event.kind != RESULT or event.result is None:
            return
        r: Hypothesis = event.result
        if r.utterance_index in self._overlap.finals:
            if not r.is_final:
                return
            judged = self._overlap.judge_final(r, self.turn, self.state, self._own_words)
            if judged is None:
                return
            why, start = judged
            if self.state != LISTENING and self._reply is not None and not self._reply.interrupted_reason:
                self._overlap.start_ms, self._overlap.utt = start, r.utterance_index
                self._barge_in(f"{why}_final")
            elif self.state == LISTENING and self._turn_start_ms is None:
                self._turn_start_ms = start
        if self._long_turn.drop_results or r.utterance_index in self._overlap.ignored:
            if r.is_final:
                self._overlap.ignored.discard(r.utterance_index)
            return
        if r.utterance_index == self._overlap.utt and self.state != LISTENING:
            why = self._overlap.judge_interim(r, self._time.fed_ms, self._speech_active, self._own_words)
            if why is None:
                return  # speech over the agent that has not interrupted it (yet)
            self._barge_in(why)
        # Speech that interrupted the reply belongs to the next turn, even while the reply is still winding down.
        barged = r.utterance_index == self._overlap.barged_utt and self.state != LISTENING
        turn = self.turn + 1 if barged else self.turn
        in_stream_time = shifted(r, self._time.base_ms)
        if not r.is_final:
            self._emit(StsEvent(USER_TRANSCRIPT, turn, transcript=in_stream_time))
            return
        text = r.transcript.strip()
        log.debug("final of utterance %d (turn %d, %s): %r", r.utterance_index, turn, self.state, text)
        self._last_final = (r.utterance_index, r.confidence)
        if text:
            room = self.limits.max_user_turn_chars - self._pending_chars
            if room > 0:
                self._pending.append(text[:room])
                self._pending_chars += min(len(text), room) + 1
            self._emit(StsEvent(USER_TRANSCRIPT, turn, transcript=in_stream_time))
        self._maybe_end_turn()

    # --- the turn commit (turn_commit.py) ----------------------------------------------------------------------
    def _maybe_end_turn(self, force: bool = False) -> None:
        """The user is silent after a final: a candidate end of their turn. The reply starts now; it commits (its
        text and audio go out) once the user has been silent ``turn_commit_ms`` after their speech, and is dropped
        if they speak again first (``_discard_candidate``)."""
        if self.state != LISTENING or self._closing or (self._speech_active and not force):
            return
        commit = self._commit_rule
        if commit.awaiting_final:
            # Started on the words of a pause that read as a sentence: this final is that pause's (the same words)
            # or the user went on (more words): then that reply answered half a turn.
            if " ".join(self._pending).strip() != commit.candidate.turn.text:
                self._discard_candidate()
            else:
                commit.commit_at_ms = commit.commit_time(self._last_speech_end_ms, self._time.fed_ms)
                if self._words is not None:
                    self._words.learn(self._signs())  # now with the final's confidence
                if force:
                    self._commit()
                return
        if commit.candidate is not None:
            if force:
                self._commit()
            return  # a held reply waits for its commit
        if not self._pending:
            self._turn_start_ms = None if not self._speech_active else self._turn_start_ms
            return
        text = " ".join(self._pending).strip()
        audio = self._turn_audio() if self.keeps_user_audio else None
        last_end = self._last_speech_end_ms
        end_wall = self._time.arrival_wall(last_end) if last_end is not None else None
        turn = UserTurn(self.turn, text, audio, end_wall, time.monotonic(), discarded=commit.discarded)
        commit_at = commit.commit_time(last_end, self._time.fed_ms)
        late = self._time.fed_ms >= commit_at and not self._pace.behind(self._sound.last_loud_ms)
        if force or self.limits.turn_commit_ms <= 0 or (late and self._words is None):
            turn.commit_wall = time.monotonic()
            self._clear_heard_turn()
            self._set_state(THINKING)
            self._turn_task = asyncio.create_task(self._run_turn(turn), name=f"dialogue-turn-{turn.index}")
            return
        self._hold_reply(turn, commit_at, self._signs())

    def _signs(self) -> TurnSigns:
        """The signs of a candidate end of turn at the last final's utterance: the turn model's last judgement of
        that utterance and the final's confidence."""
        if self._last_final is None:
            return TurnSigns()
        utterance, confidence = self._last_final
        judged = self._last_judged
        sound = judged[1] if judged is not None and judged[0] == utterance else None
        return TurnSigns(sound, confidence if confidence > 0 else None)

    def _hold_reply(self, turn: UserTurn, commit_at_ms: int | None, signs: TurnSigns) -> None:
        """Start the reply to a candidate end of turn, held until the commit (at ``commit_at_ms`` of the stream;
        None: once the recognizer's final says the turn is over, ``TurnCommit.awaiting_final``)."""
        reply = Reply(turn, served_by=self.served_by, held=True)
        self._reply = reply  # at once: a SPEECH_START read next must find it to drop it
        self._commit_rule.hold(reply, commit_at_ms, self._time.fed_ms, signs)
        self._turn_task = asyncio.create_task(self._run_turn(turn, reply), name=f"dialogue-turn-{turn.index}")

    def _start_candidate(self, words: str, speech_end_ms: int, signs: TurnSigns) -> None:
        """The turn model heard the pause unfinished but its words read as a finished sentence: the recognizer ends
        the utterance at sentence_end_silence_ms unless the user goes on. Start the reply to those words now, held
        until that final arrives with the same words (then the usual commit), dropped if the user speaks again first
        or the final differs. So the reply is ready when the turn ends rather than starting then."""
        if self.state != LISTENING or self._closing or self._commit_rule.candidate is not None or not words:
            return
        text = " ".join([*self._pending, words]).strip()
        audio = self._turn_audio() if self.keeps_user_audio else None
        turn = UserTurn(
            self.turn,
            text,
            audio,
            self._time.arrival_wall(speech_end_ms),
            time.monotonic(),
            discarded=self._commit_rule.discarded,
        )
        self._commit_rule.candidate_on_words(speech_end_ms)
        self._hold_reply(turn, None, signs)

    def _clear_heard_turn(self) -> None:
        self._pending, self._pending_chars = [], 0
        self._turn_start_ms = None
        self._commit_rule.discarded = 0

    def _check_commit(self) -> None:
        verdict = self._commit_rule.verdict(
            self._time.fed_ms,
            self._speech_active,
            self._last_speech_end_ms,
            self._sound,
            lambda: self._pace.behind(self._sound.last_loud_ms),
        )
        if verdict == DISCARD:
            self._discard_candidate()
        elif verdict == COMMIT:
            self._commit()

    def _commit(self) -> None:
        """The held reply's turn is over: its text and audio go out (from where generation got to)."""
        reply = self._commit_rule.take()
        if self._words is not None:
            self._words.too_late()  # a verdict still under way no longer matters
        if reply is None or reply.discarded:
            return
        reply.turn.commit_wall = time.monotonic()
        self._clear_heard_turn()
        metrics.STS_PREEMPTIVE_REPLIES.labels(*self._labels, "used").inc()
        self._set_state(THINKING)
        for delta in reply.release():
            self._emit(StsEvent(REPLY_TEXT, reply.turn.index, text=delta))

    def _discard_candidate(self) -> None:
        """Speech came back before the commit: drop the held reply (brain stream and TTS stop with the task);
        none of it was sent, and the context never saw it. The user's words so far stay pending."""
        reply = self._commit_rule.take()
        if self._words is not None:
            self._words.cancel()
        if reply is None:
            return
        reply.discard()
        if self._reply is reply:
            self._reply = None
            self._gen_task = None
        self._commit_rule.discarded += 1
        metrics.STS_PREEMPTIVE_REPLIES.labels(*self._labels, "discarded").inc()

    # --- limits and barge-in (overlap.py, long_turn.py) ------------------------------------------------------
    def _check_limits(self) -> None:
        now_ms = self._time.fed_ms
        if self._overlap.long_speech(now_ms, self._sound, self._speech_active, self.state):
            self._barge_in("long_speech")
        if (
            self.state == LISTENING
            and self._turn_start_ms is not None
            and not self._long_turn.skipping
            and now_ms - self._turn_start_ms > self.limits.max_user_turn_s * 1000
        ):
            self._fail_long_turn()

    def _on_draft(self, draft: Draft) -> None:
        """The recognizer's draft of the user's words so far, while they speak: the brain reads the turn so far ahead
        of its end (read_ahead.py). Not over the agent's reply (speech there may be a backchannel, and the brain is
        busy with the reply), nor for words that are dropped."""
        if (
            self.state != LISTENING
            or self._commit_rule.candidate is not None
            or self._long_turn.drop_results
            or self._closing
            or draft.utterance_index in self._overlap.ignored
        ):
            return
        self._read_ahead.offer(self._pending, draft.transcript, self._time.fed_ms - self._sound.last_loud_ms)

    def _on_spotted(self, s: SpottedPhrase) -> None:
        """The recognizer heard a stop word early in speech over the reply (before the utterance's final): interrupt
        at once, unless the words are the reply's own (echo). Speech that started while the agent listened is a
        turn of its own: its final decides as usual."""
        if self.state == LISTENING or not self.options.barge_in.enabled:
            return
        if self._reply is None or self._reply.interrupted_reason:
            return
        if self._overlap.spotted(s, self._own_words):
            self._barge_in("stop_word_spotted")

    def _barge_in(self, why: str) -> None:
        start, utt = self._overlap.barged()
        log.info("barge-in (%s): utterance %s interrupts turn %d's reply", why, utt, self.turn)
        metrics.STS_BARGE_IN_DECISIONS.labels(*self._labels, why).inc()
        self._interrupt("barge_in")
        self._turn_start_ms = start  # that speech is the next user turn
        self._overlap.ignored.discard(utt)

    def _fail_long_turn(self) -> None:
        seconds = self.limits.max_user_turn_s
        self._emit(
            StsEvent(
                TURN_ERROR,
                self.turn,
                code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                message=f"audio: the user turn passed {seconds:g} s (moss_sts.max_user_turn_seconds); it is dropped"
                " and not recognized until you pause, then the agent listens again: keep turns shorter",
            )
        )
        self._pending, self._pending_chars = [], 0
        self._turn_start_ms = None
        self._long_turn.start()
        self.turn += 1
        self.turns_done += 1
        self._emit(StsEvent(STATE, self.turn, state=LISTENING))

    def _cut_last_reply(self, played_ms: int) -> None:
        """The caller played only ``played_ms`` of the last reply, which ended whole (it played from a buffer): the
        context keeps what that much says, and INTERRUPTED (reason "client") says so for that turn. Only while that
        reply is still the context's last message (a later reply was written after all of it)."""
        last = self._last_kept
        if last is None or not self.context.messages or self.context.messages[-1] is not last[1]:
            return
        reply, kept = last
        heard = heard_text(reply.text, reply.pieces, played_ms / 1000)
        trimmed = self.assistant_message(reply, heard) if heard != kept.text else kept
        if trimmed is not None and kept.calls:
            trimmed = dataclasses.replace(trimmed, calls=kept.calls)
        elif trimmed is None and kept.calls:
            trimmed = Message("assistant", "", calls=kept.calls)
        if trimmed is None:
            self.context.messages.pop()
        else:
            self.context.messages[-1] = trimmed
        self._last_kept = (reply, trimmed) if trimmed is not None else None
        sent_ms = round(reply.sent_s * 1000)
        self._emit(StsEvent(INTERRUPTED, reply.turn.index, reason="client", audio_sent_ms=sent_ms, heard_text=heard))

    def _interrupt(self, reason: str, played_ms: int | None = None) -> None:
        reply = self._reply
        if reply is None or self._gen_task is None or reply.interrupted_reason:
            return
        reply.interrupted_reason = reason  # audio of this reply still queued is dropped (events())
        reply.interrupted_wall = time.monotonic()
        reply.caller_played_ms = played_ms
        self._gen_task.cancel()
        if self._echo is not None:
            self._echo.stop_render()  # what the caller has not played yet never plays: no echo of it to expect

    def _render_echo(self, piece: AudioPiece) -> None:
        """Reply audio the caller took is the echo canceller's reference (at 16 kHz, from now on)."""
        if self._echo_resampler is None or self._echo_resampler.src_rate != piece.sample_rate_hz:
            self._echo_resampler = audio.StreamResampler(piece.sample_rate_hz, RATE)
        pcm = self._echo_resampler.feed(piece.pcm)
        if pcm:
            self._echo.render(pcm)

    def _own_words(self, transcript: str) -> bool:
        """Speech over the reply whose words are the reply's own just sent: the agent hearing itself."""
        return reply_echo(self._reply, transcript, self._labels)

    # --- replies --------------------------------------------------------------------------------------------
    async def _run_turn(self, turn: UserTurn, reply: Reply | None = None) -> None:
        if reply is None:
            reply = Reply(turn, served_by=self.served_by)
            self._reply = reply
        elif reply.discarded:
            return  # dropped before it started
        if reply.held and self._words is not None and self._words.text == turn.text:
            # The brain serves one request at a time and a streamed reply holds it to its end: the reading goes first.
            await self._words.settled(JUDGEMENT_WAIT_MS / 1000)
            if reply.discarded:
                return
        sink = ReplySink(self._playout, reply, self._calls)
        gen = asyncio.create_task(self.generate_reply(turn, sink), name="dialogue-reply")
        self._gen_task = reply.gen_task = gen
        await asyncio.wait({gen})
        if reply.held and not reply.discarded and not self._closing:
            await reply.released.wait()  # generation ended before the commit (or failed): wait for it
        if self._closing or reply.discarded:
            return
        error = None if gen.cancelled() else gen.exception()
        if self._gen_task is gen:
            self._gen_task = None
        if not turn.unprompted:
            self.context.add(Message("user", turn.text, turn.audio))
        end = turn_end(reply, error)
        kept = Message("assistant", end.heard) if end.failed else self.assistant_message(reply, end.heard)
        if reply.calls:  # the calls answered, before the words (context.py)
            calls = tuple(reply.calls)
            kept = dataclasses.replace(kept, calls=calls) if kept is not None else Message("assistant", "", calls=calls)
        if kept is not None:
            self.context.add(kept)
        self._last_kept = (
            (reply, kept) if kept is not None and not end.failed and not reply.interrupted_reason else None
        )
        for event, extra in end.events:
            self._emit(event, extra)
        self._reply = None
        self.turn += 1
        self.turns_done += 1
        overlap, utt = self._overlap.reply_over()
        if self._speech_active and overlap is not None:
            # Speech that began over the reply and goes on after it: the next user turn.
            self._turn_start_ms = overlap
            self._overlap.ignored.discard(utt)
        self._set_state(LISTENING)
        if self.turns_done >= self.limits.max_turns:
            self._fail_session(
                ResourceExhausted(
                    f"the session reached {self.limits.max_turns} turns (moss_sts.max_turns_per_session);"
                    " open a new session to go on"
                )
            )
            return
        self._maybe_end_turn()  # finals that came while the agent spoke (barge-in speech) may already end a turn

    # --- user audio for engines that answer audio -----------------------------------------------------------
    def _turn_audio(self) -> bytes:
        """The current turn's audio (from its start minus a pad to now), bounded by the ring."""
        start_ms = self._turn_start_ms if self._turn_start_ms is not None else self._time.fed_ms
        return self._audio_ring.since((start_ms - USER_AUDIO_PAD_MS) * RATE // 1000)
