"""StreamTime and RecognizerPace: stream ms across recognizer streams, when audio arrived, and whether the recognizer
has reported on the caller's last sound (services/conversation/dialogue/stream_time.py)."""

from __future__ import annotations

import time

from services.common.engines import RESULT, SPEECH_START, TURN_ESTIMATE, AsrEvent, Hypothesis, TurnEstimate
from services.conversation.dialogue import stream_time
from services.conversation.dialogue.stream_time import RecognizerPace, StreamTime


def fed(clock: StreamTime, ms: int, at: float) -> None:
    clock.fed(16 * ms, at)


def test_offsets_of_a_new_stream_count_from_where_it_opened():
    clock = StreamTime()
    fed(clock, 1500, 10.0)
    clock.new_stream()
    assert clock.base_ms == 1500 and clock.abs_ms(200) == 1700
    fed(clock, 20, 10.5)
    assert clock.fed_ms == 1520


def test_arrival_wall_is_when_the_audio_at_an_offset_came():
    clock = StreamTime()
    for i in range(1, 6):
        fed(clock, 100, 10.0 + i)  # 100 ms at 11.0, 200 ms at 12.0, ...
    assert clock.arrival_wall(150) == 12.0
    assert clock.arrival_wall(100) == 11.0
    assert clock.arrival_wall(10_000) == 15.0  # past the end: the latest
    assert StreamTime().arrival_wall(0) is None


def test_the_recognizer_is_behind_on_sound_fed_a_moment_ago_it_has_not_reported(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    clock = StreamTime()
    pace = RecognizerPace(clock)
    for i in range(1, 11):
        fed(clock, 100, 99.0 + i * 0.1)  # 1 s of audio, the last 100 ms at 100.0
    pace.report(AsrEvent(SPEECH_START, offset_ms=600))
    assert pace.heard_ms == 600 and pace.lag_s == 0.0  # a VAD event sets no pace
    assert pace.behind(last_loud_ms=900)
    assert not pace.behind(last_loud_ms=600)
    now[0] = 100.0 + stream_time.RECOGNIZER_LAG_S
    assert not pace.behind(last_loud_ms=900)  # fed long enough ago: not waited for


def test_a_late_interim_widens_the_wait_for_the_recognizer(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    clock = StreamTime()
    pace = RecognizerPace(clock)
    for i in range(1, 11):
        fed(clock, 100, 99.0 + i * 0.1)
    interim = Hypothesis("hello", False, 0, 0, 200, 200)
    pace.report(AsrEvent(RESULT, offset_ms=200, result=interim))  # audio of 200 ms arrived at 99.2: 0.8 s late
    assert abs(pace.lag_s - 0.8) < 1e-9
    # The audio at 900 ms arrived at 99.9: waited for 2 x 0.8 s from then (not RECOGNIZER_LAG_S alone)
    now[0] = 99.9 + 1.5
    assert pace.behind(last_loud_ms=900)
    now[0] = 99.9 + 1.6 + 1e-9
    assert not pace.behind(last_loud_ms=900)
    estimate = TurnEstimate(0.5, False, 200, 1000, 0)
    pace.report(AsrEvent(TURN_ESTIMATE, offset_ms=0, turn=estimate))
    assert pace.heard_ms == 1000
