"""StreamAudio (services/engines/asr/stream_audio.py): the audio a stream keeps for its decoders."""

from __future__ import annotations

import numpy as np

from services.engines.asr.stream_audio import PAD_BEFORE, PREROLL, StreamAudio, ms
from services.engines.asr.vad import WINDOW
from tests.asr.stream.kit import windows


def stream_of(n: int) -> StreamAudio:
    audio = StreamAudio()
    for window in windows(n, level=30000):
        audio.push(window)
    return audio


def test_a_batch_is_padded_to_whole_windows_only_at_the_end_of_the_stream():
    audio = StreamAudio()
    assert audio.add(np.ones(700, dtype=np.int16)) == 700
    pending, real_end = audio.batch(flush=False)
    assert len(pending) == 700 and real_end == 700
    pending, real_end = audio.batch(flush=True)
    assert len(pending) == 2 * WINDOW and real_end == 700  # the real audio still ends at 700
    assert not pending[700:].any()


def test_fed_audio_ends_where_windowed_and_pending_audio_ends():
    audio = StreamAudio()
    audio.add(np.ones(WINDOW + 10, dtype=np.int16))
    pending, _ = audio.batch(flush=False)
    audio.push(pending[:WINDOW])
    audio.pending = pending[WINDOW:]
    assert audio.pos == WINDOW
    assert audio.add(np.ones(5, dtype=np.int16)) == WINDOW + 15


def test_a_slice_is_the_stream_samples_asked_for_across_windows():
    audio = stream_of(10)
    assert audio.pos == 10 * WINDOW
    piece = audio.slice(WINDOW - 3, 2 * WINDOW + 4)
    assert piece.tolist() == list(range(WINDOW - 3, 2 * WINDOW + 4))
    assert len(audio.slice(9 * WINDOW, 20 * WINDOW)) == WINDOW  # clipped to what was windowed
    assert len(audio.slice(5 * WINDOW, 5 * WINDOW)) == 0


def test_trim_keeps_at_least_what_is_asked_in_whole_windows():
    audio = stream_of(40)
    audio.trim(PREROLL)
    kept = audio.pos - audio.start
    assert PREROLL <= kept < PREROLL + WINDOW
    assert audio.slice(0, audio.start).size == 0  # what was dropped is gone
    assert audio.slice(audio.start, audio.pos).tolist() == list(range(audio.start, audio.pos))


def test_an_utterance_comes_with_the_audio_before_it_and_silence_where_the_stream_had_none():
    audio = stream_of(40)
    samples, start = audio.utterance(20 * WINDOW, 25 * WINDOW)
    assert start == 20 * WINDOW - PAD_BEFORE
    assert samples.dtype == np.float32 and len(samples) == 5 * WINDOW + PAD_BEFORE
    assert np.allclose(samples * 32768.0, np.arange(start, 25 * WINDOW))
    # Speech from the first sample: PAD_BEFORE of silence stands in for what was never heard; the offset is negative.
    samples, start = audio.utterance(0, WINDOW)
    assert start == -PAD_BEFORE and len(samples) == PAD_BEFORE + WINDOW
    assert not samples[:PAD_BEFORE].any() and np.allclose(samples[PAD_BEFORE:] * 32768.0, np.arange(WINDOW))


def test_ms_is_whole_ms_of_16_khz_samples():
    assert [ms(0), ms(15), ms(16), ms(WINDOW)] == [0, 0, 1, 32]
