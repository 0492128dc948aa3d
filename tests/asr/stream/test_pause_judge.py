"""PauseJudge (services/engines/asr/pause_judge.py): whether a pause ends the utterance and the turn -- the
Endpointer, the turn model on the turn's audio, and the text check on the pause's words -- driven window by window
as the stream's step drives it. The turn model here is a stand-in that says a set probability and keeps what it
heard (the real one is tested on real speech in tests/asr/test_asr_turn.py)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from types import SimpleNamespace

import pytest

from services.common import metrics
from services.common.engines import SEMANTIC_MODE, TURN_ESTIMATE, Endpointing
from services.common.errors import FailedPrecondition
from services.engines.asr.finals import FinalText
from services.engines.asr.pause_judge import TURN_PRE_SPEECH, PauseJudge, resolve
from services.engines.asr.speculation import SpeculativeFinal
from services.engines.asr.stream_audio import StreamState
from services.engines.asr.turn_model import WINDOW_SAMPLES as TURN_WINDOW
from services.engines.asr.vad import WINDOW
from tests.asr.stream.kit import labels, value, windows

SPEECH, QUIET = (0.9, -20.0), (0.0, -90.0)
MS = 16
SEMANTIC = Endpointing(mode=SEMANTIC_MODE, max_silence_ms=1000, text_check="on", non_final_words=("to", "the"))


class Model:
    """Says ``p``; keeps each audio it was asked about."""

    def __init__(self, p: float):
        self.p = p
        self.heard: list = []

    def probability(self, audio):
        self.heard.append(audio)
        return self.p


class Run:
    """A PauseJudge fed windows as TwoPassStream._step feeds it. ``words``: what the pause's decode says."""

    def __init__(self, endpointing, model=None, words="", stream_language="en", words_language="en"):
        self.state = StreamState(stream_language)
        self.decodes = 0

        def decode():
            self.decodes += 1
            future = concurrent.futures.Future()
            future.set_result((FinalText(words, 0.9, words_language), 0.0))
            return future

        names = labels("pause")
        self.judgements = {
            o: metrics.ASR_TURN_JUDGEMENTS.labels(*names, o) for o in ("complete", "incomplete", "vetoed")
        }
        self.speculation = SpeculativeFinal(0, decode, names)
        turn = SimpleNamespace(model=model, judge_interval_ms=200, heard_silence_ms=200)
        self.judge = PauseJudge(endpointing, turn, self.state, self.speculation, names, "req-1")
        self.pos = 0
        self.starts: list[int] = []
        self.turns = []
        self.ends: list[tuple[int, str]] = []

    def feed(self, n: int, sound) -> Run:
        p, level = sound
        for window in windows(n, level=8000 if p > 0.5 else 0, start=self.pos // WINDOW):
            self.judge.hear(window)
            for t in self.judge.endpointer.push(p, self.pos, level):
                if t.kind == "candidate":
                    self.state.utt_start = t.offset
                elif t.kind == "start":
                    self.starts.append(t.offset)
                    self.judge.speech_started(t.offset)
                elif t.kind == "turn":
                    self.turns.append(self.judge.turn_event(t, self.state.index))
                elif t.kind == "end":
                    self.speculation.take(self.judge.pause_key(), t.reason)
                    self.judge.utterance_ended(t.reason)
                    self.ends.append((t.offset, t.reason))
                    self.state.index += 1
            self.pos += WINDOW
        return self


def test_resolve_fills_the_services_defaults_and_refuses_semantic_mode_without_a_model():
    turn = SimpleNamespace(
        resolve=lambda e: dataclasses.replace(e, mode=e.mode or SEMANTIC_MODE), model=None, missing="install it"
    )
    with pytest.raises(FailedPrecondition, match=r"config\.endpointing\.mode: semantic .*: install it"):
        resolve(turn, Endpointing())  # the service's default is semantic, and it has no model
    assert resolve(turn, Endpointing(mode="silence")).mode == "silence"
    turn.model = Model(0.5)
    assert resolve(turn, Endpointing()).mode == SEMANTIC_MODE
    assert resolve(None, Endpointing(hangover_ms=300)) == Endpointing(hangover_ms=300)
    with pytest.raises(FailedPrecondition, match="not available on this server$"):
        resolve(None, Endpointing(mode=SEMANTIC_MODE))


def test_silence_mode_ends_at_the_hangover_without_a_turn_model():
    run = Run(Endpointing(hangover_ms=200)).feed(10, QUIET).feed(20, SPEECH).feed(4, QUIET)
    assert not run.judge.semantic and run.judge.pause_key() == 30 * WINDOW  # the VAD's silence
    run.feed(10, QUIET)
    assert run.ends == [(30 * WINDOW, "endpoint")] and run.turns == []


def test_the_model_hears_the_turn_from_before_its_start_to_the_silence_it_is_judged_on():
    model = Model(0.95)  # sure: the early judgement (96 ms) ends the turn
    run = Run(SEMANTIC, model, words="I would like a coffee.").feed(40, QUIET).feed(60, SPEECH).feed(20, QUIET)
    speech_end = 100 * WINDOW
    assert run.starts == [40 * WINDOW] and run.ends == [(speech_end, "turn_complete")]
    (heard,) = model.heard
    heard_end = speech_end + 96 * MS
    assert len(heard) == heard_end - (40 * WINDOW - TURN_PRE_SPEECH)
    assert round(heard[-96 * MS - 1] * 32768) == (speech_end - 1) % 8000  # the last speech sample, in place
    assert not heard[-96 * MS :].any()  # then the silence
    (turn,) = run.turns
    assert turn.kind == TURN_ESTIMATE and turn.turn.complete and turn.turn.silence_ms == 96
    assert value(run.judgements["complete"]) == 1 and run.judge.turn_start is None  # the next speech is a new turn


def test_the_model_hears_at_most_its_8_s_window():
    model = Model(0.95)
    Run(SEMANTIC, model, words="Fine.").feed(10, QUIET).feed(300, SPEECH).feed(20, QUIET)
    assert len(model.heard[0]) == TURN_WINDOW


def test_a_turn_goes_on_across_an_utterance_ended_by_max_silence():
    model = Model(0.1)
    run = Run(dataclasses.replace(SEMANTIC, max_silence_ms=400), model, words="so I was")
    run.feed(40, QUIET).feed(30, SPEECH).feed(20, QUIET)
    assert [reason for _, reason in run.ends] == ["max_silence"]
    assert run.judge.turn_start == 40 * WINDOW
    assert {t.turn.complete for t in run.turns} == {False} and value(run.judgements["incomplete"]) == len(run.turns)
    model.p = 0.95
    model.heard.clear()
    run.feed(30, SPEECH).feed(20, QUIET)
    assert run.starts == [40 * WINDOW, 90 * WINDOW] and run.ends[-1][1] == "turn_complete"
    heard_end = 120 * WINDOW + 96 * MS
    assert len(model.heard[0]) == heard_end - (40 * WINDOW - TURN_PRE_SPEECH)  # from the turn's first speech
    assert run.judge.turn_start is None


def test_the_word_before_the_pause_keeps_a_complete_turn_open():
    run = Run(SEMANTIC, Model(0.95), words="I want to go to").feed(10, QUIET).feed(30, SPEECH).feed(40, QUIET)
    assert [(t.turn.complete, t.turn.vetoed_by_word, t.turn.probability) for t in run.turns] == [
        (False, "to", 0.95),
        (False, "to", 0.95),
    ]
    assert [reason for _, reason in run.ends] == ["max_silence"]
    assert value(run.judgements["vetoed"]) == 2 and value(run.judgements["complete"]) == 0
    assert run.decodes == 1  # every check of the pause read the one decode of it


def test_words_in_another_language_are_not_checked():
    run = Run(SEMANTIC, Model(0.95), words="ich gehe to", stream_language=None, words_language="de")
    run.feed(10, QUIET).feed(30, SPEECH).feed(20, QUIET)
    assert [reason for _, reason in run.ends] == ["turn_complete"]
    assert run.turns[0].turn.vetoed_by_word == ""


def test_words_that_read_as_a_finished_sentence_end_an_incomplete_turn_at_sentence_end_silence():
    endpointing = dataclasses.replace(SEMANTIC, max_silence_ms=1500, sentence_end_silence_ms=400)
    run = Run(endpointing, Model(0.1), words="Please stop now.").feed(10, QUIET).feed(30, SPEECH).feed(30, QUIET)
    assert run.ends == [(40 * WINDOW, "sentence_end")]
    first = run.turns[0].turn
    assert (first.complete, first.sentence_end, first.transcript, first.utterance_index) == (
        False,
        True,
        "Please stop now.",
        0,
    )
    assert run.judge.turn_start is None  # a sentence end ends the turn


def test_the_text_check_off_leaves_the_model_alone():
    endpointing = dataclasses.replace(SEMANTIC, text_check="off")
    run = Run(endpointing, Model(0.95), words="I want to").feed(10, QUIET).feed(30, SPEECH).feed(20, QUIET)
    assert [reason for _, reason in run.ends] == ["turn_complete"] and run.decodes == 0


def test_the_pause_is_keyed_by_level_in_semantic_mode():
    run = Run(SEMANTIC, Model(0.1), words="").feed(10, QUIET).feed(30, SPEECH)
    # Silero still says speech (p 0.9) but the level fell: the pause began there by level, not yet by the VAD.
    run.feed(2, (0.9, -90.0))
    assert run.judge.endpointer.silence_start is None
    assert run.judge.pause_key() == 40 * WINDOW
