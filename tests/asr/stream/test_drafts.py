"""Drafts (services/engines/asr/drafts.py): when the utterance so far is decoded again while spoken, and whether the
text goes out. The decodes are held by the test, which finishes them and hands back their text as QuickDecodes would
(on real speech through the fleet: tests/asr/test_asr_drafts.py)."""

from __future__ import annotations

import concurrent.futures

from services.common import metrics
from services.common.engines import DRAFT
from services.engines.asr.budgets import FinalsInFlight, InterimBudget
from services.engines.asr.drafts import Drafts
from services.engines.asr.stream_audio import StreamState
from services.engines.asr.vad import RATE, WINDOW
from tests.asr.stream.kit import Decodes, labels, value


class Run:
    def __init__(self, interval_ms=300, slots=1):
        self.names = labels("drafts")
        self.budget = InterimBudget(*self.names, slots, skipped=metrics.ASR_DRAFTS_SKIPPED)
        self.finals = FinalsInFlight()
        self.state = StreamState("en")
        self.decodes = Decodes()
        self.events = []
        self.drafts = Drafts.for_stream(
            self.budget, interval_ms, self.finals, self.decodes, self.state, self.events.append, self.names
        )

    def live(self, first: int, last: int, **step) -> list[int]:
        """Windows ``first``..``last`` arriving at the pace of speech, the step after each; the windows a draft
        started at (answered at once with ``step['say']`` when given)."""
        say = step.pop("say", None)
        started = []
        for w in range(first, last + 1):
            self.drafts.arrived(w * WINDOW, 100.0 + w * WINDOW / RATE)
            before = len(self.decodes.started)
            self.drafts.maybe_draft(w * WINDOW, step.get("sounding", True), step.get("speculating", False))
            if len(self.decodes.started) > before:
                started.append(w)
                if say is not None:
                    self.decodes.answer(say)
        return started


def test_only_a_stream_that_asked_on_an_engine_that_serves_them_gets_drafts():
    state, quick, names = StreamState("en"), Decodes(), labels("drafts")
    budget = InterimBudget(*names, 1)
    assert Drafts.for_stream(None, 300, FinalsInFlight(), quick, state, [].append, names) is None
    assert Drafts.for_stream(budget, 0, FinalsInFlight(), quick, state, [].append, names) is None


def test_a_live_speaker_gets_a_draft_every_interval_from_speech_start():
    run = Run(interval_ms=300)  # 4 800 samples
    run.drafts.speech_started(20 * WINDOW)
    # due at 10 240 + 4 800 (window 30 ends at 15 360), then 4 800 after each start
    assert run.live(1, 60, say="so I was") == [30, 40, 50, 60]
    assert run.decodes.started[0][0] == "draft"
    assert run.budget.take()  # each gave its slot back


def test_audio_that_came_in_a_burst_gets_no_draft():
    run = Run()
    run.drafts.speech_started(20 * WINDOW)
    for w in range(1, 61):
        run.drafts.arrived(w * WINDOW, 100.0)  # all at the same moment
        run.drafts.maybe_draft(w * WINDOW, True, False)
    assert run.decodes.started == []


def test_no_draft_in_a_pause_beside_a_speculative_final_while_any_final_decodes_or_after_close():
    run = Run()
    run.drafts.speech_started(20 * WINDOW)
    assert run.live(1, 32, sounding=False) == []
    assert run.live(33, 34, speculating=True) == []
    decoding = run.finals.track(concurrent.futures.Future())  # another stream's final
    assert run.live(35, 36) == []
    decoding.set_result(None)
    run.state.closed = True
    assert run.live(37, 38) == []
    run.state.closed = False
    assert run.live(39, 39) == [39]


def test_a_spent_budget_is_tried_again_at_the_next_window():
    run = Run(slots=1)
    assert run.budget.take()  # another stream's draft holds the one slot
    run.drafts.speech_started(20 * WINDOW)
    assert run.live(1, 32) == []
    assert value(metrics.ASR_DRAFTS_SKIPPED.labels(*run.names)) == 3  # windows 30, 31 and 32
    run.budget.give_back()
    assert run.live(33, 33) == [33]


def test_a_draft_goes_out_unless_it_says_nothing_new_or_its_final_went_out_first():
    run = Run()
    run.state.utt_start = 20 * WINDOW
    run.drafts.speech_started(20 * WINDOW)
    assert run.live(1, 30) == [30]
    run.decodes.answer("I would like")
    run.live(31, 40)
    run.decodes.answer(" I would like ")  # the same words
    run.live(41, 50)
    run.decodes.answer("")
    (event,) = run.events
    assert event.kind == DRAFT and event.offset_ms == 30 * 32
    draft = event.draft
    assert (draft.transcript, draft.utterance_index, draft.utterance_start_ms) == ("I would like", 0, 640)
    run.live(51, 60)
    run.state.index += 1  # the utterance's final went out before this draft came back
    run.decodes.answer("I would like a coffee")
    assert len(run.events) == 1
