"""The turn-taking set's 18 complete lines as the asr's final decodes them at a pause: each from 0.2 s before its
speech to 96 ms after it (float32). Shared by decode_cost.py and compute_types.py (run beside it: the script's
directory is on sys.path)."""

import numpy as np

from bench.conversation import TURN_SET_SEED
from bench.turn_set import Counts, build


def complete_line_clips() -> tuple[list, list[np.ndarray]]:
    """(the complete lines, each line's clip)."""
    turn_set = build(TURN_SET_SEED, Counts(6, 4, 6, 6, 2))
    lines = [line for line in turn_set.lines.values() if line.kind == "complete"]
    clips = []
    for line in lines:
        pcm = np.frombuffer(line.pcm, dtype="<i2").astype(np.float32) / 32768.0
        clips.append(pcm[max(0, line.speech_start_ms * 16 - 3200) : (line.speech_end_ms + 96) * 16])
    return lines, clips
