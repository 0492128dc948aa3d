"""SpeculativeFinal (services/engines/asr/speculation.py): pass 2 started as a pause begins, kept for the pause that
ends the utterance, dropped otherwise."""

from __future__ import annotations

import concurrent.futures

from services.common import metrics
from services.engines.asr.speculation import SpeculativeFinal
from tests.asr.stream.kit import labels, value


class Decodes:
    """Starts a decode (a future left pending, as one waiting in the final pool's line) and remembers it."""

    def __init__(self) -> None:
        self.started: list[concurrent.futures.Future] = []

    def __call__(self) -> concurrent.futures.Future:
        self.started.append(concurrent.futures.Future())
        return self.started[-1]


def speculation(after_ms: int = 96):
    decodes, names = Decodes(), labels("speculation")
    outcomes = {o: metrics.ASR_SPECULATIVE_FINALS.labels(*names, o) for o in ("used", "dropped")}
    return SpeculativeFinal(after_ms, decodes, names), decodes, outcomes


def test_the_decode_starts_once_the_pause_has_lasted_and_only_once():
    spec, decodes, _ = speculation(96)  # 1536 samples
    spec.maybe_start(None, 10_000)  # no pause
    spec.maybe_start(8_000, 8_000 + 1535)
    assert decodes.started == [] and not spec.pending
    spec.maybe_start(8_000, 8_000 + 1536)
    spec.maybe_start(8_000, 8_000 + 5000)
    assert len(decodes.started) == 1 and spec.pending


def test_speech_coming_back_drops_the_decode_and_the_ended_utterance_has_none():
    spec, decodes, outcomes = speculation()
    spec.maybe_start(8_000, 10_000)
    spec.maybe_start(None, 10_512)  # sound again: no pause any more
    assert decodes.started[0].cancelled() and value(outcomes["dropped"]) == 1 and not spec.pending
    assert spec.take(None, "endpoint") is None
    assert value(outcomes["used"]) == 0


def test_the_utterance_ended_by_the_pause_takes_its_decode():
    spec, decodes, outcomes = speculation()
    spec.maybe_start(8_000, 10_000)
    assert spec.take(8_000, "turn_complete") is decodes.started[0]
    assert value(outcomes["used"]) == 1 and not spec.pending


def test_an_utterance_ended_elsewhere_drops_the_pause_decode():
    for reason, pause in (("max_utterance", 8_000), ("end_of_stream", 8_000), ("endpoint", 9_000)):
        spec, decodes, outcomes = speculation()
        spec.maybe_start(8_000, 10_000)
        assert spec.take(pause, reason) is None, reason
        assert decodes.started[0].cancelled() and value(outcomes["dropped"]) == 1


def test_a_judgement_starts_the_decode_only_when_speculative_finals_are_on():
    spec, decodes, _ = speculation(96)
    spec.at_judgement(8_000)
    assert len(decodes.started) == 1
    spec.at_judgement(8_000)  # the same pause: the same decode
    assert len(decodes.started) == 1
    off, off_decodes, _ = speculation(0)
    assert not off.enabled
    off.at_judgement(8_000)
    assert off_decodes.started == []


def test_the_text_check_gets_the_decode_of_its_pause_even_with_speculative_finals_off():
    spec, decodes, outcomes = speculation(0)
    first = spec.for_pause(8_000)
    assert spec.for_pause(8_000) is first
    second = spec.for_pause(9_600)  # a later pause: the first one's decode is of no use
    assert first.cancelled() and second is decodes.started[1] and value(outcomes["dropped"]) == 1


def test_close_cancels_the_decode_waiting_in_line():
    spec, decodes, _ = speculation()
    spec.maybe_start(8_000, 10_000)
    spec.cancel()
    assert decodes.started[0].cancelled()
