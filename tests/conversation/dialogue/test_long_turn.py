"""LongTurnGate: a turn past max_user_turn_s is skipped until the caller pauses as long as the hangover, and its
results stay dropped until the next speech starts (services/conversation/dialogue/long_turn.py)."""

from __future__ import annotations

from services.conversation.dialogue.long_turn import LongTurnGate
from tests.conversation.dialogue.kit import silence, tone


def test_the_gate_skips_until_a_pause_as_long_as_the_hangover():
    gate = LongTurnGate()
    gate.start()
    assert gate.skipping and gate.drop_results
    for _ in range(10):
        gate.listen(silence(20), hangover_ms=300)  # 200 ms of quiet
    gate.listen(tone(20), hangover_ms=300)  # sound again: the quiet starts over
    for _ in range(14):
        gate.listen(silence(20), hangover_ms=300)
    assert gate.skipping  # 280 ms
    gate.listen(silence(20), hangover_ms=300)
    assert not gate.skipping and gate.drop_results


def test_results_come_back_at_the_first_speech_after_the_pause_not_before():
    gate = LongTurnGate()
    gate.start()
    gate.speech_started()
    assert gate.drop_results  # still skipping: speech now is the same monologue
    gate.listen(silence(400), hangover_ms=300)
    gate.speech_started()
    assert not gate.drop_results
