"""PhraseSpotter (services/engines/asr/spotting.py): when a young utterance is decoded again, and whether a phrase
heard in it goes out. The decodes are held by the test (``kit.Decodes``), which finishes them and hands back their
text as QuickDecodes would (the decode itself: tests/asr/stream/test_quick_decodes.py; on real speech:
tests/asr/test_asr_spotting.py)."""

from __future__ import annotations

from services.common import metrics
from services.common.engines import PHRASE_SPOTTED
from services.engines.asr.budgets import InterimBudget
from services.engines.asr.spotting import PhraseSpotter, Spotting
from services.engines.asr.stream_audio import StreamState
from services.engines.asr.vad import WINDOW
from tests.asr.stream.kit import Decodes, labels, value


class Run:
    def __init__(self, phrases=("stop", "hold on"), slots=2, first_ms=200, interval_ms=200, window_ms=1500):
        self.names = labels("spotting")
        self.budget = InterimBudget(*self.names, slots, skipped=metrics.ASR_SPOTTING_SKIPPED)
        self.state = StreamState("en")
        self.decodes = Decodes()
        self.events = []
        spotting = Spotting(first_ms, interval_ms, window_ms, self.budget)
        self.spotter = PhraseSpotter.for_stream(
            spotting, phrases, self.decodes, self.state, self.events.append, self.names
        )

    def windows(self, first: int, last: int, utt_start: int = 0) -> None:
        """The step after windows ``first``..``last`` (stream positions at their ends)."""
        for w in range(first, last + 1):
            self.spotter.after_window(w * WINDOW, utt_start)


def test_only_a_stream_that_asked_for_phrases_on_an_engine_that_spots_gets_a_spotter():
    spotting = Spotting(200, 200, 1500, InterimBudget(*labels("spotting"), 1))
    state, emit = StreamState("en"), [].append
    assert PhraseSpotter.for_stream(None, ("stop",), Decodes(), state, emit, labels("spotting")) is None
    assert PhraseSpotter.for_stream(spotting, (), Decodes(), state, emit, labels("spotting")) is None
    assert PhraseSpotter.for_stream(spotting, ("stop",), Decodes(), state, emit, labels("spotting")) is not None


def test_a_young_utterance_is_decoded_first_ms_after_its_start_then_every_interval_until_window_ms():
    run = Run(slots=1, first_ms=200, interval_ms=200, window_ms=1500)  # 3 200, 3 200 and 24 000 samples
    run.spotter.begin(0, continued=False)
    assert not run.budget.take()  # the utterance holds the one slot
    decoded_at = []
    for w in range(1, 61):
        run.windows(w, w)
        if len(run.decodes.started) > len(decoded_at):
            decoded_at.append(w)
            run.decodes.answer("hmm")
    # due at 3 200 (window 7 ends at 3 584), then 3 200 after each decode; none past 24 000 (window 47)
    assert decoded_at == [7, 14, 21, 28, 35, 42]
    assert run.budget.take()  # no longer young: its slot came back


def test_one_decode_of_a_stream_at_a_time():
    run = Run(first_ms=200, interval_ms=200)
    run.spotter.begin(0, continued=False)
    run.windows(1, 30)  # the first decode never comes back
    assert len(run.decodes.started) == 1
    run.decodes.answer("hmm")
    run.windows(31, 31)
    assert len(run.decodes.started) == 2


def test_a_phrase_heard_after_speech_start_goes_out_once_with_its_utterance():
    run = Run()
    for i in range(2):  # two utterances with their finals before this one
        run.spotter.begin(i * 100 * WINDOW, continued=False)
        run.spotter.confirmed()
        run.spotter.started()
        run.spotter.end()
        run.state.index += 1
    run.spotter.begin(200 * WINDOW, continued=False)
    run.spotter.confirmed()
    run.spotter.started()  # the SPEECH_START went out
    run.windows(201, 207, utt_start=200 * WINDOW)
    run.decodes.answer("please hold on a second")
    (event,) = run.events
    assert event.kind == PHRASE_SPOTTED and event.offset_ms == 207 * 32
    spotted = event.spotted
    assert (spotted.phrase, spotted.transcript, spotted.utterance_index, spotted.utterance_start_ms) == (
        "hold on", "please hold on a second", 2, 200 * 32,
    )  # fmt: skip
    assert value(metrics.ASR_PHRASES_SPOTTED.labels(*run.names)) == 1
    run.windows(208, 220, utt_start=200 * WINDOW)  # heard: the utterance is spotted no more
    assert len(run.decodes.started) == 1
    assert run.budget.take() and run.budget.take()  # its slot came back


def test_a_phrase_heard_before_speech_start_waits_for_it():
    run = Run()
    run.spotter.begin(0, continued=False)
    run.windows(1, 7)
    run.decodes.answer("stop")
    assert run.events == []  # the candidate may still be discarded
    run.spotter.confirmed()
    run.spotter.started()
    assert [e.spotted.phrase for e in run.events] == ["stop"]


def test_a_phrase_of_a_discarded_candidate_or_of_a_finalized_utterance_is_dropped():
    run = Run()
    run.spotter.begin(0, continued=False)
    run.windows(1, 7)
    run.decodes.answer("stop")  # held for a SPEECH_START that never comes
    run.spotter.end()  # discarded
    run.spotter.begin(20 * WINDOW, continued=False)
    run.spotter.confirmed()
    run.spotter.started()
    assert run.events == []
    run.windows(27, 27, utt_start=20 * WINDOW)
    run.state.index += 1  # its final went out before the decode came back
    run.decodes.answer("stop")
    assert run.events == []


def test_words_must_match_whole_and_in_order():
    run = Run(phrases=("hold on",))
    run.spotter.begin(0, continued=False)
    run.spotter.confirmed()
    run.spotter.started()
    for heard in ("on hold", "stopwatch", "holding on"):
        run.windows(len(run.decodes.started) * 7 + 7, len(run.decodes.started) * 7 + 7)
        run.decodes.answer(heard)
    assert run.events == [] and len(run.decodes.started) == 3


def test_no_spotting_while_paused_for_a_continued_utterance_or_past_the_budget():
    run = Run(slots=1)
    run.spotter.paused = True
    run.spotter.begin(0, continued=False)
    run.windows(1, 20)
    run.spotter.paused = False
    run.spotter.begin(30 * WINDOW, continued=True)  # goes on from an utterance cut at max_utterance
    run.windows(31, 50, utt_start=30 * WINDOW)
    assert run.decodes.started == []
    other = PhraseSpotter.for_stream(
        Spotting(200, 200, 1500, run.budget), ("stop",), Decodes(), StreamState("en"), [].append, run.names
    )
    other.begin(0, continued=False)  # holds the one slot
    run.spotter.begin(60 * WINDOW, continued=False)
    run.windows(61, 80, utt_start=60 * WINDOW)
    assert run.decodes.started == [] and value(metrics.ASR_SPOTTING_SKIPPED.labels(*run.names)) == 1
