"""Silero VAD (ONNX, from the ``silero-vad`` wheel) run with onnxruntime, and the endpointer built on it.

The wheel's ``__init__`` imports torch, so the package is never imported: ``importlib.util.find_spec`` locates its
``data/silero_vad.onnx`` and onnxruntime runs it. One window is 512 new samples at 16 kHz (32 ms) with the last
64 samples of the previous window in front as context; the recurrent state (2, 1, 128) is per stream.
"""

from __future__ import annotations

import importlib.util
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from services.common import metrics
from services.common.engines import SEMANTIC_MODE, Endpointing

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

    kind: str  # "candidate" (speech may be starting), "start" (confirmed), "discard" (too short), "end", "turn"
    offset: int
    reason: str = ""  # for "end": endpoint | max_utterance | end_of_stream | turn_complete | max_silence
    # For "turn" (semantic mode: the turn model judged at ``offset``): its probability that the turn is complete,
    # whether that reaches the threshold, and the silence so far (samples since the refined end of speech).
    probability: float = 0.0
    complete: bool = False
    silence: int = 0
    vetoed_by_word: str = ""  # the model said complete, the text check kept the turn open (complete is False)
    sentence: str = ""  # the model said incomplete, and these words before the pause read as a finished sentence


#: The turn model as the endpointer calls it: (end of the audio to hear, end of speech) in stream samples ->
#: probability that the speaker's turn is complete.
TurnJudge = Callable[[int, int], float]
#: The text check as the endpointer calls it when the model says complete: the word before the pause that keeps the
#: turn open, or "" (services/common/turn_text.py).
TextVeto = Callable[[], str]
#: Asked when the model says incomplete: the words before the pause when they read as a finished sentence, else "".
SentenceCheck = Callable[[], str]


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

    Semantic mode (``judge`` given, the mode resolved to SEMANTIC_MODE by the caller) replaces the hangover: silence
    is measured from the refined end of speech (Silero's probability lags the last sound by ~100-200 ms; the level
    says where it really stopped). Once it reaches ``min_silence_ms`` the turn model judges (a "turn" transition);
    complete ends the utterance at the end of speech (reason turn_complete), incomplete keeps it open and the model
    judges again every ``judge_interval_ms`` of further silence, until one says complete or the silence reaches
    ``max_silence_ms`` (reason max_silence). Speech resuming continues the same utterance. ``heard_silence_ms``
    (0 = all of it) caps the silence the model hears after the end of speech: once reached, its input no longer
    changes, so it is asked once more as soon as it is reached (not a judge_interval later) and then no more. Before
    ``min_silence_ms``, after ``early_silence_ms``, one earlier judgement ends the utterance only if the model is sure
    (``early_turn_threshold``) and says nothing otherwise. ``veto`` (the text check) is asked when the model says complete: a word back
    keeps the utterance open as an incomplete judgement would (the transition says which word). ``sentence`` is
    asked when it says incomplete: words that read as a finished sentence end the utterance once the silence reaches
    ``sentence_end_silence_ms`` (reason sentence_end) rather than ``max_silence_ms``.
    """

    def __init__(
        self,
        endpointing: Endpointing,
        judge: TurnJudge | None = None,
        judge_interval_ms: int = 200,
        heard_silence_ms: int = 0,
        veto: TextVeto | None = None,
        sentence: SentenceCheck | None = None,
    ):
        self.threshold = endpointing.threshold
        self.negative = max(0.01, endpointing.threshold - 0.15)
        self.min_speech = int(endpointing.min_speech_ms * RATE / 1000)
        self.hangover = int(endpointing.hangover_ms * RATE / 1000)
        self.max_utterance = int(endpointing.max_utterance_ms * RATE / 1000)
        self.semantic = endpointing.mode == SEMANTIC_MODE
        if self.semantic and judge is None:
            raise ValueError("semantic endpointing needs a turn model (judge)")
        self.judge = judge
        self.veto = veto
        self.turn_threshold = endpointing.turn_threshold
        self.min_silence = int(endpointing.min_silence_ms * RATE / 1000)
        self.max_silence = int(endpointing.max_silence_ms * RATE / 1000)
        self.sentence_end_silence = int(endpointing.sentence_end_silence_ms * RATE / 1000)
        # At or above max_silence the bound never comes first: the words are not asked for.
        self.sentence = sentence if self.sentence_end_silence < self.max_silence else None
        self._sentence = ""  # the pause's last judgement was incomplete, but these words read as a sentence
        self.judge_interval = int(judge_interval_ms * RATE / 1000)
        self.heard_silence = int(heard_silence_ms * RATE / 1000)
        # A first, stricter judgement before min_silence (off when it would not come first).
        self.early_silence = int(endpointing.early_silence_ms * RATE / 1000)
        if self.early_silence >= self.min_silence:
            self.early_silence = 0
        self.early_threshold = max(endpointing.early_turn_threshold, self.turn_threshold)
        self._early_judged: int | None = None  # the end of speech whose pause had its early judgement
        self._speech_end: tuple[int, int] | None = None  # (silence_start, its refined end of speech), cached
        self._judged: tuple[int, int] | None = None  # (where the model last judged, the end of what it heard)
        self.state = SILENCE
        self.start = 0  # candidate / utterance start
        self.last_speech_end = 0  # end of the last window >= threshold
        self.silence_start: int | None = None  # first quiet window since the last speech window
        self._before: deque[tuple[int, float]] = deque(maxlen=16)  # (start, level) of windows before speech
        self._levels: list[tuple[int, float]] = []  # (start, level) of the utterance's windows
        self._floor = UNKNOWN_FLOOR_DB  # level of the quiet before the utterance
        self._peak = UNKNOWN_FLOOR_DB  # loudest window of the utterance
        # Where the run of quiet windows (by level alone, no VAD) the utterance is in now began; None while sounding.
        # The level falls with the last word; Silero's probability follows 100-200 ms later.
        self.quiet_since: int | None = None

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
                self.quiet_since = None
                self._judged = None
                self._sentence = ""
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
        if not quiet:
            self.quiet_since = None
        elif self.quiet_since is None:
            self.quiet_since = window_start

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
            if self._ends_at(end, out):
                self.state = SILENCE
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

    def _ends_at(self, end: int, out: list[Transition]) -> bool:
        """Whether the silence so far ends the utterance at the window ending at ``end`` (appends its transitions)."""
        if self.silence_start is None:
            self._judged = None  # speech (again): the next pause is judged afresh
            self._sentence = ""
            return False
        if not self.semantic:
            if end - self.silence_start < self.hangover:
                return False
            out.append(Transition("end", self._refined_end(self.silence_start), "endpoint"))
            return True
        speech_end = self.speech_end()
        silence = end - speech_end
        if silence >= self.max_silence:
            out.append(Transition("end", speech_end, "max_silence"))
            return True
        if silence < self.min_silence:
            return self._ends_early(end, silence, speech_end, out)
        if self._sentence_ends(silence, speech_end, out):
            return True
        heard_end = self._heard_end(end, speech_end)
        # Judged again every judge_interval while what the model hears changes, and at once when it hears all it
        # will (heard_silence reached): that last judgement's input is the same whenever it runs, so it runs first.
        heard_all = bool(self.heard_silence) and heard_end == speech_end + self.heard_silence
        if self._judged is not None and (
            heard_end <= self._judged[1] or (end - self._judged[0] < self.judge_interval and not heard_all)
        ):
            return False
        p = self.judge(heard_end, speech_end)
        self._judged = (end, heard_end)
        complete = p >= self.turn_threshold
        vetoed = self.veto() if complete and self.veto is not None else ""
        complete = complete and not vetoed
        self._sentence = self.sentence() if not complete and not vetoed and self.sentence is not None else ""
        out.append(
            Transition(
                "turn",
                end,
                probability=p,
                complete=complete,
                silence=silence,
                vetoed_by_word=vetoed,
                sentence=self._sentence,
            )
        )
        if complete:
            out.append(Transition("end", speech_end, "turn_complete"))
            return True
        return self._sentence_ends(silence, speech_end, out)

    def _ends_early(self, end: int, silence: int, speech_end: int, out: list[Transition]) -> bool:
        """Once per pause, after ``early_silence`` (before ``min_silence``): a sure complete (p >= ``early_threshold``,
        no veto) ends the utterance there. Anything less says nothing: the pause gets its usual judgement at
        ``min_silence``, as without this one."""
        if not self.early_silence or silence < self.early_silence or self._early_judged == speech_end:
            return False
        # ... and as much quiet by level: where the end of speech was moved back over a weak last sound ("takes to",
        # its "to" 37 dB under the peak), the judgement waits until that sound has that much quiet after it too. The
        # pause's decode (the text check's words, and the final) starts here; started 64 ms after the level fell,
        # whisper tiny.en wrote "... how long it takes?" on an AVX2-only CPU, 96 ms after it "... takes to".
        if self.quiet_since is not None and end - self.quiet_since < self.early_silence:
            return False
        self._early_judged = speech_end
        heard_end = self._heard_end(end, speech_end)
        p = self.judge(heard_end, speech_end)
        if p < self.early_threshold or (self.veto is not None and self.veto()):
            return False
        out.append(Transition("turn", end, probability=p, complete=True, silence=silence))
        out.append(Transition("end", speech_end, "turn_complete"))
        return True

    def _heard_end(self, end: int, speech_end: int) -> int:
        """The end of what the model hears: at most ``heard_silence`` after the end of speech (0 = all of it)."""
        return min(end, speech_end + self.heard_silence) if self.heard_silence else end

    def _sentence_ends(self, silence: int, speech_end: int, out: list[Transition]) -> bool:
        """The pause's words read as a finished sentence and the silence reached sentence_end_silence_ms."""
        if not self._sentence or silence < self.sentence_end_silence:
            return False
        out.append(Transition("end", speech_end, "sentence_end"))
        return True

    def speech_end(self) -> int:
        """The refined end of speech of the current silence (cached per silence: it only looks at windows before)."""
        if self._speech_end is None or self._speech_end[0] != self.silence_start:
            self._speech_end = (self.silence_start, self._refined_end(self.silence_start))
        return self._speech_end[1]

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
