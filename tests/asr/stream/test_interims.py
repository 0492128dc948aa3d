"""Interims (services/engines/asr/interims.py): pass 1 on an utterance, its hypothesis every interval as an interim
result, within the engine's budget. The decoder is a stand-in whose hypothesis grows with the audio it was given
(pocketsphinx itself: tests/asr/test_asr_engines.py)."""

from __future__ import annotations

import numpy as np

from services.common import metrics
from services.common.engines import RESULT
from services.engines.asr.budgets import InterimBudget
from services.engines.asr.interims import Interims
from services.engines.asr.stream_audio import PAD_BEFORE, StreamAudio
from services.engines.asr.vad import WINDOW
from tests.asr.stream.kit import labels, value, windows

WORDS = "one two three four five six seven eight nine ten".split()


class Decoder:
    """One word per 2 000 samples given since ``start``; keeps what happened to it."""

    language = "en"
    english_only = True

    def __init__(self, fail_release: bool = False):
        self.given = 0
        self.log: list[str] = []
        self.fail_release = fail_release

    def start(self) -> None:
        self.given = 0
        self.log.append("start")

    def accept(self, pcm: np.ndarray) -> None:
        self.given += len(pcm)

    def hypothesis(self) -> str:
        return " ".join(WORDS[: self.given // 2000])

    def end(self) -> None:
        self.log.append("end")

    def release(self) -> None:
        self.log.append("release")
        if self.fail_release:
            raise RuntimeError("the pass-1 process died")


def audio_of(n: int) -> StreamAudio:
    audio = StreamAudio()
    for window in windows(n):
        audio.push(window)
    return audio


def interims(decoder, slots: int = 4, interval_ms: int = 160):
    names = labels("interims")
    return Interims(decoder, InterimBudget(*names, slots), interval_ms, "en", names), names


def test_an_utterance_starts_with_the_audio_before_it_and_says_what_it_heard_every_interval():
    decoder = Decoder()
    part, _ = interims(decoder, interval_ms=160)  # 5 windows
    audio = audio_of(20)
    part.begin(audio, 20 * WINDOW - WINDOW)  # a candidate that started a window ago
    assert decoder.given == PAD_BEFORE + WINDOW and part.on
    looks = []
    for window in windows(30, start=20):
        audio.push(window)
        part.accept(window)
        event = part.maybe_look(0, 19 * WINDOW, audio.pos)
        if event is not None:
            looks.append((audio.pos // WINDOW, event))
    # every 5 windows it looks; a hypothesis that did not change says nothing
    assert [w for w, _ in looks] == [25, 30, 35, 40, 45, 50]
    first, second = looks[0][1].result, looks[1][1].result
    assert looks[0][1].kind == RESULT and not first.is_final and first.utterance_start_ms == 19 * 32
    assert first.utterance_end_ms == first.audio_processed_ms == 25 * 32 and first.language == "en"
    # 3712 + 5 * 512 samples heard: 3 words; then 4, of which 3 unchanged since the last interim (stability 0.9 * 3/4)
    assert (first.transcript, first.stability) == ("one two three", 0.0)
    assert (second.transcript, second.stability) == ("one two three four", 0.675)


def test_the_same_hypothesis_twice_is_not_sent_again():
    part, _ = interims(Decoder(), interval_ms=32)  # a look every window
    audio = audio_of(1)
    part.begin(audio, 0)  # 512 samples heard: no word yet
    said = []
    for window in windows(4, start=1):
        audio.push(window)
        part.accept(window)
        event = part.maybe_look(0, 0, audio.pos)
        said.append(event.result.transcript if event is not None else None)
    assert said == [None, None, "one", None]  # 1024, 1536, 2048, 2560 samples heard


def test_a_spent_budget_leaves_the_utterance_without_interims_and_ending_it_gives_the_slot_back():
    names = labels("interims")
    budget = InterimBudget(*names, 1)
    skipped = metrics.ASR_INTERIMS_SKIPPED.labels(*names)
    holder, other = Decoder(), Decoder()
    first, second = Interims(holder, budget, 32, "en", names), Interims(other, budget, 32, "en", names)
    audio = audio_of(10)
    first.begin(audio, 0)
    second.begin(audio, 0)
    assert first.on and not second.on and other.log == [] and value(skipped) == 1
    second.accept(windows(1)[0])
    assert second.maybe_look(0, 0, audio.pos) is None
    first.end()
    assert holder.log == ["start", "end"]
    second.begin(audio, 0)
    assert second.on and other.log == ["start"]


def test_the_first_interim_is_timed_once_from_speech_start_and_pass_1_cost_is_observed_at_the_end():
    part, names = interims(Decoder())
    first_interim = metrics.ASR_FIRST_INTERIM.labels(*names)
    rtf = metrics.ASR_RTF.labels(*names, "interim")
    part.begin(audio_of(10), 0)
    part.sent()  # before SPEECH_START: nothing to time it from
    part.begin(audio_of(10), 0)
    part.speech_started()
    part.sent()
    part.sent()
    assert first_interim._sum.get() >= 0 and sum(b.get() for b in first_interim._buckets) == 1
    part.finish(0, 10 * WINDOW)
    assert sum(b.get() for b in rtf._buckets) == 1 and not part.on


def test_another_language_drops_pass_1_for_the_rest_of_the_stream():
    decoder = Decoder()
    part, _ = interims(decoder)
    assert part.english_only
    part.begin(audio_of(10), 0)
    part.drop()
    assert decoder.log == ["start", "release"] and not part.english_only
    part.begin(audio_of(10), 0)
    assert not part.on and decoder.log == ["start", "release"]


def test_a_decoder_that_fails_to_go_back_still_gives_the_slot_back():
    names = labels("interims")
    budget = InterimBudget(*names, 1)
    part = Interims(Decoder(fail_release=True), budget, 160, "en", names)
    part.begin(audio_of(10), 0)
    assert not budget.take()
    part.release()
    assert budget.take()  # the slot came back
