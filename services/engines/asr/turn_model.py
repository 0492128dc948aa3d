"""The turn model: has the speaker finished their turn? Smart Turn v3.2 (BSD-2-Clause) on CPU, from the audio alone.

Its ONNX file (``smart-turn-v3.2-cpu.onnx``, 8.7 MB) ships inside the ``pipecat-ai`` wheel, installed ``--no-deps``
(services/asr/requirements-cpu-nodeps.txt): the package is located with ``importlib.util.find_spec`` and never
imported (its dependencies are a whole agent framework), and onnxruntime runs the file.

The graph (read from the file at load, and checked): input ``input_features`` float32 [batch, 80, 800] -- Whisper
log-mel, 80 bins, 10 ms hop, 8 s at 16 kHz; output ``logits`` [batch, 1], which despite its name is already the
probability (a sigmoid is in the graph) that the turn is complete. The input is made the way the model was trained
(Smart Turn's model card and inference code): the last 8 s of the turn's audio, zero-padded at the *front* when
shorter so that the end of the audio sits at the end of the window; the 8 s waveform normalised to zero mean and unit
variance (padding included); then Whisper's log-mel (faster-whisper's ``FeatureExtractor``, no extra padding: 128000
samples give 801 centred frames, the last dropped, as Whisper does).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import time
from pathlib import Path

import numpy as np

from services.common import metrics
from services.common.engines import SEMANTIC_MODE, TEXT_CHECK_OFF, TEXT_CHECK_ON, Endpointing
from services.common.errors import FailedPrecondition

log = logging.getLogger("voicefleet.asr.turn")

RATE = 16_000
WINDOW_SECONDS = 8
WINDOW_SAMPLES = WINDOW_SECONDS * RATE
MEL_BINS = 80
FRAMES = WINDOW_SAMPLES // 160  # 10 ms hop
MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
PACKAGE = "pipecat-ai"
REQUIREMENTS = "services/asr/requirements-cpu-nodeps.txt"
INPUT, OUTPUT = "input_features", "logits"
NORM_EPS = 1e-7  # variance floor of the waveform normalisation (as in training: Whisper's feature extractor)


class TurnModelMissing(RuntimeError):
    """The model file is not where it should be; the message says what to install."""


def turn_model_path(configured: str = "") -> Path:
    """``configured`` when set (asr.turn_model_path), else the file inside the installed ``pipecat-ai`` wheel, found
    without importing the package. Raises TurnModelMissing naming the package and the requirements file."""
    install = f"pip install --no-deps -r {REQUIREMENTS} (it pins {PACKAGE}, whose wheel ships {MODEL_FILE})"
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise TurnModelMissing(f"asr.turn_model_path: {path} is not a file; leave it empty to use {PACKAGE}'s")
        return path
    spec = importlib.util.find_spec("pipecat")
    if spec is None or not spec.submodule_search_locations:
        raise TurnModelMissing(f"semantic endpointing needs the {PACKAGE} wheel, which is not installed: {install}")
    path = Path(next(iter(spec.submodule_search_locations))) / "audio" / "turn" / "smart_turn" / "data" / MODEL_FILE
    if not path.is_file():
        raise TurnModelMissing(f"{path} is missing from the installed {PACKAGE} wheel: {install}")
    return path


class TurnModel:
    """One onnxruntime session per process, shared by every stream: ``probability`` may be called from several
    threads at once (onnxruntime's ``run`` is thread-safe; the feature extractor keeps no state per call). One
    intra-op thread: the service runs many streams, each judging on its own worker thread."""

    def __init__(self, service: str, path: Path):
        import onnxruntime
        from faster_whisper.feature_extractor import FeatureExtractor

        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        self.path = path
        self.session = onnxruntime.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self._check_graph()
        self._features = FeatureExtractor(feature_size=MEL_BINS, chunk_length=WINDOW_SECONDS)
        self._cost = metrics.ASR_TURN_MODEL.labels(service)

    def _check_graph(self) -> None:
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name: o for o in self.session.get_outputs()}
        shape = list(inputs[INPUT].shape) if INPUT in inputs else None
        if shape is None or shape[1:] != [MEL_BINS, FRAMES] or OUTPUT not in outputs:
            raise TurnModelMissing(
                f"{self.path} is not the Smart Turn v3 graph this code reads (input {INPUT} [batch, {MEL_BINS},"
                f" {FRAMES}], output {OUTPUT}); got inputs {[(i.name, i.shape) for i in inputs.values()]}"
            )

    def features(self, audio: np.ndarray) -> np.ndarray:
        """[80, 800] log-mel of the last 8 s of ``audio`` (float32, 16 kHz), end-aligned."""
        x = np.asarray(audio, dtype=np.float32)[-WINDOW_SAMPLES:]
        if len(x) < WINDOW_SAMPLES:
            x = np.concatenate([np.zeros(WINDOW_SAMPLES - len(x), dtype=np.float32), x])
        x = (x - x.mean()) / np.sqrt(x.var() + NORM_EPS)
        return self._features(x, padding=0).astype(np.float32)

    def probability(self, audio: np.ndarray) -> float:
        """Probability, 0..1, that the speaker has finished their turn at the end of ``audio`` (float32, 16 kHz)."""
        t0 = time.perf_counter()
        features = self.features(audio)[np.newaxis]
        out = self.session.run([OUTPUT], {INPUT: features})[0]
        self._cost.observe(time.perf_counter() - t0)
        return float(np.clip(out.reshape(-1)[0], 0.0, 1.0))


class TurnSupport:
    """What an asr engine (CPU or GPU) keeps for semantic endpointing: the service's default mode, the model when
    its file is there, and the settings of the judging (the asr config section).

    The file is located at construction (cheap); ``load`` (at the engine's start) builds the session and warms it.
    A service whose default mode is semantic refuses to start without the file (TurnModelMissing here); one whose
    default is silence starts and answers a stream that asks for semantic mode with FAILED_PRECONDITION naming the
    package."""

    def __init__(self, service: str, config):
        self.service = service
        self.default_mode = config.endpointing.mode
        # The text check's defaults (a stream's "" / () take them): on or off, and the words that do not end a turn.
        self.default_text_check = TEXT_CHECK_ON if config.endpointing.text_check else TEXT_CHECK_OFF
        self.non_final_words = tuple(config.endpointing.non_final_words)
        self.judge_interval_ms = config.turn_judge_interval_ms
        self.heard_silence_ms = config.turn_heard_silence_ms
        self.model: TurnModel | None = None
        self.path: Path | None = None
        self.missing = ""
        try:
            self.path = turn_model_path(config.turn_model_path)
        except TurnModelMissing as e:
            self.missing = str(e)
            if self.default_mode == SEMANTIC_MODE:
                raise TurnModelMissing(f"asr.endpointing.mode is semantic, but {self.missing}") from None

    def load(self) -> None:
        """Thread: load and warm the model (its first run allocates memory)."""
        if self.path is None:
            log.warning("semantic endpointing unavailable (streams asking for it are refused): %s", self.missing)
            return
        model = TurnModel(self.service, self.path)
        model.probability(np.zeros(RATE, dtype=np.float32))
        self.model = model

    def resolve(self, endpointing: Endpointing) -> Endpointing:
        """``endpointing`` with an unspecified mode ("") made the service's default, and so the text check's
        setting and words."""
        return dataclasses.replace(
            endpointing,
            mode=endpointing.mode or self.default_mode,
            text_check=endpointing.text_check or self.default_text_check,
            non_final_words=endpointing.non_final_words or self.non_final_words,
        )

    def check(self, endpointing: Endpointing) -> None:
        """FAILED_PRECONDITION when the stream would be semantic and there is no model file."""
        if self.resolve(endpointing).mode == SEMANTIC_MODE and self.path is None:
            raise FailedPrecondition(
                f"config.endpointing.mode: semantic is not available on this server: {self.missing}"
            )
