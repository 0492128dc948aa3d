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


def until_weights(start, *weights_dirs: str) -> str:
    """Run the engine's load code; it must stop with the service's FailedPrecondition (weights / device), or inside
    the library where it opens a file of the (empty) weights directory."""
    from services.common.errors import FailedPrecondition

    try:
        result = start()
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except FailedPrecondition as e:
        return f"stopped as designed: FAILED_PRECONDITION {str(e)[:240]}"
    except BaseException as e:  # noqa: BLE001
        tb = traceback.extract_tb(e.__traceback__)
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in tb[-3:][::-1])
        if any(d and d in str(e) for d in weights_dirs):
            return f"reached the weights inside the library: {type(e).__name__}: {str(e)[:200]} ({where})"
        return f"FAILED: {type(e).__name__}: {str(e)[:240]} ({where})"
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
    overlay = str(Path(state) / "model")
    return {"imported": imported, "load": until_weights(engine._start_blocking, str(weights), overlay)}


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
    result = {"imported": imported, "load": until_weights(MossSpeech(cfg.moss_sts.gpu).load, weights, codec)}
    try:
        result["tiny"] = tiny_moss()
    except BaseException as e:  # noqa: BLE001
        traceback.print_exc()
        result["tiny"] = f"FAILED: {type(e).__name__}: {str(e)[:300]}"
    return result


def tiny_moss_decoder():
    """The checkout's real CosyVoice2Model (cosyvoice/cli/model.py) around a TINY random flow (causal conformer
    encoder + causal CFM) and HiFT vocoder, configured like the codec: 12.5 Hz tokens, 4 mel frames per token,
    80-bin mel at 24 kHz with hop 480. Random weights: the audio is noise, the code paths are the real ones."""
    import torch
    from cosyvoice.cli.model import CosyVoice2Model
    from cosyvoice.flow.decoder import CausalConditionalDecoder
    from cosyvoice.flow.flow import CausalMaskedDiffWithXvec
    from cosyvoice.flow.flow_matching import CausalConditionalCFM
    from cosyvoice.hifigan.f0_predictor import ConvRNNF0Predictor
    from cosyvoice.hifigan.generator import HiFTGenerator
    from cosyvoice.transformer.upsample_encoder import UpsampleConformerEncoder
    from omegaconf import DictConfig

    torch.manual_seed(0)
    encoder = UpsampleConformerEncoder(
        input_size=512,
        output_size=512,
        attention_heads=2,
        linear_units=64,
        num_blocks=1,
        input_layer="linear",
        pos_enc_layer_type="rel_pos_espnet",
        selfattention_layer_type="rel_selfattn",
        use_cnn_module=False,
        macaron_style=False,
        static_chunk_size=25,
        upsample_stride=4,
    )
    cfm_params = DictConfig(
        {
            "sigma_min": 1e-06,
            "solver": "euler",
            "t_scheduler": "cosine",
            "training_cfg_rate": 0.2,
            "inference_cfg_rate": 0.7,
            "reg_loss_type": "l1",
        }
    )
    estimator = CausalConditionalDecoder(
        in_channels=320,
        out_channels=80,
        channels=[32],
        dropout=0.0,
        attention_head_dim=8,
        n_blocks=1,
        num_mid_blocks=1,
        num_heads=2,
        act_fn="gelu",
        static_chunk_size=100,
        num_decoding_left_chunks=-1,
    )
    decoder = CausalConditionalCFM(240, cfm_params, n_spks=1, spk_emb_dim=80, estimator=estimator)
    flow = CausalMaskedDiffWithXvec(
        input_size=512,
        output_size=80,
        spk_embed_dim=192,
        vocab_size=16384,
        input_frame_rate=12.5,
        token_mel_ratio=4,
        pre_lookahead_len=3,
        encoder=encoder,
        decoder=decoder,
    )
    hift = HiFTGenerator(
        in_channels=80,
        base_channels=16,
        nb_harmonics=8,
        sampling_rate=24000,
        upsample_rates=[8, 5, 3],
        upsample_kernel_sizes=[16, 11, 7],
        istft_params={"n_fft": 16, "hop_len": 4},
        resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3]],
        source_resblock_kernel_sizes=[7, 7, 11],
        source_resblock_dilation_sizes=[[1, 3], [1, 3], [1, 3]],
        f0_predictor=ConvRNNF0Predictor(num_class=1, in_channels=80, cond_channels=16),
    )
    model = CosyVoice2Model(torch.nn.Identity(), flow.eval(), hift.eval(), fp16=False)
    return model


def tiny_moss() -> str:
    """The engine's streaming decode (MossSpeech.token2wav + StreamingCodecDecoder) on the tiny real decoder,
    against a whole-utterance decode of the same frames."""
    import numpy as np
    import torch

    from services.moss_sts.moss_engine import MossSpeech, decoder_plan
    from services.moss_sts.moss_stream import StreamingCodecDecoder

    decoder = tiny_moss_decoder()
    cfg = config(moss_sts={"gpu.device": "cpu"})
    moss = MossSpeech(cfg.moss_sts.gpu)
    moss.torch = torch
    moss.codec = type("Codec", (), {"audio_decoder": decoder})()
    moss.plan, moss.offset_protocol = decoder_plan(decoder, moss.plan)
    prompt_tokens = 6
    moss.conditioning = {
        "prompt_token": torch.randint(0, 16384, (1, prompt_tokens), dtype=torch.int32),
        "prompt_feat": torch.randn(1, 4 * prompt_tokens, 80) * 0.1,
        "embedding": torch.randn(1, 192),
    }
    frames = torch.randint(0, 16384, (40,)).tolist()
    stream = StreamingCodecDecoder(lambda w, o, f: moss.token2wav("stream", w, o, f), moss.plan)
    chunks = []
    for i in range(0, len(frames), 3):  # frames arrive 3 at a time, as generation steps would hand them on
        chunks += stream.push(frames[i : i + 3])
    tail = stream.finish()
    chunks += [tail] if tail is not None else []
    moss.release("stream")
    streamed = np.concatenate(chunks)
    whole = moss.token2wav("whole", frames, 0, True)
    moss.release("whole")
    left = len(decoder.hift_cache_dict)
    sizes = [len(c) for c in chunks]
    borders = np.cumsum(sizes)[:-1]
    steps = np.abs(np.diff(streamed))
    ratio = float(steps[borders - 1].max() / max(np.percentile(steps, 99), 1e-9)) if len(borders) else 0.0
    checks = {
        "streamed length == whole == 1920/frame": len(streamed) == len(whole) == len(frames) * 1920,
        "every chunk has audio": all(sizes),
        "decoder state released": left == 0,
    }
    verdict = "ok" if all(checks.values()) else "MISMATCH " + ", ".join(k for k, v in checks.items() if not v)
    return (
        f"{verdict}: real CosyVoice2Model, tiny random flow + HiFT, plan {moss.plan}: {len(frames)} frames (3 per"
        f" step) -> {len(chunks)} chunks of {sizes[0]}, {sizes[1]}, ... samples; streamed {len(streamed)} = whole"
        f" {len(whole)} samples; largest border step / p99 step = {ratio:.2f} (random weights, not a quality claim)"
    )


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
