"""TwoPassStream (services/engines/asr/pipeline.py) as the composition of its parts: what goes out, in what order,
for a stream of loud and quiet audio through an engine of stand-ins (a VAD that hears level, decoders that say what
they were given). Each part alone: the other files here; with the real models: tests/asr/test_asr_engines.py and the
asr fleet tests."""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

import numpy as np
import pytest

from services.common import metrics
from services.common.engines import (
    DRAFT,
    PHRASE_SPOTTED,
    RESULT,
    SEMANTIC_MODE,
    SPEECH_END,
    SPEECH_START,
    TURN_ESTIMATE,
    Endpointing,
    RecognitionOptions,
)
from services.common.errors import FailedPrecondition
from services.engines.asr.budgets import FinalsInFlight, InterimBudget
from services.engines.asr.finals import FinalText
from services.engines.asr.pipeline import TwoPassStream
from services.engines.asr.spotting import Spotting
from services.engines.asr.vad import RATE
from tests.asr.stream.kit import Inline, labels, value


class LevelVad:
    """Speech where the window is loud."""

    def new_state(self):
        return None

    def probability(self, state, window):
        return 0.95 if float(np.sqrt(np.mean(window * window))) > 0.05 else 0.02


class Recognizer:
    """The final says how much audio it was given; the quick decode hears "stop" in more than a second."""

    def __init__(self) -> None:
        self.finals = 0

    def recognize(self, audio, language, hints):
        self.finals += 1
        return FinalText(f"heard {len(audio) * 1000 // RATE} ms", 0.9, language or "en")

    def quick(self, audio, language):
        return "stop please" if len(audio) > RATE else "mm"


class Partial:
    language = "en"
    english_only = True

    def __init__(self) -> None:
        self.given = 0
        self.released = False

    def start(self):
        self.given = 0

    def accept(self, pcm):
        self.given += len(pcm)

    def hypothesis(self):
        return " ".join(["word"] * (self.given // 8000))

    def end(self):
        pass

    def release(self):
        self.released = True


class Turn:
    def __init__(self, p: float):
        self.model = SimpleNamespace(probability=lambda audio: p)
        self.missing = ""
        self.judge_interval_ms = 200
        self.heard_silence_ms = 200

    def resolve(self, endpointing):
        return dataclasses.replace(endpointing, mode=endpointing.mode or "silence", text_check="off")


def engine(turn=None):
    service, name = labels("pipeline")
    return SimpleNamespace(
        service=service,
        name=name,
        vad=LevelVad(),
        stream_pool=Inline(),
        final_pool=Inline(),
        final=Recognizer(),
        interim_interval_ms=160,
        speculative_final_ms=96,
        interim_budget=InterimBudget(service, name, 2),
        turn=turn,
        spotting=Spotting(200, 200, 1500, InterimBudget(service, name, 2)),
        draft_budget=InterimBudget(service, name, 1),
        finals_in_flight=FinalsInFlight(),
    )


def speech(pattern) -> np.ndarray:
    """("s", ms) loud tone, ("q", ms) near silence -> int16 at 16 kHz."""
    parts = []
    for kind, ms in pattern:
        t = np.arange(ms * 16) / RATE
        parts.append(0.3 * np.sin(2 * np.pi * 220 * t) if kind == "s" else np.zeros(len(t)))
    return (np.concatenate(parts) * 32767).astype(np.int16)


async def run(stream, pcm, chunk_ms=20, clock=None):
    step = chunk_ms * 16
    for i in range(0, len(pcm), step):
        if clock is not None:
            clock.now += chunk_ms / 1000
        await stream.feed(pcm[i : i + step].tobytes())
    await stream.finish()
    return [event async for event in stream.events()]


async def test_a_silence_mode_stream_sends_start_interims_end_and_the_final_from_the_pause_decode():
    eng, partial = engine(), Partial()
    stream = TwoPassStream(eng, RecognitionOptions(language="en", interim_results=True), "en", partial)
    # whole 32 ms windows: speech 512-2496 ms and 3104-4096 ms
    events = await run(stream, speech([("q", 512), ("s", 1984), ("q", 608), ("s", 992), ("q", 608)]))
    kinds = [e.kind for e in events]
    assert kinds.count(SPEECH_START) == kinds.count(SPEECH_END) == 2
    finals = [e.result for e in events if e.kind == RESULT and e.result.is_final]
    assert [f.utterance_index for f in finals] == [0, 1]
    # the pause's decode: from 200 ms before the speech to 96 ms into the pause (not the end's 150 ms after it)
    assert [f.transcript for f in finals] == ["heard 2280 ms", "heard 1288 ms"]
    first = kinds.index(SPEECH_START)
    assert kinds[first + 1 : kinds.index(SPEECH_END)] == [RESULT] * (kinds.index(SPEECH_END) - first - 1)
    assert [e.offset_ms for e in events if e.kind == SPEECH_START] == [512, 3104]
    assert [e.offset_ms for e in events if e.kind == SPEECH_END] == [2496, 4096]
    assert [(f.utterance_start_ms, f.utterance_end_ms) for f in finals] == [(512, 2496), (3104, 4096)]
    # each final was the decode started as its pause began (one decode per utterance)
    assert eng.final.finals == 2
    used = metrics.ASR_SPECULATIVE_FINALS.labels(eng.service, eng.name, "used")
    assert value(used) == 2
    open_decoders = metrics.ASR_OPEN_DECODERS.labels(eng.service, eng.name)
    assert value(open_decoders) == 1
    await stream.close()
    assert partial.released and value(open_decoders) == 0
    with pytest.raises(FailedPrecondition, match="has ended"):
        await stream.feed(b"\0\0")


async def test_a_semantic_stream_spots_drafts_and_judges_before_the_final(monkeypatch):
    clock = SimpleNamespace(now=1000.0)
    # the stream reads arrival times from its module's clock: the audio is fed at the pace of speech
    monkeypatch.setattr(
        "services.engines.asr.pipeline.time",
        SimpleNamespace(monotonic=lambda: clock.now, perf_counter=time.perf_counter),
    )
    eng = engine(turn=Turn(0.95))
    options = RecognitionOptions(
        language="en",
        interim_results=True,
        endpointing=Endpointing(mode=SEMANTIC_MODE),
        spot_phrases=("stop",),
        draft_interval_ms=300,
    )
    stream = TwoPassStream(eng, options, "en", Partial())
    events = await run(stream, speech([("q", 500), ("s", 2000), ("q", 600)]), clock=clock)
    kinds = [e.kind for e in events]
    assert kinds[0] == SPEECH_START and kinds[-2:] == [SPEECH_END, RESULT]
    assert kinds.index(PHRASE_SPOTTED) < kinds.index(TURN_ESTIMATE) < kinds.index(SPEECH_END)
    assert DRAFT in kinds[: kinds.index(SPEECH_END)]
    spotted = next(e.spotted for e in events if e.kind == PHRASE_SPOTTED)
    assert spotted.phrase == "stop" and spotted.utterance_index == 0
    turn = next(e.turn for e in events if e.kind == TURN_ESTIMATE)
    assert turn.complete and turn.silence_ms == 96  # the model was sure at the early judgement
    assert events[-1].result.is_final
    assert value(metrics.ASR_UTTERANCES.labels(eng.service, eng.name, "turn_complete")) == 1
    await stream.close()


async def test_semantic_mode_without_a_turn_model_is_refused_before_the_stream_counts():
    eng = engine()
    eng.turn = Turn(0.5)
    eng.turn.model, eng.turn.missing = None, "the pipecat-ai wheel is not installed"
    with pytest.raises(FailedPrecondition, match="pipecat-ai"):
        TwoPassStream(eng, RecognitionOptions(endpointing=Endpointing(mode=SEMANTIC_MODE)), None, None)
    assert value(metrics.ASR_OPEN_DECODERS.labels(eng.service, eng.name)) == 0
