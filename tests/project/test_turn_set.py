"""The turn-taking set's bookkeeping (bench/turn_set.py), on a tiny set: one complete line and one paused line.

What the bench trusts the set for: the recorded speech end is where the words end (nothing of the last word after
it, nothing but quiet after it), the pause sits at a word boundary in the middle of the sentence (the words on each
side of it are the marked halves, as a listener hears them), and the same seed gives the same audio.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.turn_set import RATE, Counts, build, window_levels_dbfs
from tests.speech import INTELLIGIBLE, intelligible

TINY = Counts(
    complete_per_length=1, paused_per_pause=1, backchannels=0, stop_words=0, echo=0, lengths=("long",), pauses_ms=(800,)
)
# CPU work with no clock in it: `make test` runs it in its background lane (scripts/test-lanes.sh).
pytestmark = [pytest.mark.timeout(300), pytest.mark.background]


def ms_to_bytes(ms: int) -> int:
    return ms * RATE // 1000 * 2


def level(pcm: bytes) -> float:
    """Level of the loudest 10 ms window, in dBFS."""
    return float(window_levels_dbfs(pcm).max())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build(seed=7, counts=TINY, cache=tmp_path_factory.mktemp("turn_set"))


def test_the_tiny_set_holds_one_complete_and_one_paused_line(tiny):
    assert [tiny.line(i).kind for i in tiny.complete + tiny.paused] == ["complete", "paused"]
    assert tiny.trials == []


def test_speech_end_is_where_the_last_word_ends(tiny):
    line = tiny.line(tiny.complete[0])
    end = ms_to_bytes(line.speech_end_ms)
    # Everything said is before the recorded end: the audio cut there still says the whole sentence ...
    error, heard = intelligible(line.text, line.pcm[:end], RATE)
    assert error <= INTELLIGIBLE, f"cut at the speech end ({line.speech_end_ms} ms) it says {heard!r}"
    # ... the end of the last word is right before it, and after it the line is quiet.
    assert level(line.pcm[end - ms_to_bytes(50) : end]) > -45.0
    tail = line.pcm[end:]
    assert len(tail) >= ms_to_bytes(20), "piper leaves a short tail of silence; the set keeps it"
    assert level(tail) < level(line.pcm[:end]) - 35.0, f"{level(tail):.1f} dBFS after the recorded speech end"


def test_the_pause_sits_between_the_marked_halves(tiny):
    line = tiny.line(tiny.paused[0])
    assert line.pause_ms == 800 and line.before and line.after
    pause_start, pause_end = ms_to_bytes(line.pause_at_ms), ms_to_bytes(line.pause_at_ms + line.pause_ms)
    assert not np.any(np.frombuffer(line.pcm[pause_start:pause_end], dtype=np.int16)), "the pause is silence"
    # Speech right up to the pause and right after it: a pause inside the sentence, not trailing silence.
    assert level(line.pcm[pause_start - ms_to_bytes(150) : pause_start]) > -40.0
    assert level(line.pcm[pause_end : pause_end + ms_to_bytes(150)]) > -40.0
    first, second = line.pcm[:pause_start], line.pcm[pause_end:]
    for half, words in ((first, line.before), (second, line.after)):
        error, heard = intelligible(words, half, RATE)
        assert error <= INTELLIGIBLE, f"expected {words!r}, the listener heard {heard!r}"
    assert line.speech_end_ms > line.pause_at_ms + line.pause_ms
    assert len(line.pcm) == len(first) + (pause_end - pause_start) + len(second)


def test_the_same_seed_gives_the_same_audio(tiny, tmp_path):
    again = build(seed=7, counts=TINY, cache=tmp_path)
    assert {i: line.pcm for i, line in again.lines.items()} == {i: line.pcm for i, line in tiny.lines.items()}
    cached = build(seed=7, counts=TINY, cache=tmp_path)  # from the manifest and WAVs this time
    assert {i: (line.pcm, line.speech_end_ms) for i, line in cached.lines.items()} == {
        i: (line.pcm, line.speech_end_ms) for i, line in again.lines.items()
    }
