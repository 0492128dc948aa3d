"""The cascade: ASR -> brain -> TTS, composed from engine interfaces (no engine code of its own).

One class serves two places (DESIGN §1): moss_sts's CPU engine composes LOCAL engines (the asr CPU engine, the
brain, piper or espeak in the same process); the router's fallback composes REMOTE ones (RemoteAsrEngine, the
brain, RemoteTtsEngine for cosyvoice_tts). It only needs ``AsrEngine.open_stream``, ``ChatBrain.stream_chat`` and
``TtsEngine.synthesize_text_stream``, and it imports nothing heavy.

Reply path: the brain's text deltas are forwarded clause by clause once the language guard passes them
(reply_language.py: the voice never reads a language it cannot speak), both to the caller (REPLY_TEXT) and into
``synthesize_text_stream`` (StreamingSynthesize semantics: speech starts at the reply's first clause or first few
words, while the brain is still writing; later segments are sentences), so the first audio waits for neither the
first sentence nor the whole reply.
The audio pieces' text spans index the reply text, which is how an interrupted reply is cut back to what was heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator

from services.common.engines import (
    TOOL_AUTO,
    TOOL_NONE,
    AsrEngine,
    BufferPolicy,
    Sampling,
    SessionOptions,
    StsEngine,
    StsSession,
    SynthesisOptions,
    TextEvent,
    TtsEngine,
    VoiceInfo,
)
from services.common.errors import FailedPrecondition, NotFound, VoiceError
from services.common.metrics import FOREIGN_REPLIES
from services.common.tools import arguments_problem, openai_tool_choice, openai_tools
from services.common.voices import pick_voice
from services.conversation.brain import DEFAULT_SEED, BrainCall, ChatBrain
from services.conversation.brain_queue import HELD, TURN
from services.conversation.dialogue import DialogueLimits, DialogueSession, ReplySink, UserTurn
from services.conversation.reply_language import HeldClauses, LanguageGuard

log = logging.getLogger("voicefleet.conversation.cascade")

# Speak a clause once it has this many characters (before its sentence ends); speak what is buffered after this
# long without new text. The reply's FIRST segment is cut earlier still (DialogueLimits.reply_first, from
# moss_sts.reply_first_segment_*: first clause mark or first few words; services/common/text.py FirstSegment).
REPLY_BUFFERING = BufferPolicy(min_chars=40, max_wait_s=0.3)
# Function calls one turn's reply may make before it must answer in words (a model that calls on and on).
MAX_CALLS_PER_TURN = 4


class CascadeSession(DialogueSession):
    def __init__(self, engine: CascadeStsEngine, options: SessionOptions, voice: VoiceInfo):
        super().__init__(engine.service, engine.served_by, engine.asr, options, engine.limits)
        self.engine = engine
        self.voice = voice
        self.language = LanguageGuard(voice.languages)  # the reply's text, judged before the voice reads it
        self._prepared: asyncio.Task | None = None  # the brain weighing the session's tools (start)

    reads_ahead = True
    judges_words = True

    async def start(self) -> None:
        await super().start()
        if self.options.tools and self.options.tool_choice.mode != TOOL_NONE:
            # The brain weighs the tool set now, while the caller starts to speak, not at their first request.
            self._prepared = asyncio.create_task(self._prepare_tools(), name="dialogue-prepare-tools")

    async def _prepare_tools(self) -> None:
        choice = openai_tool_choice(self.options.tool_choice)
        try:
            await self.engine.brain.prepare_tools(openai_tools(self.options.tools), choice, self.options.request_id)
        except VoiceError as e:  # the first request weighs them itself
            log.info("%s: the brain did not prepare the tools: %s", self.options.request_id, e.message)

    async def close(self) -> None:
        if self._prepared is not None:
            self._prepared.cancel()
        await super().close()

    def _messages(self, user_text: str) -> list[dict]:
        return self.context.chat(self.system_prompt) + [{"role": "user", "content": user_text}]

    async def read_ahead(self, text: str) -> bool:
        return await self.engine.brain.read_ahead(self._messages(text), self.options.request_id)

    async def judge_words(self, text: str) -> float | None:
        return await self.engine.brain.end_of_turn_logprob(self._messages(text), self.options.request_id)

    async def generate_reply(self, turn: UserTurn, sink: ReplySink) -> None:
        # The agent's own turn (ACTION_RESPOND) continues the conversation as it is: no user message.
        messages = self.context.chat(self.system_prompt) if turn.unprompted else self._messages(turn.text)
        deltas: asyncio.Queue[TextEvent | None] = asyncio.Queue()
        tools = {t.name: t for t in self.options.tools}

        async def release(text: str) -> None:
            await sink.text(text)
            deltas.put_nowait(TextEvent(text=text))

        async def write(sampling: Sampling, choice) -> tuple[bool, str | None, list[BrainCall]]:
            """One reply from the brain, released clause by clause as the guard passes it: (anything released,
            the language of the text that stopped it, if any, the function calls it made instead of words)."""
            held = HeldClauses(self.engine.limits.reply_first.words if self.engine.limits.reply_first else 0)
            released = ""
            calls: list[BrainCall] = []
            stream = self.engine.brain.stream_chat(
                messages,
                sampling,
                self.max_tokens,
                self.options.request_id,
                kind=lambda: TURN if turn.commit_wall is not None else HELD,  # a held reply moves up at commit
                **({"tools": openai_tools(self.options.tools), "tool_choice": choice} if choice != TOOL_NONE else {}),
            )
            async with contextlib.aclosing(stream) as pieces:
                async for delta in pieces:
                    if isinstance(delta, BrainCall):
                        calls.append(delta)
                        continue
                    ready = held.add(delta)
                    if ready:
                        foreign = self.language.foreign(ready) or self.language.foreign(released + ready)
                        if foreign:
                            return bool(released), foreign, calls
                        await release(ready)
                        released += ready
            rest = held.rest()
            if rest:
                foreign = self.language.foreign(rest) or self.language.foreign(released + rest)
                if foreign:
                    return bool(released), foreign, calls
                await release(rest)
            return bool(released or rest), None, calls

        async def call_function(call: BrainCall) -> None:
            """The brain's call, its arguments checked against the tool's schema, sent to the caller; its output joins
            the messages the next write reads."""
            tool = tools.get(call.name)
            problem = (
                "it is not one of the session's tools" if tool is None else arguments_problem(tool, call.arguments)
            )
            if problem:
                raise FailedPrecondition(
                    f"the reply model called {call.name!r} with arguments that do not fit its parameters ({problem});"
                    " nothing was called: ask again, or describe the tool's parameters more plainly"
                )
            done = await sink.function_call(
                call.name, call.arguments, filler=lambda: release(self.engine.limits.tool_filler_text + " ")
            )
            call_id, output = done.call_id, done.output
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})

        async def think() -> None:
            try:
                sampling = self.options.sampling
                choice = openai_tool_choice(self.options.tool_choice) if tools else TOOL_NONE
                made = 0
                while True:
                    released, foreign, calls = await write(sampling, choice)
                    if not calls or released:
                        break
                    await call_function(calls[0])
                    made += 1
                    # After a call the reply may call again (auto) but is no longer made to (required, a named
                    # function), and after MAX_CALLS_PER_TURN it must answer in words.
                    choice = TOOL_AUTO if made < MAX_CALLS_PER_TURN else TOOL_NONE
                if foreign and not released:  # nothing said yet: ask again with another seed
                    FOREIGN_REPLIES.labels(self.engine.service, foreign, "retried").inc()
                    retry = dataclasses.replace(sampling, seed=(sampling.seed or DEFAULT_SEED) + 1)
                    released, foreign, _calls = await write(retry, TOOL_NONE)
                    if foreign and not released:
                        FOREIGN_REPLIES.labels(self.engine.service, foreign, "failed").inc()
                        raise FailedPrecondition(
                            f"the reply model answered in {foreign!r} twice, and the voice {self.voice.id!r} speaks"
                            f" {', '.join(self.voice.languages)}: nothing of it was said; ask again, or set"
                            " brain.base_url to a model that answers in the session's language"
                        )
                if foreign:
                    FOREIGN_REPLIES.labels(self.engine.service, foreign, "cut").inc()  # ends at the text released
                deltas.put_nowait(TextEvent(end=True))
            finally:
                deltas.put_nowait(None)

        async def text_events() -> AsyncIterator[TextEvent]:
            while (event := await deltas.get()) is not None:
                yield event

        options = SynthesisOptions(
            voice=self.voice.id,
            language=self.options.language or self.voice.languages[0],
            seed=self.options.sampling.seed,
            sample_rate_hz=self.options.output_sample_rate_hz,
            request_id=self.options.request_id,
            time_remaining=self.options.time_remaining,
        )
        thinking = asyncio.create_task(think(), name="cascade-brain")
        try:
            policy = dataclasses.replace(REPLY_BUFFERING, first=self.engine.limits.reply_first)
            speech = self.engine.tts.synthesize_text_stream(text_events(), options, policy)
            async with contextlib.aclosing(speech) as pieces:
                async for piece in pieces:
                    await sink.audio(piece)
            await thinking  # the brain's error, if it failed
        finally:
            thinking.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await thinking


class CascadeStsEngine(StsEngine):
    name = "cascade"

    def __init__(self, service: str, asr: AsrEngine, brain: ChatBrain, tts: TtsEngine, limits: DialogueLimits):
        self.service = service
        self.asr = asr
        self.brain = brain
        self.tts = tts
        self.limits = limits

    @property
    def native_sample_rate(self) -> int:
        return self.asr.native_sample_rate or 16_000

    async def start(self) -> None:
        await asyncio.gather(self.asr.start(), self.tts.start())

    async def close(self) -> None:
        await asyncio.gather(self.asr.close(), self.tts.close(), self.brain.close(), return_exceptions=True)

    async def voices(self) -> list[VoiceInfo]:
        return await self.tts.voices()

    def first_words_wait_s(self) -> float | None:
        return self.brain.queue.turn_wait_s()

    def check_options(self, options: SessionOptions) -> None:
        from services.common.engines import RecognitionOptions

        self.asr.check_options(RecognitionOptions(language=options.language, endpointing=options.endpointing))
        self.brain.check_language(options.language)

    async def open_session(self, options: SessionOptions) -> StsSession:
        voices = await self.tts.voices()
        try:
            voice = pick_voice(voices, options.voice, options.language, where=self.tts.service)
        except NotFound:
            raise
        if not options.language and len(voice.languages) == 1:
            # A conversation that names no language is in its voice's one language: the recognizer decodes that
            # language (tiny.en for English) instead of detecting it on every utterance with the multilingual model.
            # The Realtime route's sessions name none unless the client sets a transcription language: speech end ->
            # first audio was 2487 ms there against 1387 ms for en-US Converse sessions (2-core AMD EPYC,
            # 2026-11-29, bench/results/latest/gateway.json).
            options = dataclasses.replace(options, language=voice.languages[0])
        session = CascadeSession(self, options, voice)
        await session.start()
        return session
