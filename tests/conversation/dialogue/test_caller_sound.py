"""CallerSound: where the caller last made sound and how long a run of sound lasts (services/conversation/dialogue/
caller_sound.py), on real frames of tone and silence."""

from __future__ import annotations

from services.conversation.dialogue.caller_sound import SOUND_GAP_MS, CallerSound, window_levels_db
from tests.conversation.dialogue.kit import silence, tone


def feed(sound: CallerSound, frames: list[bytes], fed_ms: int = 0) -> int:
    """Track ``frames`` that follow ``fed_ms`` of the stream; returns the stream ms after them."""
    for pcm in frames:
        fed_ms += len(pcm) // 32
        sound.track(pcm, fed_ms)
    return fed_ms


def test_a_20ms_frame_is_one_window_and_a_long_one_is_cut_in_32ms_windows():
    levels, window = window_levels_db(tone(20))
    assert len(levels) == 1 and window == 320
    levels, window = window_levels_db(tone(96))
    assert len(levels) == 3 and window == 512
    assert -26 < levels[0] < -20  # a 0.1 amplitude sine: -23 dBFS
    assert window_levels_db(silence(20))[0][0] < -100


def test_the_last_loud_window_is_placed_where_it_ended_in_the_frame():
    sound = CallerSound()
    feed(sound, [silence(100), tone(64) + silence(64)])  # 100..164 ms loud, then quiet to 228
    assert sound.last_loud_ms == 164
    feed(sound, [silence(20)] * 5, fed_ms=228)
    assert sound.last_loud_ms == 164  # silence moves nothing


def test_a_run_of_sound_starts_again_only_after_a_gap_longer_than_sound_gap_ms():
    sound = CallerSound()
    # 0-200 ms sound, 400 ms quiet, 600-700 ms sound: one run
    fed = feed(sound, [tone(20)] * 10 + [silence(20)] * (SOUND_GAP_MS // 20 - 5) + [tone(20)] * 5)
    assert (fed, sound.sound_since_ms, sound.last_loud_ms) == (700, 0, 700)
    assert sound.run_length_ms(300) == 400  # from where the speech over the reply started
    # 600 ms quiet, then 1300-1400 ms sound: a new run
    feed(sound, [silence(20)] * (SOUND_GAP_MS // 20 + 5) + [tone(20)] * 5, fed_ms=fed)
    assert (sound.sound_since_ms, sound.last_loud_ms) == (1300, 1400)
    assert sound.run_length_ms(300) == 100


def test_sound_after_the_speech_end_counts_only_beyond_two_windows():
    sound = CallerSound()
    sound.last_loud_ms = 1000 + 64
    assert not sound.loud_after(1000)
    sound.last_loud_ms = 1000 + 65
    assert sound.loud_after(1000)
    assert sound.sounding(1065 + 159) and not sound.sounding(1065 + 160)
