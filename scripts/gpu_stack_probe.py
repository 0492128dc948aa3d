"""Runs INSIDE one GPU stack's venv (scripts/gpu_stacks.py check): imports what the engine's load path imports and
runs the engine's own load code until it needs weights or a device. Prints one ``PROBE {json}`` line:
imported ("all N modules" or the first failure), load (where the engine stopped, and why), tiny (real library
code on a tiny random model, where the library allows; "-" where it does not)."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
import sys
import tempfile
import traceback
from pathlib import Path

REPO = os.environ.get("GPU_STACK_REPO", "")


def import_all(modules: list[str]) -> str:
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001 - reported, not raised
            return f"FAILED at {name}: {type(e).__name__}: {str(e)[:300]}"
    return f"all {len(modules)} modules"


def until_weights(start) -> str:
    """Run the engine's load code; it must stop with the service's FailedPrecondition (weights / device)."""
    from services.common.errors import FailedPrecondition

    try:
        result = start()
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except FailedPrecondition as e:
        return f"stopped as designed: FAILED_PRECONDITION {str(e)[:240]}"
    except BaseException as e:  # noqa: BLE001
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return f"FAILED: {type(e).__name__}: {str(e)[:240]} ({Path(tb.filename).name}:{tb.lineno})"
    return "FAILED: load completed without weights (it should have stopped)"


def config(**sections):
    from services.common.config import load_config

    cfg = load_config(None)
    for section, values in sections.items():
        obj = getattr(cfg, section)
        for path, value in values.items():
            target = obj
            *parents, leaf = path.split(".")
            for p in parents:
                target = getattr(target, p)
            setattr(target, leaf, value)
    return cfg


def yaml_modules(yaml_text: str) -> list[str]:
    """Modules named by a HyperPyYAML file's !new: / !name: tags (the classes the library builds from it)."""
    targets = sorted(set(re.findall(r"!(?:new|name):([A-Za-z0-9_.]+)", yaml_text)))
    return sorted({t.rsplit(".", 1)[0] for t in targets})


def probe_asr() -> dict:
    imported = import_all(["faster_whisper", "ctranslate2", "onnxruntime", "services.asr.gpu_engine"])
    from services.asr.gpu_engine import GpuAsrEngine, preload_cuda_libraries

    libs = preload_cuda_libraries()
    tmp = tempfile.mkdtemp()
    cfg = config(asr={"engine": "gpu", "gpu.model_dir": tmp})
    engine = GpuAsrEngine("asr", cfg.asr)
    load = until_weights(engine.start)
    return {"imported": f"{imported}; cuBLAS/cuDNN preloaded: {len(libs)} libraries", "load": load}


def probe_cosyvoice() -> dict:
    sys.path[:0] = [REPO, os.path.join(REPO, "third_party", "Matcha-TTS")]
    yaml_text = Path(REPO, "examples/libritts/cosyvoice3/conf/cosyvoice3.yaml").read_text()
    modules = ["cosyvoice.cli.cosyvoice", "cosyvoice.cli.frontend", "cosyvoice.cli.model", "cosyvoice.utils.common"]
    modules += yaml_modules(yaml_text) + ["wetext", "vllm", "cosyvoice.vllm.cosyvoice2", "torchaudio"]
    imported = import_all(modules)
    from services.cosyvoice_tts.cosyvoice_engine import CosyVoice3Engine

    weights = Path(tempfile.mkdtemp())
    state = tempfile.mkdtemp()
    # Weights directory with the recipe's yaml but no checkpoints: the engine gets as far as the library's build.
    (weights / "cosyvoice3.yaml").write_text(yaml_text)
    cfg = config(
        cosyvoice_tts={"gpu.model_dir": str(weights), "gpu.state_dir": state, "gpu.repo_dir": REPO, "gpu.device": "cpu"}
    )
    engine = CosyVoice3Engine("cosyvoice_tts", cfg.cosyvoice_tts.gpu, cfg.cosyvoice_tts.chunking)
    return {"imported": imported, "load": until_weights(engine._start_blocking)}


def probe_moss() -> dict:
    sys.path[:0] = [REPO, os.path.join(REPO, "Matcha-TTS")]
    modules = ["transformers", "accelerate", "torchaudio", "cosyvoice.cli.model", "cosyvoice.flow.flow"]
    modules += ["cosyvoice.flow.flow_matching", "cosyvoice.flow.decoder", "cosyvoice.hifigan.generator"]
    modules += ["cosyvoice.transformer.upsample_encoder", "cosyvoice.dataset.processor", "matcha.utils.audio"]
    modules += ["services.moss_sts.moss_engine"]
    imported = import_all(modules)
    from services.moss_sts.moss_engine import MossSpeech

    weights, codec = tempfile.mkdtemp(), tempfile.mkdtemp()
    cfg = config(moss_sts={"gpu.model_dir": weights, "gpu.codec_dir": codec, "gpu.repo_dir": REPO, "gpu.device": "cpu"})
    return {"imported": imported, "load": until_weights(MossSpeech(cfg.moss_sts.gpu).load)}


def probe_qwen() -> dict:
    imported = import_all(["qwen_tts", "torchaudio", "services.qwen_tts.qwen_engine"])
    from services.qwen_tts.qwen_engine import QwenTtsEngine

    cfg = config(qwen_tts={"gpu.backend": "qwen_tts", "gpu.model_dir": tempfile.mkdtemp(), "gpu.device": "cpu"})
    engine = QwenTtsEngine("qwen_tts", cfg.qwen_tts.chunking, cfg.qwen_tts.gpu)
    return {"imported": imported, "load": until_weights(engine._load)}


def probe_vllm_omni() -> dict:
    imported = import_all(["vllm", "vllm_omni", "vllm_omni.entrypoints.cli.main"])
    import vllm_omni

    deploy = Path(vllm_omni.__file__).parent / "deploy" / "qwen3_tts.yaml"
    load = f"deploy config {'found' if deploy.exists() else 'MISSING'}: {deploy.name}"
    if deploy.exists():
        utilizations = re.findall(r"gpu_memory_utilization:\s*([0-9.]+)", deploy.read_text())
        load += f"; stages' gpu_memory_utilization: {', '.join(utilizations) or 'none named'}"
    return {"imported": imported, "load": load}


PROBES = {
    "asr": probe_asr,
    "cosyvoice_tts": probe_cosyvoice,
    "moss_sts": probe_moss,
    "qwen_tts": probe_qwen,
    "qwen_tts_vllm_omni": probe_vllm_omni,
}

if __name__ == "__main__":
    name = sys.argv[1]
    try:
        result = PROBES[name]()
    except BaseException as e:  # noqa: BLE001
        result = {"imported": f"probe FAILED: {type(e).__name__}: {str(e)[:400]}"}
        traceback.print_exc()
    try:
        import torch

        result["torch"] = (
            f"{torch.__version__} (CUDA {torch.version.cuda}, device visible: {torch.cuda.is_available()})"
        )
    except ImportError:
        pass
    result.setdefault("tiny", "-")
    print("PROBE " + json.dumps(result), flush=True)
