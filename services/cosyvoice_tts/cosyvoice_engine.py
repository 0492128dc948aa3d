"""GPU engine of cosyvoice_tts: Fun-CosyVoice3-0.5B on the official CosyVoice code (FunAudioLLM/CosyVoice).

The library is not on PyPI: the GPU image checks it out at the commit pinned in requirements-gpu.txt and this
engine puts ``gpu.repo_dir`` (and its third_party/Matcha-TTS) on sys.path. Everything heavy is imported in
``start()``, never at module import, so the CPU fleet does not need torch.

What the engine uses of the library (read from cosyvoice/cli/cosyvoice.py at the pinned commit):
  * ``AutoModel(model_dir=, load_trt=, load_vllm=, fp16=, trt_concurrent=)`` picks CosyVoice3 from cosyvoice3.yaml;
    ``sample_rate`` is 24000.
  * ``add_zero_shot_spk(prompt_text, prompt_wav, spk_id)`` computes a speaker's features once (speech tokens,
    speech features, speaker embedding) into ``frontend.spk2info``; ``save_spkinfo()`` writes them to
    ``<model_dir>/spk2info.pt``, which the next ``AutoModel`` loads; ``list_available_spks()`` lists them.
  * ``inference_zero_shot(tts_text, '', '', zero_shot_spk_id=spk, stream=True, speed=)`` yields
    ``{'tts_speech': float tensor [1, n]}`` pieces at 24 kHz.
  * CosyVoice3's LM asserts that token 151646 (``<|endofprompt|>``) is in the prompt text, so prompts are
    ``"You are a helpful assistant.<|endofprompt|>" + transcript`` (as in the repo's example.py).

Writable state: the mounted weights may be read-only, but the library writes next to them (spk2info.pt,
TensorRT plans, the vLLM export). So ``AutoModel`` is given an overlay directory in ``gpu.state_dir`` whose
entries are symlinks to the weights, and whatever the library writes lands in the overlay.

Library limits (read from cosyvoice/cli/model.py at the pinned commit; docs/tts.md):
  * the streaming hop (``token_hop_len``) is a model-wide attribute ``CosyVoice2Model.tts`` grows per chunk and
    never resets, and the seed is process-global (``set_all_random_seed``): two overlapping syntheses would change
    each other's chunk plan and randomness. So the engine runs ONE library segment at a time (``_library_lock``,
    released between segments, so concurrent streams take turns per sentence), resets the hop and seeds before each.
  * ``tts()`` has no cancel hook and frees its per-request state (``tts_speech_token_dict``, ``llm_end_dict``,
    ``hift_cache_dict`` under the request's uuid) only after its last chunk; closing its generator early skips
    that, and its LLM thread keeps running. On cancel the engine closes the generator (no further flow/vocoder
    passes), waits for the LLM thread to end (``llm_end_dict[uuid]``), and pops that uuid's entries itself, under
    the library's lock, before the next segment may start.
  * The attributes this relies on are checked once at start (``_check_library_surface``): a library revision
    without them fails with FAILED_PRECONDITION naming the attribute, never a silent skip.
  * ``speed != 1`` works only without streaming.
  * Text normalisation: the frontend builds ``wetext.Normalizer()``, which calls modelscope's ``snapshot_download``
    (network) at every start and, if that fails, silently runs without normalisation. The engine installs
    normalisers built from FSTs in a mounted directory (``gpu.text_normalizer_dir``) instead.
  * ``load_trt`` needs TensorRT, which the image does not carry: refused at start unless ``tensorrt`` imports.

Residency (docs/leases.md): ``offload()`` moves the torch modules of ``CosyVoice3Model`` (``llm``, ``flow``,
``hift``) and the speakers' feature tensors (``frontend.spk2info``) to pinned host memory and empties the CUDA
cache; ``reload()`` moves them back (services/residency/torch_offload.py). Both hold ``_library_lock``, so no segment
runs while the weights move. What stays on the card, honestly:
  * with ``load_vllm``: the LM's vLLM engine. CosyVoice builds it itself inside ``CosyVoice2Model.load_vllm``
    (``LLMEngine.from_engine_args(EngineArgs(..., gpu_memory_utilization=0.2))``, hard-coded, at the pinned commit)
    without ``enable_sleep_mode``, and vLLM's ``sleep()`` frees only memory allocated in sleep mode's pool, so
    there is nothing to put to sleep: its 0.2 of the card stays, and ``resident_bytes()`` keeps counting it.
  * with ``load_trt``: the TensorRT engine of the flow decoder's estimator (a ``TrtContextWrapper``, not a torch
    module).
  * the frontend's speech tokenizer, an onnxruntime session on the CUDA execution provider (onnxruntime has no
    way to move a session off the card short of dropping it), and the CUDA context.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np

from services.common import audio, metrics
from services.common.config.base import ChunkingConfig, SchedulingConfig
from services.common.config.cosyvoice_tts import CosyVoiceGpuConfig
from services.common.engines import AudioPiece, Offloadable, ScheduledTtsEngine, SynthesisOptions, VoiceInfo
from services.common.errors import AlreadyExists, FailedPrecondition, InvalidArgument, VoiceError
from services.common.scheduler import Playback, SegmentScheduler
from services.common.text import FirstSegment, speech_segments
from services.common.voices import unknown_voice

log = logging.getLogger("voicefleet.cosyvoice")

NATIVE_RATE = 24_000
PROMPT_PREFIX = "You are a helpful assistant.<|endofprompt|>"
# Fun-CosyVoice3-0.5B: 9 languages (and Chinese dialects); a cloned voice speaks all of them (cross-lingual).
LANGUAGES = ("zh-CN", "en-US", "ja-JP", "ko-KR", "de-DE", "es-ES", "fr-FR", "it-IT", "ru-RU", "yue-CN")
# Transcript vs prompt audio: speech runs ~2..8 syllables per second; far outside, the transcript is not what
# the audio says (CosyVoice then speaks garbled prompt leftovers).
MIN_SYLLABLES_PER_S, MAX_SYLLABLES_PER_S = 0.8, 10.0
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_VOWEL_GROUPS = re.compile(r"[aeiouyäöüàâéèêëîïôûùáíóúñ]+", re.IGNORECASE)
_SPECIAL = re.compile(r"<\|[^|]*\|>")


def syllables(text: str) -> int:
    """Rough syllable count: one per CJK character, one per vowel group in other words."""
    cjk = len(_CJK.findall(text))
    rest = _CJK.sub(" ", text)
    return cjk + sum(max(1, len(_VOWEL_GROUPS.findall(w))) for w in re.findall(r"[^\W\d_]+", rest))


def detect_language(text: str) -> str:
    if re.search(r"[\u3040-\u30ff]", text):
        return "ja-JP"
    if re.search(r"[\uac00-\ud7af]", text):
        return "ko-KR"
    if _CJK.search(text):
        return "zh-CN"
    return "en-US"


def check_prompt_text(transcript: str, voiced_s: float) -> str:
    """The CosyVoice3 prompt text for ``transcript``, or InvalidArgument naming prompt_transcript."""
    text = transcript.strip()
    if _SPECIAL.search(text):
        raise InvalidArgument(
            "prompt_transcript",
            "must be the plain words spoken in prompt_audio, without <|...|> tokens; the engine adds"
            " CosyVoice3's instruction prefix itself",
        )
    if len(text) > 500:
        raise InvalidArgument("prompt_transcript", f"is {len(text)} characters; a 3..30 s prompt has far fewer")
    n = syllables(text)
    rate = n / max(voiced_s, 1e-3)
    if not MIN_SYLLABLES_PER_S <= rate <= MAX_SYLLABLES_PER_S:
        raise InvalidArgument(
            "prompt_transcript",
            f"has ~{n} syllables for {voiced_s:.1f} s of speech ({rate:.1f}/s; speech is"
            f" {MIN_SYLLABLES_PER_S}..{MAX_SYLLABLES_PER_S}/s): it cannot be the exact words spoken in prompt_audio",
        )
    return PROMPT_PREFIX + text


def voiced_seconds(pcm: bytes, rate: int, dbfs: float = -45.0) -> float:
    x = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
    frame = max(1, rate // 50)
    n = len(x) // frame
    if not n:
        return 0.0
    rms = np.sqrt(np.mean(x[: n * frame].reshape(n, frame) ** 2, axis=1))
    return float(np.sum(rms > 10 ** (dbfs / 20))) * frame / rate


def _default_auto_model() -> Callable:
    from cosyvoice.cli.cosyvoice import AutoModel

    return AutoModel


# Segments in the library at once when scheduling.workers is 0.
DEFAULT_IN_FLIGHT = 1  # see __init__: the library allows one segment at a time


class CosyVoice3Engine(ScheduledTtsEngine, Offloadable):
    name = "cosyvoice3"
    clones_voices = True

    def __init__(
        self,
        service: str,
        gpu: CosyVoiceGpuConfig,
        chunking: ChunkingConfig,
        auto_model: Callable | None = None,
        scheduling: SchedulingConfig | None = None,
        seed_all: Callable[[int], None] | None = None,
        memory_budget_bytes: int = 0,
    ):
        """``auto_model`` / ``seed_all``: the library's ``AutoModel`` and ``set_all_random_seed`` (default: imported
        from ``gpu.repo_dir`` at start). ``memory_budget_bytes``: the lease's bytes, the cap of this process's
        CUDA allocator (docs/leases.md)."""
        self.service = service
        self._seed_all = seed_all
        self.memory_budget_bytes = memory_budget_bytes
        # One library segment at a time: hop and seed are model-wide in the library (module doc).
        self._library_lock = threading.Lock()
        self.gpu = gpu
        self.chunking = chunking
        self.first_segment = chunking.first_segment()  # streaming text cuts its first segment early too
        scheduling = scheduling or SchedulingConfig()
        # ONE segment in the library at a time: CosyVoice's tts() keeps a model-wide hop and a process-wide seed, and
        # the cancel cleanup must know its request's uuid (module doc). The scheduler decides which segment goes next
        # (first segments first, docs/scheduling.md); ``_library_lock`` is the guarantee behind it.
        if scheduling.workers not in (0, 1):
            log.warning(
                "cosyvoice_tts.scheduling.workers=%d: CosyVoice3 runs one segment at a time", scheduling.workers
            )
        self.scheduler = SegmentScheduler(service, self.name, DEFAULT_IN_FLIGHT, margin_s=scheduling.margin_ms / 1000)
        self._auto_model = auto_model
        self._model = None
        self._host = None  # HostOffload over the model's torch modules, made at start
        self._vllm_bytes = 0  # the card share CosyVoice's vLLM engine keeps (load_vllm), resident always
        self._voices: dict[str, dict] = {}
        self._register_lock = asyncio.Lock()
        self._steps = metrics.ENGINE_STEPS.labels(service, self.name)
        self._audio_seconds = metrics.TTS_AUDIO_SECONDS.labels(service, self.name)
        self._cancel_to_stop = metrics.TTS_CANCEL_TO_STOP.labels(service, self.name)
        self.state_dir = Path(gpu.state_dir)
        self.overlay_dir = self.state_dir / "model"
        self.prompts_dir = self.state_dir / "prompts"
        self.registry_path = self.state_dir / "voices.json"

    @property
    def native_sample_rate(self) -> int:
        return NATIVE_RATE

    @property
    def device(self) -> str:
        return self.gpu.device

    # --- start ----------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await asyncio.to_thread(self._start_blocking)
        log.info("CosyVoice3 ready with voices: %s", ", ".join(self._voices) or "none (register one)")

    def _start_blocking(self) -> None:
        t0 = time.monotonic()
        weights = Path(self.gpu.model_dir)
        if not (weights / "cosyvoice3.yaml").exists():
            raise FailedPrecondition(
                f"cosyvoice_tts.gpu.model_dir: {weights} has no cosyvoice3.yaml; mount the Fun-CosyVoice3-0.5B"
                " weights there (scripts download them on a machine with internet)"
            )
        if self.gpu.load_trt:
            try:
                import tensorrt  # noqa: F401
            except ImportError:
                raise FailedPrecondition(
                    "cosyvoice_tts.gpu.load_trt: TensorRT is not installed in this image; set load_trt: false, or"
                    " add tensorrt-cu12==10.13.3.9 (CosyVoice's own pin) to the image (docs/tts.md)"
                ) from None
        if self.gpu.device.startswith("cuda"):
            import torch

            from services.residency.gpu_host import cap_torch_process, device_total_bytes

            budget = self.memory_budget_bytes
            if self.gpu.load_vllm and (torch.device(self.gpu.device).index or 0) != 0:
                # vLLM's engine core is a process of its own that takes the first visible card, whatever this one's
                # current device is.
                raise FailedPrecondition(
                    f"cosyvoice_tts.gpu.device: {self.gpu.device} with load_vllm: vLLM's engine process uses the first"
                    " visible card; set CUDA_VISIBLE_DEVICES to that card and gpu.device: cuda"
                )
            if self.gpu.load_vllm:
                # CosyVoice's load_vllm gives vLLM gpu_memory_utilization=0.2 of the card (hard-coded at the pinned
                # commit), in vLLM's own engine process; this process keeps the rest of the lease.
                vllm_bytes = int(0.2 * device_total_bytes(torch.device(self.gpu.device).index or 0))
                if budget - vllm_bytes < 2 << 30:
                    raise FailedPrecondition(
                        f"cosyvoice_tts.gpu.load_vllm: vLLM takes 0.2 of the card ({vllm_bytes / 2**30:.1f} GiB) and"
                        " flow + HiFT need ~2 GiB more; raise residency.services.cosyvoice_tts.declared_gb to"
                        f" >= {(vllm_bytes + (2 << 30)) / 2**30:.1f} (docs/leases.md)"
                    )
                budget -= vllm_bytes
                self._vllm_bytes = vllm_bytes
            cap_torch_process(torch, "cosyvoice_tts", self.gpu.device, budget)
        self._prepare_overlay(weights)
        auto_model = self._auto_model or self._import_library()
        self._model = auto_model(
            model_dir=str(self.overlay_dir),
            load_trt=self.gpu.load_trt,
            load_vllm=self.gpu.load_vllm,
            fp16=self.gpu.fp16,
            trt_concurrent=self.gpu.trt_concurrent,
        )
        if self._model.sample_rate != NATIVE_RATE:
            raise FailedPrecondition(
                f"cosyvoice_tts.gpu.model_dir: the model speaks at {self._model.sample_rate} Hz, not 24000;"
                " is it Fun-CosyVoice3?"
            )
        self._check_library_surface()
        self._track_weights()
        self._install_text_normalizers()
        self._load_registry()
        self._ensure_preset()
        log.info("CosyVoice3 loaded in %.1fs", time.monotonic() - t0)
        if self._voices:  # warm up: one short segment through LM, flow and vocoder
            voice = next(iter(self._voices))
            for _ in self._model.inference_zero_shot("Hello.", "", "", zero_shot_spk_id=voice, stream=False):
                pass

    def _import_library(self) -> Callable:
        repo = Path(self.gpu.repo_dir)
        for path in (repo, repo / "third_party" / "Matcha-TTS"):
            if path.is_dir() and str(path) not in sys.path:
                sys.path.insert(0, str(path))
        try:
            auto_model = _default_auto_model()
            from cosyvoice.utils.common import set_all_random_seed

            self._seed_all = self._seed_all or set_all_random_seed
        except ImportError as e:
            raise FailedPrecondition(
                f"cosyvoice_tts.gpu.repo_dir: cannot import CosyVoice from {repo} ({e}); install the GPU image"
                " (services/cosyvoice_tts/requirements-gpu.txt)"
            ) from None
        if self.gpu.load_vllm:
            # The LM runs as a vLLM model, registered by our vLLM plugin in every process vLLM starts (its engine
            # core is a spawned child: a registration made here only would not be there). The plugin finds the
            # checkout through the environment, which children inherit.
            from services.cosyvoice_tts import vllm_plugin

            os.environ[vllm_plugin.REPO_ENV] = str(repo)
            try:
                from vllm.plugins import load_general_plugins

                load_general_plugins()  # what vLLM does in each of its processes
                from vllm import ModelRegistry
            except ImportError as e:
                raise FailedPrecondition(f"cosyvoice_tts.gpu.load_vllm: vLLM does not import ({e})") from None
            if vllm_plugin.ARCH not in ModelRegistry.get_supported_archs():
                raise FailedPrecondition(
                    "cosyvoice_tts.gpu.load_vllm: vLLM did not load the voicefleet plugin (the vllm.general_plugins"
                    " entry point of pyproject.toml): install the code with `pip install --no-deps -e .`, and leave"
                    " VLLM_PLUGINS unset or include voicefleet_cosyvoice3 in it"
                )
        return auto_model

    # What the engine uses of CosyVoice2Model's internals (cosyvoice/cli/model.py at the pinned commit).
    MODEL_ATTRIBUTES = ("token_hop_len", "token_max_hop_len", "stream_scale_factor", "lock")
    MODEL_REQUEST_DICTS = ("tts_speech_token_dict", "llm_end_dict", "hift_cache_dict")

    def _check_library_surface(self) -> None:
        model = getattr(self._model, "model", None)
        missing = [a for a in self.MODEL_ATTRIBUTES + self.MODEL_REQUEST_DICTS if not hasattr(model, a)]
        if not hasattr(self._model, "frontend"):
            missing.append("frontend (on AutoModel's result)")
        if self._seed_all is None:
            missing.append("cosyvoice.utils.common.set_all_random_seed")
        if missing:
            raise FailedPrecondition(
                f"cosyvoice_tts.gpu.repo_dir: this CosyVoice revision lacks {', '.join(missing)} on its model; the"
                " engine is written against FunAudioLLM/CosyVoice @ ace7c47 (services/cosyvoice_tts/requirements-gpu.txt)"
            )

    # --- residency ------------------------------------------------------------------------------------------------
    def _track_weights(self) -> None:
        try:
            import torch  # noqa: F401
        except ImportError:  # a library without torch (the unit tests' fake): no weights to move
            return
        from services.residency.torch_offload import HostOffload, collect_modules

        self._host = HostOffload(collect_modules(self._model.model), self._speaker_maps)

    def _speaker_maps(self) -> list:
        """The speakers' features (small; the frontend hands them to ``tts()``, which moves them to its device)."""
        spk2info = getattr(self._model.frontend, "spk2info", {})
        return [v for v in spk2info.values() if isinstance(v, dict)]

    @property
    def offload_limit(self) -> str | None:
        """Why an offload cannot free this engine's card share, or None. With load_vllm, vLLM's 0.2 of the card stays:
        releasing the lease would let the router grant bytes that are still taken, so the engine must be pinned."""
        if self.gpu.load_vllm:
            return "with load_vllm, CosyVoice's vLLM engine keeps 0.2 of the card and cannot be put to sleep"
        return None

    def resident_bytes(self) -> int:
        """Measured: the torch modules' bytes on the card (CUDA allocator reserved; tensors' bytes on CPU), 0 of them
        while offloaded, plus the vLLM engine's share with load_vllm, which stays (module doc)."""
        if self._host is None:
            return 0
        return self._host.resident_bytes() + self._vllm_bytes

    def _move(self, direction: str):
        with self._library_lock:  # no segment in the library while its weights move
            return self._host.offload() if direction == "out" else self._host.reload()

    async def offload(self) -> None:
        """The residency's revoke: the torch weights to pinned host memory (what stays: module doc)."""
        if self._host is None:
            return
        moved = await asyncio.to_thread(self._move, "out")
        log.info("CosyVoice3 offloaded: %s", moved.line())

    async def reload(self) -> None:
        if self._host is None:
            raise FailedPrecondition("cosyvoice3: reload before the model was ever loaded (start() loads it)")
        moved = await asyncio.to_thread(self._move, "in")
        log.info("CosyVoice3 reloaded: %s", moved.line())

    def _install_text_normalizers(self) -> None:
        """wetext normalisers from mounted FSTs (the library's own would download them at every start)."""
        frontend = self._model.frontend
        if getattr(frontend, "text_frontend", "") == "ttsfrd":  # the library found ttsfrd: it needs no FSTs
            return
        directory = self.gpu.text_normalizer_dir
        if not directory:
            log.warning("cosyvoice_tts.gpu.text_normalizer_dir is empty: no text normalisation (digits, dates)")
            return
        fsts = {lang: Path(directory) / lang / "tn" for lang in ("zh", "en")}
        need = [f / name for f in fsts.values() for name in ("tagger.fst", "verbalizer.fst")]
        if not all(p.is_file() for p in need):
            raise FailedPrecondition(
                f"cosyvoice_tts.gpu.text_normalizer_dir: {directory} lacks {next(p for p in need if not p.is_file())};"
                " mount the wetext FSTs there (modelscope pengzhendong/wetext, fetched with the weights), or set it"
                " to '' to run without text normalisation"
            )
        from wetext import Normalizer

        frontend.zh_tn_model = Normalizer(str(fsts["zh"] / "tagger.fst"), str(fsts["zh"] / "verbalizer.fst"), "zh")
        frontend.en_tn_model = Normalizer(str(fsts["en"] / "tagger.fst"), str(fsts["en"] / "verbalizer.fst"), "en")
        frontend.text_frontend = "wetext"

    def _prepare_overlay(self, weights: Path) -> None:
        """state_dir/model: a symlink per weights entry; spk2info.pt (and what the library exports) real files."""
        self.overlay_dir.mkdir(parents=True, exist_ok=True)
        self.prompts_dir.mkdir(parents=True, exist_ok=True)
        for entry in weights.iterdir():
            link = self.overlay_dir / entry.name
            if entry.name == "spk2info.pt":
                if not link.exists():  # speakers shipped with the weights: start from them, then keep ours
                    link.write_bytes(entry.read_bytes())
                continue
            if link.is_symlink() and os.readlink(link) != str(entry):
                link.unlink()
            if not link.exists() and not link.is_symlink():
                link.symlink_to(entry)

    # --- voices ---------------------------------------------------------------------------------------------------
    def _load_registry(self) -> None:
        self._voices = json.loads(self.registry_path.read_text()) if self.registry_path.exists() else {}
        known = set(self._model.list_available_spks())
        for voice_id, meta in list(self._voices.items()):
            if voice_id in known:
                continue
            # Features lost (spk2info.pt deleted) but the prompt is kept: compute them again, once.
            wav = self.prompts_dir / f"{voice_id}.wav"
            if wav.exists():
                log.warning("speaker %s missing from spk2info.pt; re-registering from %s", voice_id, wav)
                self._model.add_zero_shot_spk(meta["prompt_text"], str(wav), voice_id)
                self._model.save_spkinfo()
            else:
                log.warning("speaker %s has neither features nor prompt; dropped", voice_id)
                del self._voices[voice_id]
                self._save_registry()

    def _ensure_preset(self) -> None:
        g = self.gpu
        if not g.preset_voice_id or g.preset_voice_id in self._voices:
            return
        wav = Path(g.repo_dir) / g.preset_prompt_wav
        if not wav.exists():
            log.info("no preset prompt at %s; only registered voices will be listed", wav)
            return
        pcm, rate = audio.read_wav(str(wav))
        self._add_speaker(g.preset_voice_id, pcm, rate, PROMPT_PREFIX + g.preset_prompt_text, g.preset_language, True)

    def _add_speaker(self, voice_id: str, pcm: bytes, rate: int, prompt_text: str, language: str, preset: bool):
        """Features computed once by the library and persisted (spk2info.pt + voices.json + the prompt WAV)."""
        wav = self.prompts_dir / f"{voice_id}.wav"
        # The library reads the prompt at 16 kHz and 24 kHz and refuses files below 16 kHz: store it at 24 kHz.
        audio.write_wav(wav, audio.resample(pcm, rate, NATIVE_RATE), NATIVE_RATE)
        self._model.add_zero_shot_spk(prompt_text, str(wav), voice_id)
        self._model.save_spkinfo()
        self._voices[voice_id] = {
            "prompt_text": prompt_text,
            "language": language,
            "preset": preset,
            "registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self._save_registry()

    def _save_registry(self) -> None:
        tmp = self.registry_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._voices, ensure_ascii=False, indent=1))
        tmp.replace(self.registry_path)

    def _info(self, voice_id: str, meta: dict) -> VoiceInfo:
        first = meta["language"]
        transcript = meta["prompt_text"].removeprefix(PROMPT_PREFIX)
        return VoiceInfo(
            id=voice_id,
            display_name=voice_id,
            languages=(first, *(lang for lang in LANGUAGES if lang != first)),
            native_sample_rate_hz=NATIVE_RATE,
            service=self.service,
            engine=self.name,
            cloned=not meta.get("preset", False),
            description=f"CosyVoice3 zero-shot voice; prompt: {transcript[:60]!r}",
        )

    async def voices(self) -> list[VoiceInfo]:
        if self._model is None:
            raise FailedPrecondition("cosyvoice3 engine is still loading; retry when the service reports SERVING")
        return [self._info(k, v) for k, v in self._voices.items()]

    async def register_voice(
        self, voice_id: str, prompt_pcm: bytes, prompt_rate: int, transcript: str, language: str
    ) -> VoiceInfo:
        prompt_text = check_prompt_text(transcript, voiced_seconds(prompt_pcm, prompt_rate))
        language = language or detect_language(transcript)
        async with self._register_lock:
            if voice_id in self._voices or voice_id in self._model.list_available_spks():
                raise AlreadyExists(f"voice_id: {voice_id!r} is already a voice of {self.served_by}; pick another id")
            await asyncio.to_thread(self._add_speaker, voice_id, prompt_pcm, prompt_rate, prompt_text, language, False)
        return self._info(voice_id, self._voices[voice_id])

    # --- synthesis ------------------------------------------------------------------------------------------------

    async def _speak(
        self, text: str, options: SynthesisOptions, playback: Playback, first_segment: FirstSegment | None
    ) -> AsyncIterator[AudioPiece]:
        if options.voice not in self._voices:
            raise unknown_voice(options.voice, self._voices, self.served_by, service=self.service)
        out_rate = NATIVE_RATE
        resample_on_gpu = self.gpu.device.startswith("cuda") and 0 < options.sample_rate_hz < NATIVE_RATE
        if resample_on_gpu:
            out_rate = options.sample_rate_hz
        segments = speech_segments(text, first_segment)
        for start, end in segments:
            resampler = GpuStreamResampler(NATIVE_RATE, out_rate, self.gpu.device) if resample_on_gpu else None
            async with playback.turn():  # a slot in the library, when this segment is due
                async for pcm in self._segment_pcm(text[start:end], options, resampler):
                    playback.produced(len(pcm) / 2 / out_rate)
                    yield AudioPiece(
                        pcm=pcm, sample_rate_hz=out_rate, text_start=start, text_end=end, served_by=self.served_by
                    )

    async def _segment_pcm(self, segment: str, options: SynthesisOptions, resampler) -> AsyncIterator[bytes]:
        """One segment through the library in a thread of its own, pulled piece by piece.

        The thread pushes each library piece into a queue; when our caller stops (cancel), it sets ``stop`` and
        the thread closes the library generator before the next flow/vocoder pass.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        stop = threading.Event()
        done = object()
        stream = options.speaking_rate == 1.0  # the library changes speed only in non-streaming mode

        def put(item) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            with self._library_lock:  # one library segment at a time (module doc)
                try:
                    self._run_segment(segment, options, stream, resampler, stop, put)
                except BaseException as e:  # noqa: BLE001 - handed to the async side
                    put(e)
                finally:
                    put(done)

        worker = threading.Thread(target=work, name="cosyvoice3", daemon=True)
        worker.start()
        try:
            while True:
                item = await queue.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    if isinstance(item, VoiceError):
                        raise item
                    raise VoiceError(f"CosyVoice3 failed on {segment[:40]!r}: {type(item).__name__}: {item}") from item
                if item:
                    self._audio_seconds.inc(len(item) / 2 / (resampler.dst if resampler else NATIVE_RATE))
                    yield item
        finally:
            if worker.is_alive():
                stop.set()
                cancelled_at = time.monotonic()
                threading.Thread(
                    target=lambda: (worker.join(), self._cancel_to_stop.observe(time.monotonic() - cancelled_at)),
                    daemon=True,
                ).start()

    def _run_segment(self, segment: str, options: SynthesisOptions, stream: bool, resampler, stop, put) -> None:
        """One segment through the library (caller holds ``_library_lock``); on ``stop``, the library's cleanup."""
        model = self._model.model
        self._seed_all(options.seed or self.gpu.default_seed)
        # The library grows this model-wide hop per chunk and never resets it: reset per segment.
        model.token_hop_len = self.gpu.first_hop_tokens
        model.token_max_hop_len = self.gpu.max_hop_tokens
        model.stream_scale_factor = self.gpu.hop_growth
        before = set(model.tts_speech_token_dict)
        pieces = self._model.inference_zero_shot(
            segment, "", "", zero_shot_spk_id=options.voice, stream=stream, speed=options.speaking_rate
        )
        try:
            for out in pieces:
                if stop.is_set():
                    break
                pcm = self._to_pcm(out["tts_speech"], resampler, last=False)
                self._steps.inc()
                put(pcm)
            if resampler is not None and not stop.is_set():
                put(self._to_pcm(None, resampler, last=True))
        finally:
            pieces.close()
            self._finish_abandoned(model, before)

    def _finish_abandoned(self, model, before: set) -> None:
        """The cleanup ``tts()`` skips when closed early: wait for its LLM thread, drop its per-request state.
        A request that ran to its end has already removed its uuid, so this finds nothing then."""
        with model.lock:
            abandoned = [u for u in model.tts_speech_token_dict if u not in before]
        for uuid in abandoned:
            while not model.llm_end_dict.get(uuid, True):  # the LLM thread sets it when it ends (bounded by the
                time.sleep(0.01)  # segment's max tokens); only then may its dict entries go
            with model.lock:
                for name in self.MODEL_REQUEST_DICTS:
                    getattr(model, name).pop(uuid, None)

    @staticmethod
    def _to_pcm(speech, resampler, last: bool) -> bytes:
        if resampler is not None:
            speech = resampler.feed(speech, last=last)
        if speech is None:
            return b""
        if hasattr(speech, "detach"):  # a torch tensor (CPU or GPU)
            speech = speech.detach().float().cpu().numpy()
        x = np.asarray(speech, dtype=np.float32).reshape(-1)
        if not np.all(np.isfinite(x)):
            raise VoiceError("CosyVoice3 produced non-finite audio")
        return audio.to_int16(x).tobytes()


class GpuStreamResampler:
    """Band-limited resampling of a stream on the GPU (torchaudio's sinc resampler), seamless across chunks.

    torchaudio resamples a whole tensor; applied chunk by chunk it would click at every seam. Here input is kept
    until ``width`` samples of look-ahead exist and each call resamples whole blocks (gcd-reduced ``orig`` input
    samples -> ``new`` output samples) with ``width`` samples of real context on both sides, so the output equals
    resampling the whole stream at once (tests/cosyvoice_tts/test_tts_cosyvoice.py checks this in ``make test-gpu``).
    """

    LOWPASS_FILTER_WIDTH, ROLLOFF = 6, 0.99  # torchaudio's defaults

    def __init__(self, src: int, dst: int, device: str):
        import torch

        self.torch = torch
        self.src, self.dst, self.device = src, dst, device
        g = math.gcd(src, dst)
        self.orig, self.new = src // g, dst // g
        # Half-width of torchaudio's kernel in input samples (torchaudio.functional._get_sinc_resample_kernel).
        base = min(self.orig, self.new) * self.ROLLOFF
        width = math.ceil(self.LOWPASS_FILTER_WIDTH * self.orig / base)
        self.context_blocks = math.ceil(width / self.orig) + 1
        self.lookahead = self.context_blocks * self.orig
        self.buffer = torch.zeros(0, device=device)
        self.buffer_block = 0  # block index of buffer[0]
        self.emitted_block = 0  # first block not emitted yet
        self.total_in = 0

    def feed(self, speech, last: bool = False):
        torch = self.torch
        import torchaudio.functional as F

        if speech is not None:
            x = torch.as_tensor(speech).reshape(-1).float().to(self.device)
            self.buffer = torch.cat([self.buffer, x])
            self.total_in += x.numel()
        available_end = self.buffer_block * self.orig + self.buffer.numel()
        end_block = math.ceil(available_end / self.orig) if last else (available_end - self.lookahead) // self.orig
        if end_block <= self.emitted_block:
            return torch.zeros(0, device=self.device) if not last else None
        first_block = max(self.buffer_block, self.emitted_block - self.context_blocks)
        lo = (first_block - self.buffer_block) * self.orig
        hi = min(self.buffer.numel(), (end_block - self.buffer_block) * self.orig + self.lookahead)
        y = F.resample(self.buffer[lo:hi], self.orig, self.new)
        skip = (self.emitted_block - first_block) * self.new
        count = (end_block - self.emitted_block) * self.new
        if last:
            count = math.ceil(self.total_in * self.new / self.orig) - self.emitted_block * self.new
        out = y[skip : skip + count]
        self.emitted_block = end_block
        keep_from = max(self.buffer_block, self.emitted_block - self.context_blocks)
        self.buffer = self.buffer[(keep_from - self.buffer_block) * self.orig :]
        self.buffer_block = keep_from
        return out
