"""Silero VAD (ONNX, from the ``silero-vad`` wheel) run with onnxruntime, and the endpointer built on it.

The wheel's ``__init__`` imports torch, so the package is never imported: ``importlib.util.find_spec`` locates its
``data/silero_vad.onnx`` and onnxruntime runs it. One window is 512 new samples at 16 kHz (32 ms) with the last
64 samples of the previous window in front as context; the recurrent state (2, 1, 128) is per stream.
"""

from __future__ import annotations

import importlib.util
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from services.common import metrics
from services.common.engines import Endpointing

RATE = 16_000
WINDOW = 512  # samples per VAD window at 16 kHz (32 ms)
CONTEXT = 64  # samples of the previous window fed in front of each window
WINDOW_MS = WINDOW * 1000 / RATE
# Offsets are refined with window levels (Silero's probability rises a window late and stays high for up to
# ~200 ms after the last sound): the start moves back over windows just before it that are louder than both
# START_FLOOR_DB and the quiet before speech by START_ABOVE_FLOOR_DB; the end moves back over trailing windows more
# than END_BELOW_PEAK_DB below the utterance's loudest window.
START_FLOOR_DB = -55.0
START_ABOVE_FLOOR_DB = 12.0
START_LOOKBACK = 1
END_BELOW_PEAK_DB = 35.0
# A window Silero calls silence still holds an utterance open when its level is above both the quiet before the
# speech + HOLD_ABOVE_FLOOR_DB and the utterance's peak - HOLD_BELOW_PEAK_DB: stop closures ("em-p-ty") and quiet
# fricatives, which espeak draws out past 200 ms at 8 kHz, are not the end of speech; stationary noise stays quiet.
HOLD_ABOVE_FLOOR_DB = 15.0
HOLD_BELOW_PEAK_DB = 40.0
UNKNOWN_FLOOR_DB = -60.0


def level_db(window: np.ndarray) -> float:
    """RMS level of a float window in dBFS."""
    return float(10 * np.log10(np.mean(window * window) + 1e-12))


def silero_model_path() -> Path:
    """``silero_vad/data/silero_vad.onnx`` inside the installed wheel, found without importing the package."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the silero-vad wheel is not installed; pip install --no-deps -r services/asr/requirements-cpu-nodeps.txt"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing from the silero-vad wheel")
    return path


class SileroVad:
    """One ONNX session shared by every stream (onnxruntime sessions are safe to run from several threads)."""

    def __init__(self, service: str):
        import onnxruntime

        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self.path = silero_model_path()
        self.session = onnxruntime.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        self._sr = np.array(RATE, dtype=np.int64)
        self._cost = metrics.ASR_VAD_WINDOW.labels(service)

    def new_state(self) -> VadState:
        return VadState()

    def probability(self, state: VadState, window: np.ndarray) -> float:
        """Speech probability of one 512-sample float32 window; advances ``state``."""
        t0 = time.perf_counter()
        x = np.concatenate([state.context, window])[np.newaxis, :]
        out, state.rnn = self.session.run(None, {"input": x, "state": state.rnn, "sr": self._sr})
        state.context = window[-CONTEXT:]
        self._cost.observe(time.perf_counter() - t0)
        return float(out[0, 0])


@dataclass
class VadState:
    rnn: np.ndarray = field(default_factory=lambda: np.zeros((2, 1, 128), dtype=np.float32))
    context: np.ndarray = field(default_factory=lambda: np.zeros(CONTEXT, dtype=np.float32))


# Endpointer states.
SILENCE, CANDIDATE, SPEECH = "silence", "candidate", "speech"


@dataclass(frozen=True)
class Transition:
    """What one window changed. Offsets are samples at 16 kHz from the start of the stream."""

    kind: str  # "candidate" (speech may be starting), "start" (confirmed), "discard" (too short), "end"
    offset: int
    reason: str = ""  # for "end": endpoint | max_utterance | end_of_stream


class Endpointer:
    """Turns per-window speech probabilities into utterances, like Silero's VADIterator with two additions:
    a minimum speech length before an utterance is confirmed, and a longest utterance.

    - speech starts at the first window with p >= threshold (a *candidate*); it is confirmed (SPEECH_START at the
      candidate's start) once it has lasted ``min_speech_ms``; a candidate that falls silent for the hangover
      before that is discarded;
    - speech ends at the first window with p < threshold - 0.15 that is followed by ``hangover_ms`` of such
      windows (any window >= threshold in between cancels it, and so does one whose level says it is not quiet,
      see HOLD_*); SPEECH_END carries where the silence began (moved back over trailing quiet windows);
    - an utterance reaching ``max_utterance_ms`` is ended there (reason max_utterance); if speech goes on, a new
      one starts at the same offset.
    """

    def __init__(self, endpointing: Endpointing):
        self.threshold = endpointing.threshold
        self.negative = max(0.01, endpointing.threshold - 0.15)
        self.min_speech = int(endpointing.min_speech_ms * RATE / 1000)
        self.hangover = int(endpointing.hangover_ms * RATE / 1000)
        self.max_utterance = int(endpointing.max_utterance_ms * RATE / 1000)
        self.state = SILENCE
        self.start = 0  # candidate / utterance start
        self.last_speech_end = 0  # end of the last window >= threshold
        self.silence_start: int | None = None  # first quiet window since the last speech window
        self._before: deque[tuple[int, float]] = deque(maxlen=16)  # (start, level) of windows before speech
        self._levels: list[tuple[int, float]] = []  # (start, level) of the utterance's windows
        self._floor = UNKNOWN_FLOOR_DB  # level of the quiet before the utterance
        self._peak = UNKNOWN_FLOOR_DB  # loudest window of the utterance

    @property
    def in_utterance(self) -> bool:
        return self.state != SILENCE

    def push(self, p: float, window_start: int, level: float = 0.0) -> list[Transition]:
        """One window's speech probability and level (dBFS); returns what changed."""
        end = window_start + WINDOW
        out: list[Transition] = []
        if self.state == SILENCE:
            if p >= self.threshold:
                start = self._refined_start(window_start)
                self._floor = min((lv for _, lv in self._before), default=UNKNOWN_FLOOR_DB)
                self._peak = level
                self.state, self.start, self.last_speech_end, self.silence_start = CANDIDATE, start, end, None
                self._levels = [(w, lv) for w, lv in self._before if w >= start] + [(window_start, level)]
                out.append(Transition("candidate", start))
                if self.min_speech <= WINDOW:
                    self.state = SPEECH
                    out.append(Transition("start", start))
            else:
                self._before.append((window_start, level))
            return out
        self._levels.append((window_start, level))
        self._peak = max(self._peak, level)
        quiet = level < max(self._floor + HOLD_ABOVE_FLOOR_DB, self._peak - HOLD_BELOW_PEAK_DB)

        if p >= self.threshold:
            self.last_speech_end, self.silence_start = end, None
        elif p < self.negative and quiet:
            if self.silence_start is None:
                self.silence_start = window_start
        elif not quiet:
            self.silence_start = None

        if self.state == CANDIDATE:
            if self.last_speech_end - self.start >= self.min_speech:
                self.state = SPEECH
                out.append(Transition("start", self.start))
            elif self.silence_start is not None and end - self.silence_start >= self.hangover:
                self.state = SILENCE
                out.append(Transition("discard", self.silence_start))
                return out

        if self.state == SPEECH:
            if self.silence_start is not None and end - self.silence_start >= self.hangover:
                self.state = SILENCE
                out.append(Transition("end", self._refined_end(self.silence_start), "endpoint"))
            elif end - self.start >= self.max_utterance:
                out.append(Transition("end", end, "max_utterance"))
                if self.silence_start is None:  # still speaking: the next utterance starts here
                    self.start = end
                    self._levels = []
                    self._peak = UNKNOWN_FLOOR_DB
                    out.append(Transition("candidate", end))
                    out.append(Transition("start", end))
                else:
                    self.state = SILENCE
        return out

    def flush(self, stream_end: int) -> list[Transition]:
        """The audio is over: end or discard the utterance in progress."""
        if self.state == SILENCE:
            return []
        state, self.state = self.state, SILENCE
        if state == CANDIDATE and self.last_speech_end - self.start < self.min_speech:
            return [Transition("discard", stream_end)]
        out = [] if state == SPEECH else [Transition("start", self.start)]
        end = self._refined_end(self.silence_start) if self.silence_start is not None else stream_end
        return [*out, Transition("end", end, "end_of_stream")]

    def _refined_start(self, candidate: int) -> int:
        if not self._before:
            return candidate
        floor = min(level for _, level in self._before)
        bar = max(START_FLOOR_DB, floor + START_ABOVE_FLOOR_DB)
        start = candidate
        for w, level in list(self._before)[::-1][:START_LOOKBACK]:
            if w + WINDOW != start or level < bar:
                break
            start = w
        return start

    def _refined_end(self, silence_start: int) -> int:
        levels = [(w, lv) for w, lv in self._levels if w < silence_start]
        if not levels:
            return silence_start
        bar = max(lv for _, lv in levels) - END_BELOW_PEAK_DB
        end = silence_start
        for w, level in reversed(levels):
            if level >= bar or w <= self.start:
                break
            end = w
        return max(end, self.start + WINDOW)
