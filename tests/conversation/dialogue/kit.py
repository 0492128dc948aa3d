"""Stand-ins for the dialogue's parts' tests: recognizer events as the asr engine makes them, caller and reply audio,
a scripted recognizer and reply, and virtual time (an event loop whose clock jumps to the next timer whenever every
task waits, with ``time.monotonic`` read from the same clock), so a whole session runs in milliseconds and its
timings are exact."""

from __future__ import annotations

import asyncio
import contextlib
import math
import selectors
import time

import numpy as np

from services.common.engines import (
    DRAFT,
    PHRASE_SPOTTED,
    RESULT,
    SPEECH_END,
    SPEECH_START,
    TURN_ESTIMATE,
    AsrEngine,
    AsrEvent,
    AsrStream,
    AudioPiece,
    Draft,
    Hypothesis,
    SpottedPhrase,
    TurnEstimate,
)
from services.conversation.dialogue import DialogueSession, ReplySink, UserTurn

RATE = 16_000
FRAME_MS = 20


def tone(ms: int, lead_silence_ms: int = 0, rate: int = RATE, amplitude: float = 0.1) -> bytes:
    """s16le: ``lead_silence_ms`` of silence, then ``ms`` of a 440 Hz tone (-23 dBFS at the default amplitude)."""
    n = rate * ms // 1000
    x = (amplitude * np.sin(2 * math.pi * 440 * np.arange(n) / rate) * 32767).astype(np.int16)
    return bytes(rate * lead_silence_ms // 1000 * 2) + x.tobytes()


def silence(ms: int, rate: int = RATE) -> bytes:
    return bytes(rate * ms // 1000 * 2)


# --- recognizer events (offsets in the recognizer stream's ms) ------------------------------------------------------
def start(at: int) -> tuple[int, AsrEvent]:
    return at, AsrEvent(SPEECH_START, offset_ms=at)


def end(at: int, speech_end: int | None = None) -> tuple[int, AsrEvent]:
    return at, AsrEvent(SPEECH_END, offset_ms=at if speech_end is None else speech_end)


def hyp(at: int, utt: int, text: str, final: bool, confidence: float = 0.0) -> tuple[int, AsrEvent]:
    result = Hypothesis(text, final, utt, 0, at, at, confidence=confidence)
    return at, AsrEvent(RESULT, offset_ms=at, result=result)


def interim(at: int, utt: int, text: str) -> tuple[int, AsrEvent]:
    return hyp(at, utt, text, False)


def final(at: int, utt: int, text: str, confidence: float = 0.0) -> tuple[int, AsrEvent]:
    return hyp(at, utt, text, True, confidence)


def estimate(
    at: int, utt: int, silence_ms: int, sentence_end: bool = False, transcript: str = "", probability: float = 0.3
):
    t = TurnEstimate(
        probability, probability >= 0.5, silence_ms, at, utt, sentence_end=sentence_end, transcript=transcript
    )
    return at, AsrEvent(TURN_ESTIMATE, offset_ms=at, turn=t)


def spot(at: int, utt: int, phrase: str, transcript: str | None = None):
    s = SpottedPhrase(phrase, phrase if transcript is None else transcript, utt, 0, at)
    return at, AsrEvent(PHRASE_SPOTTED, offset_ms=at, spotted=s)


def draft(at: int, utt: int, text: str):
    return at, AsrEvent(DRAFT, offset_ms=at, draft=Draft(text, utt, 0, at))


class ScriptedStream(AsrStream):
    """Sends each scripted event once its offset of audio has been fed (``lag_s`` later, when set)."""

    def __init__(self, script, lag_s: float = 0.0, on_finish=()):
        self.script = sorted(script, key=lambda e: e[0])
        self.lag_s = lag_s
        self.on_finish = list(on_finish)
        self.fed = 0
        self.queue: asyncio.Queue = asyncio.Queue()
        self.spotting_paused: list[bool] = []

    async def feed(self, pcm: bytes) -> None:
        self.fed += len(pcm) // 2
        while self.script and self.script[0][0] <= self.fed * 1000 // RATE:
            _, event = self.script.pop(0)
            if self.lag_s:
                asyncio.get_running_loop().call_later(self.lag_s, self.queue.put_nowait, event)
            else:
                self.queue.put_nowait(event)

    async def finish(self) -> None:
        for _, event in self.on_finish:
            self.queue.put_nowait(event)
        self.queue.put_nowait(None)

    async def events(self):
        while (event := await self.queue.get()) is not None:
            yield event

    async def close(self) -> None:
        self.queue.put_nowait(None)

    async def pause_spotting(self, paused: bool) -> None:
        self.spotting_paused.append(paused)


class ScriptedAsr(AsrEngine):
    name, service = "scripted", "test_dialogue"

    def __init__(self, *scripts, lag_s: float = 0.0, on_finish=()):
        self.scripts = list(scripts)
        self.lag_s = lag_s
        self.on_finish = on_finish
        self.options = []
        self.streams: list[ScriptedStream] = []

    async def open_stream(self, options):
        self.options.append(options)
        stream = ScriptedStream(self.scripts.pop(0) if self.scripts else [], self.lag_s, self.on_finish)
        self.streams.append(stream)
        return stream


class Replies(DialogueSession):
    """Answers every turn with ``reply_text``, a sentence per audio piece (``word_ms`` of tone per word) after
    ``brain_s``; ``read_ahead`` and ``judge_words`` note what they were asked."""

    reply_text = "Sure, here is a fairly long answer. It goes on for a while so you can interrupt it."
    brain_s = 0.2
    word_ms = 250
    logprobs: dict = {}
    judge_s = 0.1

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []
        self.read: list[str] = []
        self.judged: list[str] = []

    async def generate_reply(self, turn: UserTurn, sink: ReplySink) -> None:
        self.asked.append(turn.text)
        await asyncio.sleep(self.brain_s)
        at = 0
        for i, sentence in enumerate(s for s in self.reply_text.split(". ") if s):
            text = (" " if i else "") + (sentence if sentence.endswith(".") else sentence + ".")
            await sink.text(text)
            await asyncio.sleep(0.05)
            await sink.audio(AudioPiece(tone(len(text.split()) * self.word_ms, 60), 24_000, at, at + len(text), "t/t"))
            at += len(text)

    async def read_ahead(self, text: str) -> bool:
        self.read.append(text)
        await asyncio.sleep(0.08)
        return True

    async def judge_words(self, text: str):
        self.judged.append(text)
        await asyncio.sleep(self.judge_s)
        return self.logprobs.get(text)


class _VirtualSelector:
    def __init__(self, real, clock):
        self.real, self.clock = real, clock

    def select(self, timeout=None):
        if timeout is None:
            raise RuntimeError("virtual time: every task waits on nothing timed (a deadlock)")
        self.clock[0] += timeout
        return self.real.select(0)

    def __getattr__(self, name):
        return getattr(self.real, name)


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock):
        super().__init__(selectors.DefaultSelector())
        self._selector = _VirtualSelector(self._selector, clock)
        self._clock_resolution = 1e-9
        self._virtual = clock

    def time(self):
        return self._virtual[0]


@contextlib.contextmanager
def virtual_time(monkeypatch):
    """An event loop in virtual time; ``time.monotonic`` reads its clock meanwhile. Yields ``run(coro)``."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    loop = _VirtualLoop(clock)
    try:
        yield loop.run_until_complete
    finally:
        loop.close()


async def talk(session, sound, total_ms: int, controls=()) -> list:
    """Feed ``session`` 20 ms frames for ``total_ms`` (tone inside the ``sound`` spans, silence elsewhere), at the
    pace of real time, with ``controls`` ((ms, action) or (ms, action, played_ms)) on the way; every event with its
    virtual ms."""
    events = []
    t0 = asyncio.get_running_loop().time()

    async def read():
        async for e in session.events():
            events.append((round((asyncio.get_running_loop().time() - t0) * 1000), e))

    await session.start()
    reader = asyncio.create_task(read())
    controls = sorted(controls)
    try:
        for ms in range(0, total_ms, FRAME_MS):
            while controls and controls[0][0] <= ms:
                await session.control(*controls.pop(0)[1:])
            loud = any(a <= ms < b for a, b in sound)
            await session.feed(tone(FRAME_MS) if loud else silence(FRAME_MS))
            await asyncio.sleep(FRAME_MS / 1000)
    finally:
        await session.close()
        await asyncio.wait({reader}, timeout=5)
        reader.cancel()
    return events
