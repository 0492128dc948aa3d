"""TEST DOUBLE at the CosyVoice library boundary: ``FakeAutoModel`` stands in for ``cosyvoice.cli.cosyvoice.AutoModel``.

It mirrors the slice of the library's API that the engine uses (read from cosyvoice/cli/cosyvoice.py at the pinned
commit) and the library's own checks on it, so the engine's logic can be tested on a CPU machine with no weights:
  * ``AutoModel(model_dir=, load_trt=, load_vllm=, fp16=, trt_concurrent=)``; ``sample_rate`` 24000;
  * ``add_zero_shot_spk(prompt_text, prompt_wav, spk_id)`` (asserts a non-empty id, as the library does) +
    ``save_spkinfo()`` writing ``<model_dir>/spk2info.pt`` that the next instance loads; ``list_available_spks()``;
  * ``inference_zero_shot(tts_text, prompt_text, prompt_wav, zero_shot_spk_id=, stream=, speed=)`` yielding
    ``{'tts_speech': array [1, n]}``: like CosyVoice3's LM it requires ``<|endofprompt|>`` in the prompt text,
    and like ``CosyVoice2Model.tts`` it streams a first hop of ``model.token_hop_len`` tokens (25 Hz) and grows the
    hop by ``stream_scale_factor`` up to ``token_max_hop_len`` (on the shared ``model`` object, never reset);
  * like ``CosyVoice2Model.tts``, each request registers a uuid in ``model.tts_speech_token_dict`` /
    ``llm_end_dict`` / ``hift_cache_dict`` (under ``model.lock``), runs its "LLM" in a thread that sets
    ``llm_end_dict[uuid]`` when done, and removes the uuid only after its last chunk -- so a generator closed early
    leaves them behind, as the library does;
  * ``frontend`` (text_frontend '' here: no ttsfrd, no wetext) and ``seed_all``, the double of
    ``cosyvoice.utils.common.set_all_random_seed``, recording the seeds.
The audio is a tone per word (not speech): these tests check the engine's plumbing, not voice quality.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
import wave
from pathlib import Path
from types import SimpleNamespace

import numpy as np

RATE = 24_000
TOKEN_RATE = 25  # speech tokens per second of audio


class FakeAutoModel:
    instances: list[FakeAutoModel] = []

    def __init__(self, model_dir, load_trt=False, load_vllm=False, fp16=False, trt_concurrent=1):
        self.model_dir = model_dir
        self.kwargs = dict(load_trt=load_trt, load_vllm=load_vllm, fp16=fp16, trt_concurrent=trt_concurrent)
        self.sample_rate = RATE
        path = Path(model_dir) / "spk2info.pt"
        self.spk2info = json.loads(path.read_text()) if path.exists() else {}
        self.feature_computations: list[str] = []
        self.model = SimpleNamespace(
            token_hop_len=25,
            token_max_hop_len=100,
            stream_scale_factor=2,
            lock=threading.Lock(),
            tts_speech_token_dict={},
            llm_end_dict={},
            hift_cache_dict={},
        )
        self.frontend = SimpleNamespace(text_frontend="")
        self.llm_s = 0.05  # how long the "LLM thread" of a request runs
        self.pieces_made = 0
        self.step_s = 0.02  # time one flow/vocoder pass takes
        self.closed_early = threading.Event()
        FakeAutoModel.instances.append(self)

    def list_available_spks(self):
        return list(self.spk2info)

    def add_zero_shot_spk(self, prompt_text, prompt_wav, zero_shot_spk_id):
        assert zero_shot_spk_id != "", "do not use empty zero_shot_spk_id"
        with wave.open(prompt_wav, "rb") as w:
            assert w.getframerate() >= 16000, "wav sample rate must be greater than 16000"
            seconds = w.getnframes() / w.getframerate()
        self.feature_computations.append(zero_shot_spk_id)
        self.spk2info[zero_shot_spk_id] = {"prompt_text": prompt_text, "prompt_seconds": seconds}
        return True

    def save_spkinfo(self):
        (Path(self.model_dir) / "spk2info.pt").write_text(json.dumps(self.spk2info))

    def inference_zero_shot(
        self, tts_text, prompt_text, prompt_wav, zero_shot_spk_id="", stream=False, speed=1.0, text_frontend=True
    ):
        spk = self.spk2info[zero_shot_spk_id] if zero_shot_spk_id else {"prompt_text": prompt_text}
        assert "<|endofprompt|>" in spk["prompt_text"], "<|endofprompt|> not detected in CosyVoice3 prompt_text"
        if stream:
            assert speed == 1.0, "speed change only support non-stream inference mode"
        words = tts_text.split()
        audio = np.concatenate([_tone(i, 0.3 / speed) for i in range(len(words))]) if words else np.zeros(0)
        tokens = int(len(audio) / RATE * TOKEN_RATE)
        offset = 0
        m = self.model
        this_uuid = str(uuid.uuid1())
        with m.lock:
            m.tts_speech_token_dict[this_uuid], m.llm_end_dict[this_uuid] = [], False
            m.hift_cache_dict[this_uuid] = None
        llm = threading.Timer(self.llm_s, m.llm_end_dict.__setitem__, (this_uuid, True))
        llm.start()
        try:
            while offset < tokens:
                hop = self.model.token_hop_len if stream else tokens
                if stream:
                    self.model.token_hop_len = min(
                        self.model.token_max_hop_len, self.model.token_hop_len * self.model.stream_scale_factor
                    )
                time.sleep(self.step_s)
                end = min(tokens, offset + hop)
                a, b = offset * RATE // TOKEN_RATE, end * RATE // TOKEN_RATE if end < tokens else len(audio)
                self.pieces_made += 1
                yield {"tts_speech": audio[a:b].reshape(1, -1).astype(np.float32)}
                offset = end
            llm.join()  # tts() joins its LLM thread before the cleanup
            with m.lock:  # the library's cleanup, reached only when the generator runs to its end
                for d in (m.tts_speech_token_dict, m.llm_end_dict, m.hift_cache_dict):
                    d.pop(this_uuid)
        except GeneratorExit:
            self.closed_early.set()
            raise


def _tone(i: int, seconds: float) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return 0.3 * np.sin(2 * np.pi * (200 + 40 * (i % 8)) * t)


SEEDS: list[int] = []


def seed_all(seed: int) -> None:
    """Double of cosyvoice.utils.common.set_all_random_seed: records what the engine seeded."""
    SEEDS.append(seed)
