"""Conversation failover: moss_sts -> the router's own cascade (remote asr -> brain -> cosyvoice_tts) and back.

The router's ConversationServicer talks to ``FailoverStsEngine``. Each session runs on ONE backend session at a
time: moss_sts (``RemoteStsEngine``) when it is routable, else the cascade (``CascadeStsEngine`` from
services/conversation/cascade.py, composed here from REMOTE engines: RemoteAsrEngine, the brain client, RemoteTtsEngine).

The router keeps the user's recent audio (16 kHz, bounded by moss_sts.max_user_turn_seconds). When moss_sts fails
mid-session (its call ends with UNAVAILABLE/INTERNAL/..., or its health drops: killed, hung and ejected by the deep
probe), the router opens a cascade session and *replays* the current turn's audio into it — from where the turn
began (or its speech, if earlier) — so the user's turn is answered; live audio follows. The caller sees one
conversation:

* turn indices continue (the cascade's turn 0 is the caller's turn in progress);
* if part of moss_sts's reply to that turn was already sent, ``interrupted`` (reason ``failover``,
  ``audio_sent_ms``) tells the caller it was cut, then the cascade's reply for the same turn follows;
* states are not repeated, a LISTENING that would go back in a turn the caller already saw answered is dropped, and
  the replayed speech's transcript is not sent again when moss_sts had already sent a final for it;
* transcript offsets stay in the caller's stream time.

The cascade keeps the conversation: its context starts with the turns the router saw complete (user and reply
text). Later turns stay on the cascade until moss_sts is routable again (which already needs recovery probes in a
row: hysteresis); then, at a quiet moment (listening, no speech in the current turn), the session moves back to
moss_sts, which gets the conversation so far appended to its system prompt (the contract has no history field).
Each move is counted as a failover (reasons: unavailable, internal, ..., unhealthy; ``recovered`` for the way back).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator

from services.common.engines import (
    END_OF_TURN_JUDGED,
    FUNCTION_CALL,
    FUNCTION_CALL_CANCELLED,
    INTERRUPTED,
    LISTENING,
    MUTE,
    REPLY_AUDIO,
    REPLY_TEXT,
    SPEAKING,
    STATE,
    THINKING,
    TURN_COMPLETE,
    TURN_ERROR,
    UNMUTE,
    USER_TRANSCRIPT,
    FunctionCall,
    SessionOptions,
    StsEngine,
    StsEvent,
    StsSession,
    VoiceInfo,
)
from services.common.errors import InvalidArgument, VoiceError
from services.common.tools import refuses_tools
from services.conversation.dialogue import Message
from services.conversation.dialogue.function_calls import REMEMBERED_CALLS
from services.conversation.relay import AudioRing, EventRelay, shifted
from services.remote.sts import RemoteStsEngine
from services.router.failover import FailoverLog, failover_reason

log = logging.getLogger("voicefleet.router.failover_sts")

RATE = 16_000  # the sessions' input rate (the cascade listens at 16 kHz; moss_sts is asked for the same)
REPLAY_PAD_MS = 300  # audio replayed before the turn's start (the start of speech is not clipped)
REPLAY_CHUNK = RATE // 10 * 2  # replayed in 100 ms pieces
SWITCH_BACK_CHECK_S = 0.5  # how often a session on the cascade looks whether moss_sts is back


class FailoverStsEngine(StsEngine):
    name = "remote"
    service = "moss_sts"

    def __init__(
        self,
        primary: RemoteStsEngine,
        fallback: StsEngine | None,
        failovers: FailoverLog,
        max_user_turn_s: float = 60.0,
        default_system_prompt: str = "",
        max_system_prompt_chars: int = 4000,
        tools_to_cascade: bool = True,
    ):
        self.primary = primary
        self.fallback = fallback
        self.failovers = failovers
        self.placement = None  # the router's PlacementView (set by its build): a cold moss_sts yields to the cascade
        self.max_user_turn_s = max_user_turn_s
        self.default_system_prompt = default_system_prompt
        self.max_system_prompt_chars = max_system_prompt_chars
        # A session with tools that moss_sts refuses (it calls none: MOSS-Speech) is served by the cascade, and stays
        # there (router.routes.conversation_tools: cascade); else the refusal goes to the caller.
        self.tools_to_cascade = tools_to_cascade

    @property
    def backend(self):
        return self.primary.backend

    @property
    def native_sample_rate(self) -> int:
        # The cascade listens at 16 kHz; with a fallback, every session gets 16 kHz so audio can be replayed.
        return RATE if self.fallback is not None else 0

    @property
    def served_by(self) -> str:
        return self.primary.served_by

    async def start(self) -> None:
        if self.fallback is not None:
            await self.fallback.start()

    async def close(self) -> None:
        if self.fallback is not None:
            await self.fallback.close()

    def check_options(self, options: SessionOptions) -> None:
        self.primary.check_options(options)
        if self.fallback is not None:
            self.fallback.check_options(options)

    async def open_session(self, options: SessionOptions) -> StsSession:
        if self.fallback is None:
            return await self.primary.open_session(options)  # pass-through, as without failover
        session = FailoverStsSession(self, options)
        try:
            await session.start()
        except BaseException:
            await session.close()
            raise
        return session


class FailoverStsSession(StsSession):
    def __init__(self, engine: FailoverStsEngine, options: SessionOptions):
        self.engine = engine
        self.options = options
        self.opened_at = time.monotonic()
        self.active: StsSession | None = None
        self.on_primary = False
        self.gen = 0  # bumped at every switch; events of older sessions are dropped
        self.lock = asyncio.Lock()  # feed / control / switch
        self._relay = EventRelay()
        self._closed = self._finished = False
        self._muted = False
        self._tasks: set[asyncio.Task] = set()
        # The caller's audio (16 kHz samples) and what happened in it.
        self.ring = AudioRing(int((engine.max_user_turn_s + 5) * RATE))
        self.base_turn = 0  # the active session's turn 0 is the caller's turn base_turn
        self.base_ms = 0  # ... and its stream time 0 is the caller's stream ms base_ms
        self.turn = 0  # the caller's turn in progress
        self.turn_start = {0: 0}  # caller turn -> sample index where it began
        self.speech_start: dict[int, int] = {}  # caller turn -> earliest utterance start heard (sample index)
        self.last_state: dict[int, str] = {}
        self.finals: set[int] = set()
        self.completed: set[int] = set()
        self.reply_ms: collections.Counter[int] = collections.Counter()
        self.reply_text: collections.Counter = collections.Counter()
        self.replaying: int | None = None  # the caller turn whose audio was replayed into a new session
        self.replayed_until = 0  # ... up to this sample (speech before it was heard by the old session)
        self.finals_before: set[int] = set()  # turns whose finals the caller had before the switch
        self.history: list[tuple[str, str]] = []
        # Function calls the caller was sent (call id -> caller turn) and those still waiting for their output: a
        # session that fails over forgets them, so they are cancelled (reason "failover") and a late output dropped.
        self.calls_sent: dict[str, int] = {}
        self.calls_waiting: set[str] = set()
        # On the cascade for good: moss_sts refused the session's tools, so it is never moved back.
        self.pinned_to_cascade = False

    # --- opening sessions -------------------------------------------------------------------------------------
    def _options(self, primary: bool, voices: list[VoiceInfo] | None = None) -> SessionOptions:
        remaining = None
        if self.options.time_remaining is not None:
            remaining = self.options.time_remaining - (time.monotonic() - self.opened_at)
        opts = dataclasses.replace(self.options, input_sample_rate_hz=RATE, time_remaining=remaining)
        if primary and self.history:
            opts = dataclasses.replace(opts, system_prompt=self._prompt_with_history())
        if voices is not None and opts.voice and not any(v.id == opts.voice for v in voices):
            opts = dataclasses.replace(opts, voice="")  # the cascade speaks with its TTS's default voice
        return opts

    def _prompt_with_history(self) -> str:
        base = self.options.system_prompt or self.engine.default_system_prompt
        turns = list(self.history)
        while turns:
            lines = "\n".join((f"User: {u}\n" if u else "") + f"Assistant: {a}" for u, a in turns)
            prompt = f"{base}\n\nThe conversation so far (continue it):\n{lines}"
            if len(prompt) <= self.engine.max_system_prompt_chars:
                return prompt
            turns = turns[1:]
        return self.options.system_prompt

    async def _open(self, primary: bool) -> StsSession:
        if primary:
            return await self.engine.primary.open_session(self._options(True))
        fallback = self.engine.fallback
        voices = None
        with contextlib.suppress(VoiceError):
            voices = await fallback.voices()
        session = await fallback.open_session(self._options(False, voices))
        context = getattr(session, "context", None)
        if context is not None:  # the cascade's dialogue context: the conversation so far
            for user, reply in self.history:
                if user:  # empty: the agent's own turn (ACTION_RESPOND)
                    context.add(Message("user", user))
                if reply:
                    context.add(Message("assistant", reply))
        return session

    def _primary_name(self) -> str:
        backend = self.engine.primary.backend
        return backend.name if backend is not None else "moss_sts"

    def _fallback_name(self) -> str:
        return getattr(self.engine.fallback, "served_by", "cascade")

    def _primary_routable(self) -> bool:
        """moss_sts can take the session now: routable, and its model warm (a cold time-shared model would make the
        caller wait for its swap-in; the cascade serves meanwhile and the switch back comes once it is loaded)."""
        backend = self.engine.primary.backend
        return backend is not None and backend.routable() and not self._too_cold()

    def _too_cold(self) -> bool:
        view = self.engine.placement
        return view is not None and view.too_cold(self._primary_name(), self.options.routing.latency_budget_ms)

    async def start(self) -> None:
        backend = self.engine.primary.backend
        if backend is not None and backend.routable() and self._too_cold():
            # Same rule as TTS routes: a cold MOSS whose swap-in misses the latency budget yields to the warm
            # cascade and is loaded in the background; the session moves to it at a quiet moment once it is warm.
            self.engine.placement.prefetch(self._primary_name())
            self.engine.failovers.record(self._primary_name(), self._fallback_name(), "cold", self.options.request_id)
            self._activate(await self._open(False), primary=False)
            return
        if self._primary_routable():
            try:
                self._activate(await self._open(True), primary=True)
                return
            except VoiceError as e:
                reason = "tools" if self.engine.tools_to_cascade and refuses_tools(e) else failover_reason(e)
                if reason is None:
                    raise
                self.pinned_to_cascade = reason == "tools"
                self.engine.failovers.record(
                    self._primary_name(), self._fallback_name(), reason, self.options.request_id
                )
        elif backend is not None:
            self.engine.failovers.record(
                self._primary_name(), self._fallback_name(), "unhealthy", self.options.request_id
            )
        self._activate(await self._open(False), primary=False)

    def _activate(self, session: StsSession, primary: bool) -> None:
        self.gen += 1
        self.active, self.on_primary = session, primary
        self._spawn(self._read(session, self.gen), "failover-sts-read")
        if primary:
            self._spawn(self._watch_primary(self.gen), "failover-sts-watch")
        elif not self.pinned_to_cascade:
            self._spawn(self._look_for_primary(self.gen), "failover-sts-back")

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- events from the active session -----------------------------------------------------------------------
    async def _read(self, session: StsSession, gen: int) -> None:
        try:
            async for event in session.events():
                if gen != self.gen:
                    return
                self._on_event(event)
            if gen == self.gen:
                self._end()
        except asyncio.CancelledError:
            raise
        except VoiceError as e:
            if gen != self.gen:
                return
            reason = failover_reason(e)
            if self.on_primary and reason is not None and not self._closed:
                log.warning(
                    "%s: moss_sts failed mid-session (%s); replaying the turn into the cascade",
                    self.options.request_id,
                    e.message,
                )
                await self._switch(to_primary=False, reason=reason, gen=gen)
            else:
                self._end(e)
        except Exception as e:  # noqa: BLE001 - the session ends with it
            if gen == self.gen:
                self._end(e)

    async def _watch_primary(self, gen: int) -> None:
        backend = self.engine.primary.backend
        await backend.wait_unroutable()
        if gen == self.gen and self.on_primary and not self._closed:
            log.warning("%s: %s; moving the session to the cascade", self.options.request_id, backend.describe())
            await self._switch(to_primary=False, reason="unhealthy", gen=gen)

    async def _look_for_primary(self, gen: int) -> None:
        while gen == self.gen and not self._closed and not self._finished:
            await asyncio.sleep(SWITCH_BACK_CHECK_S)
            if gen == self.gen and self._quiet() and self._primary_routable():
                await self._switch(to_primary=True, reason="recovered", gen=gen)
                return

    def _quiet(self) -> bool:
        """Listening with no speech heard in the turn: a session can move without cutting anyone off."""
        t = self.turn
        return self.last_state.get(t) == LISTENING and t not in self.speech_start and self.replaying is None

    def _put(self, event: StsEvent) -> None:
        self._relay.put(event)

    def _new_turn(self, t: int) -> None:
        self.turn = t
        self.turn_start[t] = self.ring.end
        for old in [k for k in self.turn_start if k < t - 2]:
            del self.turn_start[old]

    def _on_event(self, event: StsEvent) -> None:
        t = event.turn_index + self.base_turn
        kind = event.kind
        if kind == STATE:
            if event.state == LISTENING:
                if t > self.turn:
                    self._new_turn(t)
                if self.last_state.get(t) in (THINKING, SPEAKING):
                    return  # a replayed turn the caller already saw past listening
            if self.last_state.get(t) == event.state:
                return
            self.last_state[t] = event.state
        elif kind == USER_TRANSCRIPT:
            r = shifted(event.transcript, self.base_ms)
            start = r.utterance_start_ms * RATE // 1000
            self.speech_start[t] = min(self.speech_start.get(t, start), start)
            if self.replaying == t and t in self.finals_before and start < self.replayed_until:
                return  # replayed speech whose transcript the caller already has
            if r.is_final:
                self.finals.add(t)
            event = dataclasses.replace(event, transcript=r)
        elif kind == END_OF_TURN_JUDGED and event.turn is not None:
            event = dataclasses.replace(
                event, turn=dataclasses.replace(event.turn, offset_ms=event.turn.offset_ms + self.base_ms)
            )
        elif kind == FUNCTION_CALL and event.call.done:
            self.calls_sent[event.call.call_id] = t
            self.calls_waiting.add(event.call.call_id)
            while len(self.calls_sent) > REMEMBERED_CALLS:
                self.calls_sent.pop(next(iter(self.calls_sent)))
        elif kind == FUNCTION_CALL_CANCELLED:
            self.calls_waiting.discard(event.call.call_id)
        elif kind == REPLY_TEXT:
            self.reply_text[t] += len(event.text)
        elif kind == REPLY_AUDIO:
            a = event.audio
            self.reply_ms[t] += len(a.pcm) / 2 / a.sample_rate_hz * 1000
        elif kind in (TURN_COMPLETE, TURN_ERROR):
            self.completed.add(t)
            if self.replaying == t:
                self.replaying = None
            if kind == TURN_COMPLETE and event.result is not None:
                self.history.append((event.result.user_text, event.result.reply_text))
                self.history = self.history[-32:]
            for old in [k for k in self.speech_start if k <= t]:
                del self.speech_start[old]
        if t != event.turn_index:
            event = dataclasses.replace(event, turn_index=t)
        self._put(event)

    # --- switching ------------------------------------------------------------------------------------------
    async def _switch(self, to_primary: bool, reason: str, gen: int) -> None:
        async with self.lock:  # the caller's audio waits; it goes to the new session after the replay
            if gen != self.gen or self._closed or self._relay.ended:
                return
            if to_primary and not self._quiet():
                self._spawn(self._look_for_primary(gen), "failover-sts-back")  # try again later
                return
            k = self.turn
            if k in self.completed:  # between a turn's end and the next LISTENING: the next turn is k + 1
                self._new_turn(k + 1)
                k = self.turn
            in_turn = k not in self.completed and (self.last_state.get(k) in (THINKING, SPEAKING) or k in self.finals)
            start = self.turn_start.get(k, self.ring.end)
            if k in self.speech_start:
                start = min(start, self.speech_start[k])
            start = max(self.ring.start, start - REPLAY_PAD_MS * RATE // 1000)
            old = self.active
            try:
                new = await self._open(to_primary)
            except VoiceError as e:
                if to_primary:  # moss_sts is not ready after all: stay on the cascade
                    log.info("%s: moss_sts did not take the session back: %s", self.options.request_id, e.message)
                    if refuses_tools(e):  # it never will (MOSS-Speech calls no tools): the session stays here
                        self.pinned_to_cascade = True
                    else:
                        self._spawn(self._look_for_primary(gen), "failover-sts-back")
                    return
                self._end(e)
                return
            if gen != self.gen or self._closed:
                await new.close()
                return
            frm, to = (
                (self._fallback_name(), self._primary_name())
                if to_primary
                else (self._primary_name(), self._fallback_name())
            )
            self.engine.failovers.record(frm, to, reason, self.options.request_id)
            for call_id in sorted(self.calls_waiting):
                self._put(
                    StsEvent(
                        FUNCTION_CALL_CANCELLED,
                        self.calls_sent[call_id],
                        call=FunctionCall(call_id, ""),
                        reason="failover",
                    )
                )
            self.calls_waiting.clear()
            if in_turn and (self.reply_ms[k] or self.reply_text[k]):
                # The caller got part of a reply that will not finish: say it was cut, then the new reply follows.
                self._put(StsEvent(INTERRUPTED, k, reason="failover", audio_sent_ms=round(self.reply_ms[k])))
            self.reply_ms[k] = 0
            self.reply_text[k] = 0
            self.replaying = k if in_turn else None
            self.replayed_until = self.ring.end
            self.finals_before = set(self.finals)
            self.base_turn = k
            self.base_ms = start * 1000 // RATE
            self._activate(new, primary=to_primary)
            if old is not None:
                with contextlib.suppress(Exception):
                    await old.close()
            if self._muted:
                await new.control(MUTE)
            pcm = self.ring.since(start)
            for i in range(0, len(pcm), REPLAY_CHUNK):
                await new.feed(pcm[i : i + REPLAY_CHUNK])
            if self._finished:
                await new.finish()

    # --- StsSession -----------------------------------------------------------------------------------------
    async def feed(self, pcm: bytes) -> None:
        async with self.lock:
            if self.active is not None:
                await self.active.feed(pcm)
            self.ring.append(pcm)  # the caller's audio, for a replay into another session

    async def control(self, action: str, played_ms: int | None = None) -> None:
        async with self.lock:
            if action == MUTE:
                self._muted = True
            elif action == UNMUTE:
                self._muted = False
            if self.active is not None:
                await self.active.control(action, played_ms)

    async def function_call_output(self, call_id: str, output: str) -> None:
        async with self.lock:
            waiting = call_id in self.calls_waiting
            self.calls_waiting.discard(call_id)
            if self.active is None or (not waiting and call_id in self.calls_sent):
                return  # answered already, cancelled, or its session failed over: nothing waits for it
            try:
                await self.active.function_call_output(call_id, output)
            except InvalidArgument:
                if call_id not in self.calls_sent:
                    raise
                log.info("%s: output for call %s, made before a failover: dropped", self.options.request_id, call_id)

    async def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        async with self.lock:
            if self.active is not None:
                await self.active.finish()

    def events(self) -> AsyncIterator[StsEvent]:
        return self._relay.items()

    def _end(self, error: BaseException | None = None) -> None:
        self._relay.end(error)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.gen += 1
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        if self.active is not None:
            with contextlib.suppress(Exception):
                await self.active.close()
        self._end()
