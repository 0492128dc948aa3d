"""`make gpu-smoke`: first contact with a CUDA card, needing nothing else (no mounted weights, no hub).

Each step runs in a process of its own (a crash or an OOM in one does not take the others down), with the Python
that has its libraries: the fleet's venv for CTranslate2, a GPU stack's venv (build/gpu-stacks/venvs/*, from
`make check-gpu-stacks`) for torch and vLLM. Without a card, or without a step's libraries, the step is skipped and
the report says why. The report: bench/results/gpu/<card>/smoke.json and smoke.md.

Steps (issue 25):
  asr          the asr service with its GPU engine (faster-whisper / CTranslate2) on CUDA and the weights the wheels
               ship (whisper tiny.en and base), started with a router (its lease authority) as `voicefleet up` does;
               the evaluation sentences (piper joe) streamed over gRPC: WER, RTF, SPEECH_END -> final; then
               ModelControl Offload and Load with the card's used memory (NVML) before, loaded, offloaded, reloaded.
  torch_offload  services/residency/torch_offload.py with 1, 4 and 8 GiB of real tensors: offload and reload
               seconds against bytes / measured pinned H2D bandwidth (goal <= 1.5x), page-locked host bytes,
               memory_reserved after offload.
  vllm_cosyvoice  (cosyvoice_tts venv) vLLM 0.11 with load_format="dummy" on a tiny CosyVoice2ForCausalLM config
               written here, the class registered by the voicefleet_cosyvoice3 plugin in vLLM's engine core process,
               tokens streamed by CosyVoice's own Qwen2LM.inference_wrapper: time to first token, tokens/s.
  tiny_qwen_tts, tiny_cosyvoice3  (qwen_tts / cosyvoice_tts venvs) tiny random models of each library's own classes
               (scripts/gpu_stack_probe.py builds them) on CUDA through the engines' offload/reload: generate (CosyVoice
               streamed), offload, reload, the same seed gives the same samples.
  vllm_omni    not run: what the sidecar needs without the hub is written in the skip (VLLM_OMNI_NEEDS).
  gpu_checks   (any Python with torch) the GPU-only checks no test on CPU can make (issue 46): GpuStreamResampler
               against whole-signal resampling, check_cuda_host against the real driver, the per-process memory cap
               (a child capped at 4 GiB holds 3 GiB and is refused 6 GiB), NVML's per-process bytes of that child,
               card_capacity_bytes from NVML.
  whisper_cuda  CTranslate2 on CUDA (float16) with whisper tiny.en: the golden WAVs decoded on the CPU (int8) and on
               the card, the first decode timed apart (it JIT-compiles CTranslate2's kernels on a card newer than the
               wheel's SASS), transcripts within the strict listener's bound of the CPU's.

`python -m bench.gpu_smoke` runs all (`--steps a,b` some); `python -m bench.gpu_smoke --step NAME` runs one step here
and prints its JSON. Every report records the commit it ran (``commit()``: git, else the COMMIT file a carry wrote).
Inputs a card without the CPU fleet's wheels can be given (scripts/asr_card.py sets them): GPU_SMOKE_ASR_SPEECH, the
asr step's speech as an .npz written on a CPU (piper is not on the card); GPU_SMOKE_ASR_MODELS, ``name=dir,...``
in place of the wheels' tiny.en and base; GPU_SMOKE_WHISPER_DIR, the whisper_cuda step's model.
GPU_SMOKE_ASR_DEVICE=cpu runs the asr step's code on CPU (a check of the code itself, not a GPU result: the report
then goes to bench/results/gpu/cpu-check/).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "gpu"
GIB = 1 << 30


# --- the card, from NVML (the driver's library; no CUDA context, no package) ---------------------------------------
def _nvml():
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    return nvml if nvml.nvmlInit_v2() == 0 else None


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def card() -> dict | None:
    """Name and memory of card 0, or None (no driver, no card)."""
    nvml = _nvml()
    if nvml is None:
        return None
    handle, name, memory = ctypes.c_void_p(), ctypes.create_string_buffer(96), _Memory()
    if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)):
        return None
    nvml.nvmlDeviceGetName(handle, name, 96)
    nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory))
    return {"name": name.value.decode(), "total_bytes": memory.total}


def used_bytes() -> int | None:
    """The card's used memory now (all processes), from NVML."""
    nvml = _nvml()
    if nvml is None:
        return None
    handle, memory = ctypes.c_void_p(), _Memory()
    if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) or nvml.nvmlDeviceGetMemoryInfo(
        handle, ctypes.byref(memory)
    ):
        return None
    return int(memory.used)


def commit() -> str:
    """The commit this tree is: ``git rev-parse HEAD`` (``+changes`` when tracked files differ from it), else the
    COMMIT file a carry built on a CPU wrote (a card gets a copy of the tree without .git; scripts/asr_card.py)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            changed = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
            return head.stdout.strip() + (" +changes" if changed else "")
    except (OSError, subprocess.SubprocessError):
        pass
    for written in (os.environ.get("VOICEFLEET_COMMIT_FILE"), ROOT / ".card" / "COMMIT"):
        if written and Path(written).is_file():
            return Path(written).read_text().strip() + " (from the carry's COMMIT: no .git here)"
    return "unknown: no .git here and no .card/COMMIT"


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


# --- steps (each runs in its own process and prints one JSON object) --------------------------------------------------
class Skip(Exception):
    pass


def step_asr() -> dict:
    """The asr service (GPU engine) over gRPC on loopback, with the wheels' whisper models, behind a router that
    grants its lease."""
    device = os.environ.get("GPU_SMOKE_ASR_DEVICE", "cuda")
    try:
        from services.engines.asr.gpu_engine import preload_cuda_libraries

        preload_cuda_libraries()
        import ctranslate2
    except ImportError as e:
        raise Skip(f"no stack: faster-whisper/ctranslate2 not importable ({e}): make install") from None
    if device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise Skip(
            "no card: CTranslate2 sees no CUDA device (no driver, or no libcublas.so.12: services/asr/requirements-gpu.txt)"
        )
    texts, stream = asr_speech()
    out = {"device": device, "audio_s": round(stream.seconds, 2), "sentences": len(texts), "models": {}}
    for name, model_dir in asr_models():
        out["models"][name] = asr_over_grpc(device, str(model_dir), texts, stream)
    return out


def asr_speech():
    """(texts, padded stream) of the asr step: the first six evaluation sentences said by piper's joe, or, where
    GPU_SMOKE_ASR_SPEECH names one, the same stream read from an .npz written on a CPU (``save_asr_speech``)."""
    from bench import evaluation as ev

    saved = os.environ.get("GPU_SMOKE_ASR_SPEECH")
    if saved:
        import numpy as np

        data = np.load(saved)
        texts = [str(t) for t in data["texts"]]
        utterances = tuple(
            ev.Utterance(t, float(a), float(b)) for t, (a, b) in zip(texts, data["bounds_ms"], strict=True)
        )
        return texts, ev.PaddedStream(data["pcm"].tobytes(), int(data["rate"]), utterances)
    speakers = ev.Speakers()
    texts = list(ev.SENTENCES[:6])

    async def say():
        await speakers.start()
        try:
            return [(t, *(await speakers.say("joe", t))) for t in texts]
        finally:
            await speakers.close()

    return texts, ev.padded_stream(asyncio.run(say()), 16000)


def save_asr_speech(path: Path) -> Path:
    """The asr step's speech (piper, here on a CPU) into ``path`` (.npz) for a card that has no piper."""
    import numpy as np

    texts, stream = asr_speech()
    np.savez_compressed(
        path,
        texts=np.array(texts),
        pcm=np.frombuffer(stream.pcm, dtype=np.int16),
        rate=stream.rate,
        bounds_ms=np.array([(u.start_ms, u.end_ms) for u in stream.utterances]),
    )
    return path


def asr_models() -> list[tuple[str, Path]]:
    """(name, directory) of the models the asr step serves: GPU_SMOKE_ASR_MODELS (``name=dir,...``), else the
    wheels' tiny.en and base."""
    named = os.environ.get("GPU_SMOKE_ASR_MODELS")
    if named:
        return [(n, Path(d)) for n, _, d in (item.partition("=") for item in named.split(",") if item)]
    from services.engines.asr.models import base_model_dir, tiny_en_dir

    return [("tiny.en", tiny_en_dir()), ("base", base_model_dir())]


def asr_config(device: str, model_dir: str) -> dict:
    """The asr section of the smoke's fleet config: the GPU engine on ``device`` with ``model_dir``."""
    compute = "float16" if device.startswith("cuda") else "int8"
    return {
        "engine": "gpu",
        "gpu": {"model_dir": model_dir, "device": device, "compute_type": compute, "num_workers": 1},
    }


def asr_over_grpc(device: str, model_dir: str, texts: list[str], stream) -> dict:
    """asr + router (the lease authority of one card) as `voicefleet up` starts them; the fixtures streamed over
    gRPC as fast as the service takes them (RTF is compute, not real time); then ModelControl Offload and Load,
    with NVML's used memory read before the fleet starts, loaded, offloaded and reloaded."""
    import tempfile

    import grpc

    from bench import evaluation as ev
    from services.cli.fleet import LocalFleet
    from voice.v1 import gpu_pb2, gpu_pb2_grpc, recognizer_pb2, recognizer_pb2_grpc

    before_start = used_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(Path(tmp), services=("asr", "router"), asr=asr_config(device, model_dir))
        try:
            with grpc.insecure_channel(fleet.config.asr.address) as channel:
                control = gpu_pb2_grpc.ModelControlStub(channel)
                started = control.GetModelStatus(gpu_pb2.GetModelStatusRequest(), timeout=30).status
                started_used = used_bytes()
                finals, end_to_final, vad_ends = [], [], []
                ended_at = None
                t0 = time.monotonic()
                requests = ev.requests(stream.pcm, stream.rate, ev.config(stream.rate, interim=True))
                recognizer = recognizer_pb2_grpc.RecognizerStub(channel)
                for reply in recognizer.StreamingRecognize(requests, timeout=600):
                    now = time.monotonic()
                    if reply.WhichOneof("event") == "vad":
                        if reply.vad.kind == recognizer_pb2.VadEvent.KIND_SPEECH_END:
                            ended_at = now
                            vad_ends.append(now)
                        continue
                    if reply.result.is_final:
                        finals.append(reply.result.transcript)
                        if ended_at is not None:
                            end_to_final.append(round(now - ended_at, 3))
                            ended_at = None
                wall = time.monotonic() - t0
                status = control.GetModelStatus(gpu_pb2.GetModelStatusRequest(), timeout=30).status
                loaded = used_bytes()
                t1 = time.monotonic()
                offloaded = control.Offload(gpu_pb2.OffloadRequest(reason="gpu smoke"), timeout=120).status
                offload_s = time.monotonic() - t1
                between = used_bytes()
                t1 = time.monotonic()
                reloaded = None
                for progress in control.Load(gpu_pb2.LoadRequest(), timeout=300):
                    reloaded = progress.status
                reload_s = time.monotonic() - t1
                after = used_bytes()
        finally:
            fleet.stop()
    residency = gpu_pb2.Residency.Name
    return {
        "wer": round(ev.wer(texts, finals), 3) if finals else None,
        "finals": finals,
        "speech_ends": len(vad_ends),
        "rtf": round(wall / stream.seconds, 3),
        "speech_end_to_final_s": end_to_final,
        "offload_s": round(offload_s, 3),
        "reload_s": round(reload_s, 3),
        "model_status": {
            "device": status.device,
            "started": [residency(started.residency), started.resident_bytes],
            "loaded": [residency(status.residency), status.resident_bytes],
            "offloaded": [residency(offloaded.residency), offloaded.resident_bytes],
            "reloaded": [residency(reloaded.residency), reloaded.resident_bytes] if reloaded else None,
        },
        "nvml_used_bytes": {
            "before_start": before_start,
            "started": started_used,
            "loaded": loaded,
            "offloaded": between,
            "reloaded": after,
        },
    }


def step_torch_offload() -> dict:
    """HostOffload over 1, 4 and 8 GiB of real tensors on the card."""
    try:
        import torch
    except ImportError:
        raise Skip("no stack: torch is not in this Python (the runner gives this step a GPU stack's venv)") from None
    if not torch.cuda.is_available():
        raise Skip(f"no card: torch {torch.__version__} sees no CUDA device")
    from services.residency.torch_offload import HostOffload, host_to_device_bytes_per_s

    out = {"torch": torch.__version__, "h2d_bytes_per_s": host_to_device_bytes_per_s("cuda:0"), "sizes": {}}
    for gib in (1, 4, 8):
        free, _ = torch.cuda.mem_get_info()
        if free < (gib + 1) * GIB:
            out["sizes"][f"{gib}GiB"] = {"skipped": f"{free / GIB:.1f} GiB free on the card"}
            continue
        # 128 MiB fp16 linear layers (8192 x 8192 x 2 bytes), as a model's: many tensors, so per-tensor pinning
        # would have shown
        layers = [torch.nn.Linear(8192, 8192, bias=True, dtype=torch.float16, device="cuda") for _ in range(gib * 8)]
        model = torch.nn.Sequential(*layers)
        probe = torch.randn(2, 8192, dtype=torch.float16, device="cuda")
        with torch.no_grad():
            expected = model(probe)
        host = HostOffload([model])
        moved_out = host.offload()
        pinned = host.pinned_bytes
        moved_in = host.reload()
        with torch.no_grad():
            same = bool(torch.equal(expected, model(probe)))
        out["sizes"][f"{gib}GiB"] = {
            "bytes": moved_out.bytes,
            "offload_s": round(moved_out.seconds, 3),
            "offload_phases_s": moved_out.phases,
            "reload_s": round(moved_in.seconds, 3),
            "reload_phases_s": moved_in.phases,
            "reload_copy_over_bound": round(moved_in.phases["copy"] / moved_in.copy_bound_s, 2)
            if moved_in.copy_bound_s and "copy" in moved_in.phases
            else None,
            "copy_bound_s": round(moved_in.copy_bound_s or 0, 3),
            "reload_over_bound": round(moved_in.seconds / moved_in.copy_bound_s, 2) if moved_in.copy_bound_s else None,
            "offload_over_bound": round(moved_out.seconds / moved_in.copy_bound_s, 2)
            if moved_in.copy_bound_s
            else None,
            "pinned_bytes_offloaded": pinned,
            "pinned_bytes_after_reload": host.pinned_bytes,
            "memory_reserved_after_offload": moved_out.left_on_card,
            "same_output_after_reload": same,
        }
        del model, layers, host, expected, probe
        torch.cuda.empty_cache()
    return out


# --- vLLM with dummy weights: CosyVoice3's LM class through the engine's plugin --------------------------------
# A Qwen2 decoder small enough to start in seconds, shaped as CosyVoice's export writes it (export_cosyvoice2_vllm:
# the speech embedding as input embeddings, the LM decoder with its bias as lm_head, tie_word_embeddings false).
# head_dim 64: a size every vLLM attention backend takes.
TINY_LM = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
           "num_key_value_heads": 1}  # fmt: skip
SPEECH_TOKENS = 6561  # CosyVoice3's speech_token_size; its LM's vocabulary is that + 200 (stop tokens among them)


def cosyvoice_lm_config(speech_tokens: int = SPEECH_TOKENS, **sizes) -> dict:
    """config.json of a tiny CosyVoice2ForCausalLM (a Qwen2 config whose architecture is the plugin's class)."""
    from services.cosyvoice_tts.vllm_plugin import ARCH

    return {
        "architectures": [ARCH],
        "model_type": "qwen2",
        **TINY_LM,
        **sizes,
        "vocab_size": speech_tokens + 200,
        "max_position_embeddings": 4096,
        "max_window_layers": TINY_LM["num_hidden_layers"],
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "torch_dtype": "bfloat16",
        "use_bias": True,
    }


def write_vllm_model_dir(directory: Path, **sizes) -> Path:
    """A model directory vLLM starts from with ``load_format="dummy"``: config.json only. No tokenizer: CosyVoice
    builds its engine with ``skip_tokenizer_init=True`` and prompts with embeddings, so vLLM reads none."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cosyvoice_lm_config(**sizes), indent=1))
    return directory


def vllm_memory_fraction(total_bytes: int, want_bytes: int = 4 * GIB, cap: float = 0.2) -> float:
    """gpu_memory_utilization for the smoke's engine: ``want_bytes`` of the card (room for a tiny model, CUDA
    graphs and a KV cache), never above CosyVoice's own 0.2 (CosyVoice2Model.load_vllm)."""
    return round(min(cap, want_bytes / total_bytes), 3)


def plugin_dist_info(directory: Path) -> Path:
    """A dist-info with pyproject.toml's ``vllm.general_plugins`` entry points, for a stack venv that has not
    installed this project (`pip install --no-deps -e .` writes the same file). On PYTHONPATH, importlib.metadata
    finds it in every process, vLLM's spawned engine core included."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    plugins = project["entry-points"]["vllm.general_plugins"]
    info = directory / "voicefleet_gpu_smoke-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: voicefleet-gpu-smoke\nVersion: 0.0.0\n")
    lines = ["[vllm.general_plugins]"] + [f"{name} = {target}" for name, target in plugins.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return directory


def cosyvoice_repo() -> Path | None:
    """The CosyVoice checkout (GPU_STACK_REPO, else the one `make check-gpu-stacks` cloned)."""
    named = os.environ.get("GPU_STACK_REPO")
    if named:
        return Path(named)
    found = sorted((ROOT / "build" / "gpu-stacks" / "src").glob("CosyVoice-*"))
    return found[0] if found else None


def engine_core_children() -> list[int]:
    """Pids of this process's children (vLLM V1's engine core runs in one)."""
    me, out = os.getpid(), []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            out.append(int(stat.split("/")[2]))
    return out


def stream_tokens(engine, lm, torch, hidden: int, inference_wrapper) -> list[dict]:
    """Two requests (32 and 64 tokens) through CosyVoice's token loop; random prompt embeddings stand in for the
    text and prompt speech (dummy weights: the tokens are noise, their count and timing are the point)."""
    import uuid

    runs = []
    for max_len in (32, 64):
        lm_input = torch.randn(1, 24, hidden, device="cuda")
        t1 = time.monotonic()
        times, tokens = [], []
        # min_len = max_len: the stop tokens are masked until then, so each request streams exactly max_len
        for token in inference_wrapper(lm, lm_input, 25, max_len, max_len, uuid.uuid4().hex):
            times.append(time.monotonic() - t1)
            tokens.append(int(token))
        runs.append(
            {
                "tokens": len(tokens),
                "first_token_s": round(times[0], 4) if times else None,
                "tokens_per_s": round(len(tokens) / times[-1], 1) if times else None,
                "below_stop_tokens": all(0 <= t < SPEECH_TOKENS for t in tokens),
            }
        )
    return runs


def step_vllm_cosyvoice() -> dict:
    """vLLM 0.11 with load_format="dummy" on a tiny CosyVoice2ForCausalLM, through what the engine uses: the
    voicefleet_cosyvoice3 plugin (loaded by vLLM in its engine core process), CosyVoice2Model.load_vllm's engine
    arguments, and CosyVoice's own token loop (Qwen2LM.inference_wrapper) streaming the tokens."""
    try:
        import torch
    except ImportError:
        raise Skip(
            "no stack: torch is not in this Python (the runner gives this step the cosyvoice_tts venv)"
        ) from None
    if not torch.cuda.is_available():
        raise Skip(f"no card: torch {torch.__version__} sees no CUDA device (vLLM needs one)")
    repo = cosyvoice_repo()
    if repo is None or not (repo / "cosyvoice" / "vllm" / "cosyvoice2.py").is_file():
        raise Skip(
            f"no stack: no CosyVoice checkout (GPU_STACK_REPO={repo}): make check-gpu-stacks STACKS=cosyvoice_tts"
        )
    import tempfile
    import threading
    import types

    from services.cosyvoice_tts import vllm_plugin

    os.environ[vllm_plugin.REPO_ENV] = str(repo)  # what the engine sets; vLLM's children inherit it
    for path in vllm_plugin.repo_paths(str(repo)):
        sys.path.insert(0, path)
    try:
        import vllm
        from vllm import EngineArgs, LLMEngine, ModelRegistry
        from vllm.plugins import load_general_plugins
    except ImportError as e:
        raise Skip(f"no stack: vLLM does not import ({e})") from None
    from cosyvoice.llm.llm import Qwen2LM

    load_general_plugins()  # as the engine's _import_library does; vLLM does it again in each process it starts
    if vllm_plugin.ARCH not in ModelRegistry.get_supported_archs():
        raise Skip("no stack: vLLM did not load the voicefleet_cosyvoice3 entry point (pip install --no-deps -e .)")
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = vllm_memory_fraction(total)
    model_dir = write_vllm_model_dir(Path(tempfile.mkdtemp()) / "vllm")
    t0 = time.monotonic()
    # CosyVoice2Model.load_vllm's arguments, plus dummy weights and the bounded share
    engine = LLMEngine.from_engine_args(
        EngineArgs(
            model=str(model_dir),
            skip_tokenizer_init=True,
            enable_prompt_embeds=True,
            gpu_memory_utilization=fraction,
            load_format="dummy",
            max_model_len=2048,
        )
    )
    start_s = time.monotonic() - t0
    # SyncMPClient: the engine core (and the model, built from the registered class) lives in another process
    client = type(engine.engine_core).__name__
    children = engine_core_children()
    config = cosyvoice_lm_config()
    lm = types.SimpleNamespace(  # what inference_wrapper reads of a Qwen2LM once load_vllm ran
        vllm=engine,
        lock=threading.Lock(),
        vllm_output_queue={},
        stop_token_ids=[SPEECH_TOKENS + i for i in range(200)],
    )
    try:
        runs = stream_tokens(engine, lm, torch, config["hidden_size"], Qwen2LM.inference_wrapper)
        used = used_bytes()  # the card with the engine up (its share, CUDA graphs, both processes' contexts)
    finally:
        engine.engine_core.shutdown()
    return {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "architecture": vllm_plugin.ARCH,
        "gpu_memory_utilization": fraction,
        "engine_start_s": round(start_s, 1),
        "engine_core_client": client,
        "child_processes": children,
        "class_resolved_in_engine_core": client == "SyncMPClient" and all(r["tokens"] for r in runs),
        "runs": runs,
        "nvml_used_bytes_engine_up": used,
    }


# --- tiny random TTS models through their engines (scripts/gpu_stack_probe.py builds them) ---------------------------
def probe_module():
    """scripts/gpu_stack_probe.py (not a package): its tiny-model builders and offload checks."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_stack_probe", ROOT / "scripts" / "gpu_stack_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_on_card(stack: str):
    try:
        import torch
    except ImportError:
        raise Skip(f"no stack: torch is not in this Python (the runner gives this step the {stack} venv)") from None
    if not torch.cuda.is_available():
        raise Skip(f"no card: torch {torch.__version__} sees no CUDA device")
    return torch


def _verdict(text: str) -> dict:
    return {"ok": text.startswith("ok"), "result": text}


def step_tiny_qwen_tts() -> dict:
    """qwen-tts's Qwen3TTSModel of tiny random modules on CUDA through QwenTtsEngine: generate, offload (the
    engine's hook), reload, generate again with the same seed: the same samples."""
    torch = _torch_on_card("qwen_tts")
    try:
        import qwen_tts  # noqa: F401
    except ImportError as e:
        raise Skip(f"no stack: qwen-tts does not import ({e})") from None
    probe = probe_module()
    return {"torch": torch.__version__, **_verdict(probe.tiny_qwen_offload("cuda"))}


def step_tiny_cosyvoice3() -> dict:
    """CosyVoice's CosyVoice3Model of tiny random modules on CUDA through CosyVoice3Engine: offload, reload, the same
    utterance with the same seed gives the same samples; once whole (``tts(stream=False)``: the LM thread ends
    before the flow and HiFT run) and once streamed (``stream=True``, as the engine runs it: chunked token2wav while
    the LM thread still samples). On CUDA both draw from one generator, in an order that depends on timing when
    streamed: a mismatch there alone is that, not the offload."""
    torch = _torch_on_card("cosyvoice_tts")
    repo = cosyvoice_repo()
    if repo is None or not (repo / "cosyvoice").is_dir():
        raise Skip(
            f"no stack: no CosyVoice checkout (GPU_STACK_REPO={repo}): make check-gpu-stacks STACKS=cosyvoice_tts"
        )
    from services.cosyvoice_tts import vllm_plugin

    sys.path[:0] = vllm_plugin.repo_paths(str(repo))
    probe = probe_module()
    whole = _verdict(probe.tiny_cosyvoice3_offload("cuda", stream=False))
    streamed = _verdict(probe.tiny_cosyvoice3_offload("cuda", stream=True))
    return {"torch": torch.__version__, "ok": whole["ok"], "whole": whole, "streamed": streamed}


# What the vLLM-Omni sidecar needs to start without the hub, read from vllm-omni 0.30.0's Qwen3-TTS code (not run).
# load_format dummy is supported for Qwen3-TTS (its talker builds the speaker encoder eagerly for that), but before
# any weight its stages read files of a checkpoint directory.
VLLM_OMNI_NEEDS = (
    "the qwen_tts_vllm_omni venv (vllm 0.30.0 + vllm-omni 0.30.0 on torch 2.13: CUDA 13, driver >= 580) and, with"
    " --load-format dummy, these non-weight files of a Qwen3-TTS-12Hz CustomVoice checkpoint directory:"
    " config.json (Qwen3TTSConfig: talker_config, speaker_encoder_config), speech_tokenizer/config.json"
    " (Qwen3TTSTokenizerV2Config, read by the talker's encoder and by Code2Wav's decoder),"
    " speech_tokenizer/preprocessor_config.json (AutoFeatureExtractor), and the Qwen2 text tokenizer"
    " (AutoTokenizer: tokenizer_config.json, vocab.json, merges.txt); tiny versions written from qwen-tts's"
    " config classes are not written yet"
)


def step_vllm_omni() -> dict:
    """Not written: the sidecar with dummy weights still needs a checkpoint's config and tokenizer files."""
    try:
        import vllm_omni  # noqa: F401
    except ImportError:
        raise Skip("no stack: vllm-omni is not in this Python; needs " + VLLM_OMNI_NEEDS) from None
    if card() is None:
        raise Skip("no card: NVML finds none; needs " + VLLM_OMNI_NEEDS)
    raise Skip("not written: needs " + VLLM_OMNI_NEEDS)


# --- the GPU-only checks (issue 46): code no CPU test can reach -----------------------------------------------------
def resampler_check(torch) -> dict:
    """GpuStreamResampler (cosyvoice_tts) on the card against torchaudio resampling the whole signal at once."""
    import torchaudio.functional as F

    from services.cosyvoice_tts.cosyvoice_engine import GpuStreamResampler

    x = torch.randn(24000 * 3, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) * 0.1
    out = {}
    for dst in (8000, 16000, 22050, 48000):
        whole = F.resample(x, 24000, dst)
        r = GpuStreamResampler(24000, dst, "cuda")
        parts = [r.feed(x[i : i + 7001]) for i in range(0, len(x), 7001)] + [r.feed(None, last=True)]
        streamed = torch.cat([p for p in parts if p is not None])
        same_length = streamed.numel() == whole.numel()
        err = torch.max(torch.abs(streamed - whole)).item() if same_length else None
        out[str(dst)] = {"samples": [streamed.numel(), whole.numel()], "max_abs_diff": err}
    out["ok"] = all(v["max_abs_diff"] is not None and v["max_abs_diff"] < 1e-4 for v in out.values())
    return out


CAP_CHILD = """
import json, sys, torch
from services.residency.gpu_host import cap_torch_process
GIB = 1 << 30
fraction = cap_torch_process(torch, "gpu_smoke", "cuda:0", 4 * GIB)
held = torch.empty(3 * GIB, dtype=torch.uint8, device="cuda")
held.fill_(1)
torch.cuda.synchronize()
print("HOLDING", flush=True)
sys.stdin.readline()
del held
torch.cuda.empty_cache()
try:
    torch.empty(6 * GIB, dtype=torch.uint8, device="cuda").fill_(1)
    refused = None
except torch.OutOfMemoryError as e:
    refused = str(e).splitlines()[0][:200]
print(json.dumps({"fraction": fraction, "held_3_gib": True, "refused_6_gib": refused}), flush=True)
"""


def memory_cap_check(python: str) -> dict:
    """A child process capped at 4 GiB (cap_torch_process, as a torch engine caps itself at start) holds 3 GiB and
    is refused 6 GiB; while it holds the 3 GiB, NVML's per-process bytes (gpu_host.process_tree_gpu_bytes) are read
    for it."""
    from services.residency.gpu_host import gpu_bytes_by_pid, process_tree_gpu_bytes

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen(
        [python, "-c", CAP_CHILD], cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        line = child.stdout.readline().strip()
        if line != "HOLDING":
            child.kill()
            return {"ok": False, "why": f"the child did not reach its 3 GiB (said {line!r}, exit {child.wait()})"}
        nvml_child = process_tree_gpu_bytes(child.pid)
        by_pid = gpu_bytes_by_pid()
        stdout, _ = child.communicate("go\n", timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    result = json.loads(stdout.strip().splitlines()[-1])
    result["nvml_child_bytes"] = nvml_child
    result["nvml_pids_seen"] = sorted(by_pid) if by_pid is not None else None
    result["child_pid"] = child.pid
    result["ok"] = bool(result["held_3_gib"] and result["refused_6_gib"])
    return result


def step_gpu_checks() -> dict:
    """GpuStreamResampler vs whole-signal resampling; check_cuda_host with the real driver; the per-process memory
    cap; NVML's per-process bytes; card_capacity_bytes from NVML (as the router reads the card with capacity_gb 0)."""
    torch = _torch_on_card("torch")
    from services.residency.gpu_host import check_cuda_host, driver_cuda_version

    out = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    out["stream_resampler"] = _guarded(lambda: resampler_check(torch))
    try:
        check_cuda_host("gpu_smoke", torch.version.cuda)
        out["check_cuda_host"] = {"ok": True, "driver_cuda": driver_cuda_version()}
    except Exception as e:  # noqa: BLE001 - a result, not a crash
        out["check_cuda_host"] = {"ok": False, "why": f"{type(e).__name__}: {e}"}
    out["memory_cap"] = _guarded(lambda: memory_cap_check(sys.executable))

    def capacity() -> dict:
        from services.residency.lease_servicer import card_capacity_bytes

        got = card_capacity_bytes(0, 2.0)
        total = (card() or {}).get("total_bytes")
        return {"bytes": got, "ok": total is not None and got == total - 2 * GIB, "nvml_total_bytes": total}

    out["card_capacity_bytes"] = _guarded(capacity)
    out["ok"] = all(isinstance(v, dict) and v.get("ok") for k, v in out.items() if isinstance(v, dict))
    return out


def _guarded(check) -> dict:
    try:
        return check()
    except Exception as e:  # noqa: BLE001 - reported, not raised: the other checks still run
        return {"ok": False, "why": f"{type(e).__name__}: {str(e)[:400]}"}


# --- CTranslate2 on CUDA with real whisper weights ------------------------------------------------------------------
GOLDEN = ROOT / "tests" / "golden"


def golden_wavs() -> list[Path]:
    return sorted(GOLDEN.glob("*/*.wav"))


def step_whisper_cuda() -> dict:
    """whisper tiny.en through CTranslate2 on CUDA (float16): the golden WAVs decoded as the strict listener does,
    on the CPU (int8) and the card; the first decode on the card timed apart from the second (CTranslate2 4.8.5's
    wheel carries SASS up to sm_86 and PTX: on a newer card its kernels are JIT-compiled at first use; the driver
    keeps them in CUDA_CACHE_PATH)."""
    try:
        import ctranslate2
        from faster_whisper import WhisperModel
    except ImportError as e:
        raise Skip(f"no stack: faster-whisper/ctranslate2 not importable ({e})") from None
    device = os.environ.get("GPU_SMOKE_WHISPER_DEVICE", "cuda")  # cpu: a check of the step's code, not a GPU result
    if device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise Skip(
            "no card: CTranslate2 sees no CUDA device (no driver, or libcublas.so.12 not found: the soname step of"
            " scripts/asr_card.py)"
        )
    from services.common import audio
    from tests.speech import INTELLIGIBLE, LISTEN_OPTIONS, at_16k, wer

    model_dir = os.environ.get("GPU_SMOKE_WHISPER_DIR")
    if not model_dir:
        from services.engines.asr.models import tiny_en_dir

        model_dir = str(tiny_en_dir())
    clips = [(w.parent.name + "/" + w.name, at_16k(*audio.read_wav(str(w)))) for w in golden_wavs()]

    def decode(model, x) -> str:
        segments, _ = model.transcribe(x, language="en", **LISTEN_OPTIONS)
        return " ".join(s.text.strip() for s in segments)

    cpu = WhisperModel(model_dir, device="cpu", compute_type="int8")
    on_cpu = {name: decode(cpu, x) for name, x in clips}
    del cpu
    t0 = time.monotonic()
    compute = "float16" if device == "cuda" else "int8"
    gpu = WhisperModel(model_dir, device=device, compute_type=compute)
    load_s = time.monotonic() - t0
    name0, x0 = clips[0]
    t0 = time.monotonic()
    first = decode(gpu, x0)
    first_s = time.monotonic() - t0
    t0 = time.monotonic()
    second = decode(gpu, x0)
    second_s = time.monotonic() - t0
    on_gpu, seconds = {}, {}
    for name, x in clips:
        t0 = time.monotonic()
        on_gpu[name] = decode(gpu, x)
        seconds[name] = round(time.monotonic() - t0, 4)
    clips_out = {
        name: {"cpu": on_cpu[name], device: on_gpu[name], "wer_vs_cpu": round(wer(on_cpu[name], on_gpu[name]), 3)}
        for name, _ in clips
    }
    return {
        "ctranslate2": ctranslate2.__version__,
        "model_dir": model_dir,
        "device": device,
        "compute_type": compute,
        "load_s": round(load_s, 3),
        "first_decode_s": round(first_s, 3),
        "second_decode_s": round(second_s, 3),
        "first_equals_second": first == second,
        "decode_s": seconds,
        "clips": clips_out,
        "bound": INTELLIGIBLE,
        "ok": first == second and all(c["wer_vs_cpu"] <= INTELLIGIBLE for c in clips_out.values()),
        "cuda_cache_path": os.environ.get("CUDA_CACHE_PATH"),
    }


# name -> (function, the Python it runs in: "fleet" (this venv), "torch" (any with torch), or a GPU stack's venv)
STEPS = {
    "asr": (step_asr, "fleet"),
    "torch_offload": (step_torch_offload, "torch"),
    "vllm_cosyvoice": (step_vllm_cosyvoice, "stack:cosyvoice_tts"),
    "tiny_qwen_tts": (step_tiny_qwen_tts, "stack:qwen_tts"),
    "tiny_cosyvoice3": (step_tiny_cosyvoice3, "stack:cosyvoice_tts"),
    "vllm_omni": (step_vllm_omni, "stack:qwen_tts_vllm_omni"),
    "gpu_checks": (step_gpu_checks, "torch"),
    "whisper_cuda": (step_whisper_cuda, "fleet"),
}


def run_step_here(name: str) -> dict:
    fn, _ = STEPS[name]
    t0 = time.monotonic()
    try:
        result = {"status": "ran", **fn()}
    except Skip as e:
        result = {"status": "skipped", "why": str(e)}
    result["wall_s"] = round(time.monotonic() - t0, 1)
    return result


def stack_python(stack: str) -> str | None:
    """A GPU stack's venv Python: GPU_SMOKE_<STACK>_PYTHON, else build/gpu-stacks/venvs/<stack> (make
    check-gpu-stacks); None when neither exists."""
    named = os.environ.get(f"GPU_SMOKE_{stack.upper()}_PYTHON")
    python = Path(named) if named else ROOT / "build" / "gpu-stacks" / "venvs" / stack / "bin" / "python"
    return str(python) if python.exists() else None


def torch_python() -> str | None:
    """A Python with torch: GPU_SMOKE_TORCH_PYTHON, else the first GPU stack venv that imports it."""
    wanted = os.environ.get("GPU_SMOKE_TORCH_PYTHON")
    candidates = (
        [wanted] if wanted else sorted(glob.glob(str(ROOT / "build" / "gpu-stacks" / "venvs" / "*" / "bin" / "python")))
    )
    candidates.append(sys.executable)
    for python in candidates:
        if (
            python
            and Path(python).exists()
            and subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0
        ):
            return python
    return None


def run_step(name: str, timeout_s: float, scratch: Path) -> dict:
    _, needs = STEPS[name]
    python = sys.executable
    paths = [str(ROOT), str(ROOT / "gen" / "python")]
    if needs == "torch":
        python = torch_python()
        if python is None:
            return {"status": "skipped", "why": "no stack: no Python with torch (make check-gpu-stacks)"}
    elif needs.startswith("stack:"):
        stack = needs.split(":", 1)[1]
        python = stack_python(stack)
        if python is None:
            where = ROOT / "build" / "gpu-stacks" / "venvs" / stack
            return {
                "status": "skipped",
                "why": f"no stack: no {stack} venv at {where.relative_to(ROOT)} nor GPU_SMOKE_{stack.upper()}_PYTHON"
                f" (make check-gpu-stacks STACKS={stack})"
                + ("; it needs " + VLLM_OMNI_NEEDS if name == "vllm_omni" else ""),
            }
        paths.append(str(plugin_dist_info(scratch / "plugin")))  # vLLM finds the plugin in its every process
    # the caller's own PYTHONPATH last (packages installed with --target, as on a card with no registry)
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    try:
        done = subprocess.run(
            [python, "-m", "bench.gpu_smoke", "--step", name],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"status": "failed", "why": f"still running after {timeout_s:.0f}s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"status": "failed", "why": f"exit {done.returncode}", "stderr_tail": done.stderr[-3000:]}
    return json.loads(lines[-1])


def markdown(report: dict) -> str:
    lines = [
        f"# GPU smoke: {report['card']['name'] if report['card'] else 'no card'}",
        "",
        f"{report['when']} · {report['host']} · commit {report.get('commit', 'not recorded')} · `make gpu-smoke`",
        "",
        "| step | status | why / numbers |",
        "|---|---|---|",
    ]
    for name, result in report["steps"].items():
        detail = result.get("why") or json.dumps({k: v for k, v in result.items() if k not in ("status",)})
        lines.append(f"| {name} | {result['status']} | {detail.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", choices=sorted(STEPS))
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--out", type=Path, help="report directory (default: bench/results/gpu/<card>)")
    parser.add_argument("--steps", help="comma-separated steps to run (default: all)")
    args = parser.parse_args(argv)
    names = args.steps.split(",") if args.steps else list(STEPS)
    unknown = sorted(set(names) - set(STEPS))
    if unknown:
        parser.error(f"no such steps: {', '.join(unknown)} (steps: {', '.join(STEPS)})")
    if args.step:
        print(json.dumps(run_step_here(args.step)))
        return 0
    found = card()
    cpu_check = os.environ.get("GPU_SMOKE_ASR_DEVICE") == "cpu"
    if found is None:
        print("no CUDA card: NVML (libnvidia-ml.so.1) finds no driver or card; each step says why it skips", flush=True)
    import tempfile

    steps = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            steps[name] = run_step(name, args.timeout, Path(scratch))  # each step checks its card and libraries
            print(f"{name}: {steps[name]['status']} {steps[name].get('why', '')}", flush=True)
    report = {
        "card": found,
        "commit": commit(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": os.uname().nodename,
        "steps": steps,
    }
    directory = args.out or RESULTS / (slug(found["name"]) if found else ("cpu-check" if cpu_check else "no-card"))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "smoke.json").write_text(json.dumps(report, indent=1) + "\n")
    (directory / "smoke.md").write_text(markdown(report))
    print(f"report: {directory}/smoke.json, smoke.md")
    return 1 if any(s["status"] == "failed" for s in steps.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
