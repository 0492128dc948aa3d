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
    imported = import_all(["faster_whisper", "ctranslate2", "onnxruntime", "services.engines.asr.gpu_engine"])
    from services.engines.asr.gpu_engine import GpuAsrEngine, preload_cuda_libraries

    libs = preload_cuda_libraries()
    tmp = tempfile.mkdtemp()
    cfg = config(asr={"engine": "gpu", "gpu.model_dir": tmp})
    engine = GpuAsrEngine("asr", cfg.asr)
    load = until_weights(engine.start)
    return {"imported": f"{imported}; cuBLAS preloaded: {len(libs)} libraries", "load": load}


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
    load = until_weights(engine._start_blocking, str(weights), overlay)
    return {"imported": imported, "load": load, "tiny": guarded(tiny_cosyvoice3_offload)}


def tiny_cosyvoice3(qwen_dir: str):
    """The pinned checkout's real CosyVoice3Model around TINY random modules of cosyvoice3.yaml's own classes:
    CosyVoice3LM on a Qwen2Encoder (a 1-layer Qwen2 saved to ``qwen_dir``; vocabulary kept so <|endofprompt|>
    151646 exists), CausalMaskedDiffWithDiT with a 1-block DiT, CausalHiFTGenerator. 25 Hz tokens, 2 mel frames per
    token, 80-bin mel at 24 kHz, as the recipe. Random weights: noise, through the real code paths."""
    import functools

    import torch
    from cosyvoice.cli.model import CosyVoice3Model
    from cosyvoice.flow.DiT.dit import DiT
    from cosyvoice.flow.flow import CausalMaskedDiffWithDiT
    from cosyvoice.flow.flow_matching import CausalConditionalCFM
    from cosyvoice.hifigan.f0_predictor import CausalConvRNNF0Predictor
    from cosyvoice.hifigan.generator import CausalHiFTGenerator
    from cosyvoice.llm.llm import CosyVoice3LM, Qwen2Encoder
    from cosyvoice.transformer.upsample_encoder import PreLookaheadLayer
    from cosyvoice.utils.common import ras_sampling
    from omegaconf import DictConfig
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    qwen = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, vocab_size=151936, max_position_embeddings=4096)  # fmt: skip
    Qwen2ForCausalLM(qwen).save_pretrained(qwen_dir)
    llm = CosyVoice3LM(
        llm_input_size=32,
        llm_output_size=32,
        speech_token_size=6561,
        llm=Qwen2Encoder(qwen_dir),
        sampling=functools.partial(ras_sampling, top_p=0.8, top_k=25, win_size=10, tau_r=0.1),
    )
    cfm = {"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "cosine", "training_cfg_rate": 0.2,
           "inference_cfg_rate": 0.7, "reg_loss_type": "l1"}  # fmt: skip
    estimator = DiT(dim=32, depth=1, heads=2, dim_head=16, ff_mult=2, mel_dim=80, mu_dim=80, spk_dim=80,
                    out_channels=80, static_chunk_size=50, num_decoding_left_chunks=-1)  # fmt: skip
    flow = CausalMaskedDiffWithDiT(
        input_size=80,
        output_size=80,
        spk_embed_dim=192,
        output_type="mel",
        vocab_size=6561,
        input_frame_rate=25,
        only_mask_loss=True,
        token_mel_ratio=2,
        pre_lookahead_len=3,
        pre_lookahead_layer=PreLookaheadLayer(in_channels=80, channels=32, pre_lookahead_len=3),
        decoder=CausalConditionalCFM(240, DictConfig(cfm), n_spks=1, spk_emb_dim=80, estimator=estimator),
    )
    hift = CausalHiFTGenerator(
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
        conv_pre_look_right=4,
        f0_predictor=CausalConvRNNF0Predictor(num_class=1, in_channels=80, cond_channels=16),
    )
    model = CosyVoice3Model(llm.eval(), flow.eval(), hift.eval(), fp16=False)
    for module in (model.llm, model.flow, model.hift):  # what CosyVoice2Model.load() does after reading weights
        module.to(model.device)
    return model


def tiny_cosyvoice3_offload(device: str = "cpu", stream: bool = False) -> str:
    """CosyVoice3Engine.offload()/reload() (the engine's own async hooks, under its library lock) around the tiny
    real CosyVoice3Model: a whole utterance through the library's ``tts()`` (LM thread, flow, HiFT) from a speaker's
    features, offload, every pre-offload storage released (modules and the speaker's tensors) and resident_bytes 0,
    reload, the same utterance again with the same seed: the same samples. ``device``/``stream``: bench/gpu_smoke.py
    runs it on CUDA with the library's streaming (chunked token2wav)."""
    import types

    import numpy as np
    import torch
    from cosyvoice.utils.common import set_all_random_seed

    from services.cosyvoice_tts.cosyvoice_engine import CosyVoice3Engine

    model = tiny_cosyvoice3(tempfile.mkdtemp())
    speaker = {  # what frontend_zero_shot keeps per speaker in spk2info (prompt tokens, mel, embedding)
        "flow_embedding": torch.randn(1, 192),
        "llm_embedding": torch.randn(1, 192),
        "prompt_text": torch.tensor([[151646]], dtype=torch.int32),
        "llm_prompt_speech_token": torch.randint(0, 6561, (1, 10), dtype=torch.int32),
        "flow_prompt_speech_token": torch.randint(0, 6561, (1, 10), dtype=torch.int32),
        "prompt_speech_feat": torch.randn(1, 20, 80) * 0.1,
    }
    cfg = config(cosyvoice_tts={"gpu.device": device, "gpu.state_dir": tempfile.mkdtemp()})
    engine = CosyVoice3Engine("cosyvoice_tts", cfg.cosyvoice_tts.gpu, cfg.cosyvoice_tts.chunking)
    engine._model = types.SimpleNamespace(model=model, frontend=types.SimpleNamespace(spk2info={"v": speaker}))
    engine._track_weights()
    text = torch.tensor([[151646, 1000, 2000, 3000]], dtype=torch.int32)

    chunks = []

    def speak() -> np.ndarray:
        set_all_random_seed(5)  # what the engine does before each segment
        # streamed: the random LM stops after ~20 tokens, under the library's first hop (25 + 3 lookahead); a hop
        # of 5 (growing to 10) makes its chunked token2wav yield several pieces. Reset each time: the library grows
        # the hop per chunk and never resets it (the engine resets it per segment).
        if stream:
            model.token_hop_len, model.token_max_hop_len = 5, 10
        voice = engine._model.frontend.spk2info["v"]
        pieces = [o["tts_speech"].cpu() for o in model.tts(text=text, stream=stream, **voice)]
        chunks.append(len(pieces))
        return torch.cat(pieces, dim=1).numpy()

    before = speak()
    resident = engine.resident_bytes()
    refs = storage_refs(engine._host.modules, [speaker])
    asyncio.run(engine.offload())
    alive = still_referenced(refs)
    offloaded = engine.resident_bytes()
    asyncio.run(engine.reload())
    after = speak()
    names = ", ".join(type(m).__name__ for m in engine._host.modules)
    verdict = offload_verdict(before, after, refs, alive, engine._host, f"CosyVoice3Model ({names}) + spk2info")
    if offloaded != 0:
        verdict = "MISMATCH resident_bytes not 0 while offloaded; " + verdict
    return (
        f"{verdict}; {before.shape[1]} samples in {chunks[0]} piece(s) (stream={stream}, {device});"
        f" resident_bytes {resident} -> {offloaded} while offloaded ->"
        f" {engine.resident_bytes()}; not covered: load_vllm (CosyVoice's own vLLM engine, kept resident) and"
        " load_trt (TensorRT estimator) need a GPU"
    )


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
    result["tiny"] = "; ".join(guarded(check) for check in (tiny_moss, tiny_moss_offload))
    return result


def guarded(check) -> str:
    try:
        return check()
    except BaseException as e:  # noqa: BLE001 - reported, not raised
        traceback.print_exc()
        return f"{check.__name__} FAILED: {type(e).__name__}: {str(e)[:300]}"


# --- offload / reload (services/residency/torch_offload.py) on tiny models ---------------------------------------
def storage_refs(modules, maps=()) -> list:
    """Weak references to the storages behind every parameter, buffer and loose tensor. torch keeps a storage's
    Python object alive exactly as long as the storage itself (PyObject preservation), so a dead reference means
    nobody holds that memory any more."""
    import weakref

    import torch

    from services.residency.torch_offload import module_tensors

    tensors = [t for m in modules for t in module_tensors(m)]
    tensors += [v for m in maps for v in m.values() if isinstance(v, torch.Tensor)]
    return [weakref.ref(t.untyped_storage()) for t in tensors]


def preservation_works() -> bool:
    """The premise of ``storage_refs``, checked on this torch: a storage's reference lives while a tensor holds
    it, and dies with the last tensor."""
    import gc
    import weakref

    import torch

    t = torch.zeros(4)
    ref = weakref.ref(t.untyped_storage())
    gc.collect()
    alive = ref() is not None
    del t
    gc.collect()
    return alive and ref() is None


def still_referenced(refs) -> int:
    """How many of the pre-offload storages someone still holds (checked while the model is offloaded)."""
    import gc

    gc.collect()
    return sum(r() is not None for r in refs)


def offload_verdict(before, after, refs, alive: int, host, what: str) -> str:
    """Same output after offload + reload; while offloaded, no reference left to the storages held before."""
    import numpy as np

    moved_out, moved_in = host.last["out"], host.last["in"]
    checks = {
        "storage weakrefs work on this torch": preservation_works(),
        "output after reload == before offload": np.array_equal(before, after),
        f"no reference left to the {len(refs)} pre-offload storages": alive == 0,
        "bytes moved out == in": moved_out.bytes == moved_in.bytes > 0,
    }
    verdict = "ok" if all(checks.values()) else "MISMATCH " + ", ".join(k for k, v in checks.items() if not v)
    return (
        f"{verdict}: offload/reload of {what}: {moved_out.bytes / 2**20:.2f} MiB out in {moved_out.seconds * 1e3:.1f}"
        f" ms, back in {moved_in.seconds * 1e3:.1f} ms; while offloaded {len(refs) - alive} of {len(refs)} storages"
        f" released ({alive} still referenced);"
        f" output identical: {checks['output after reload == before offload']}"
    )


def tiny_moss_offload() -> str:
    """MossSpeechEngine.offload()/reload() (the engine's own async hooks) around the tiny real decoder: decode,
    offload, every pre-offload storage released and resident_bytes 0, reload, decode again: the same samples."""

    import numpy as np
    import torch

    from services.moss_sts.moss_engine import MossSpeech, MossSpeechEngine, decoder_plan

    decoder = tiny_moss_decoder()
    cfg = config(moss_sts={"gpu.device": "cpu"})
    moss = MossSpeech(cfg.moss_sts.gpu)
    moss.torch = torch
    moss.codec = type("Codec", (), {"audio_decoder": decoder})()
    moss.plan, moss.offset_protocol = decoder_plan(decoder, moss.plan)
    moss.conditioning = {
        "prompt_token": torch.randint(0, 16384, (1, 6), dtype=torch.int32),
        "prompt_feat": torch.randn(1, 24, 80) * 0.1,
        "embedding": torch.randn(1, 192),
    }
    moss.track_weights()
    engine = object.__new__(MossSpeechEngine)  # the engine's hooks only need its model
    engine.model = moss
    frames = torch.randint(0, 16384, (20,)).tolist()

    def decode() -> np.ndarray:
        torch.manual_seed(7)  # HiFT's source excitation is random
        wav = moss.token2wav("k", frames, 0, True)
        moss.release("k")
        return wav

    before = decode()
    resident = moss.resident_bytes()
    refs = storage_refs(moss.host.modules, moss.host.maps)
    asyncio.run(engine.offload())
    alive = still_referenced(refs)
    offloaded = moss.resident_bytes()
    asyncio.run(engine.reload())
    after = decode()
    verdict = offload_verdict(
        before, after, refs, alive, moss.host, "the MOSS decoder (flow + HiFT) and its conditioning"
    )
    if offloaded != 0:
        verdict = "MISMATCH resident_bytes not 0 while offloaded; " + verdict
    return f"{verdict}; resident_bytes {resident} -> {offloaded} while offloaded -> {moss.resident_bytes()}"


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
    return {"imported": imported, "load": until_weights(engine._load), "tiny": guarded(tiny_qwen_offload)}


def tiny_qwen_tts(device: str = "cpu"):
    """qwen-tts's real Qwen3TTSModel around TINY random modules of its own classes and configs: a CustomVoice
    Qwen3TTSForConditionalGeneration (1-layer talker and code predictor, 16 code groups, one speaker) whose speech
    tokenizer is a Qwen3TTSTokenizer over a 1-layer Qwen3TTSTokenizerV2Model (12 Hz, 16 quantizers). Codec special
    ids are placed below the talker vocabulary, as in the released config. Text tokenization is the one stand-in: a
    processor that returns fixed chat-template ids (the Qwen2 tokenizer's vocabulary files are not here)."""
    import torch
    from qwen_tts import Qwen3TTSModel
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model
    from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer

    torch.manual_seed(0)
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    talker = dict(
        small,
        vocab_size=3072,
        num_key_value_heads=1,
        num_code_groups=16,
        text_hidden_size=32,
        text_vocab_size=151936,
        spk_id={"vivian": 3000},
        spk_is_dialect={"vivian": False},
        codec_language_id={"english": 2050},
        codec_pad_id=2148,
        codec_bos_id=2149,
        codec_eos_token_id=2150,
        codec_think_id=2154,
        codec_nothink_id=2155,
        codec_think_bos_id=2156,
        codec_think_eos_id=2157,
        rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2], "interleaved": True},
        code_predictor_config=dict(small, vocab_size=2048, num_key_value_heads=1, num_code_groups=16),
    )
    config = Qwen3TTSConfig(
        talker_config=talker,
        tts_model_type="custom_voice",
        tts_model_size="0b6",
        tokenizer_type="qwen3_tts_tokenizer_12hz",
    )
    model = Qwen3TTSForConditionalGeneration(config).to(device).eval()
    codec_config = Qwen3TTSTokenizerV2Config(
        encoder_config=dict(
            small,
            num_key_value_heads=2,
            num_filters=4,
            codebook_dim=16,
            codebook_size=2048,
            num_quantizers=16,
            head_dim=16,
            upsample_groups=32,
        ),
        decoder_config=dict(
            small,
            num_key_value_heads=2,
            codebook_size=2048,
            latent_dim=32,
            num_quantizers=16,
            decoder_dim=32,
            codebook_dim=32,
        ),
    )
    speech_tokenizer = Qwen3TTSTokenizer()
    speech_tokenizer.model = Qwen3TTSTokenizerV2Model(codec_config).to(device).eval()
    speech_tokenizer.config, speech_tokenizer.device = codec_config, torch.device(device)
    model.load_speech_tokenizer(speech_tokenizer)

    class ChatIds:  # stand-in for the Qwen2 tokenizer: <|im_start|>assistant\n Hi. <|im_end|>\n<|im_start|>assistant\n
        def __call__(self, text, return_tensors="pt", padding=True):
            return {"input_ids": torch.tensor([[151644, 77091, 198, 9707, 13, 151645, 198, 151644, 77091, 198]])}

    return Qwen3TTSModel(model, ChatIds(), {"max_new_tokens": 12})


def tiny_qwen_offload(device: str = "cpu") -> str:
    """QwenTtsEngine.offload()/reload() (the engine's own hooks, on its model thread) around the tiny real
    Qwen3TTSModel: the engine's ``_generate`` (generate_custom_voice: talker, code predictor, codec decode), offload,
    every pre-offload storage released and resident_bytes 0, reload, the same request again: the same samples."""

    import numpy as np

    from services.qwen_tts.qwen_engine import QwenTtsEngine
    from services.residency.torch_offload import HostOffload

    cfg = config(qwen_tts={"gpu.backend": "qwen_tts", "gpu.device": device})
    engine = QwenTtsEngine("qwen_tts", cfg.qwen_tts.chunking, cfg.qwen_tts.gpu)
    engine._model = tiny_qwen_tts(device)
    engine._offload = HostOffload(engine.model_modules(engine._model))  # as start() does after loading

    def speak() -> np.ndarray:
        pcm, _ = engine._generate("Hi.", "vivian", "English", 11)
        return np.frombuffer(pcm, dtype=np.int16)

    before = speak()
    resident = engine.resident_bytes()
    refs = storage_refs(engine._offload.modules)
    asyncio.run(engine.offload())
    alive = still_referenced(refs)
    offloaded = engine.resident_bytes()
    asyncio.run(engine.reload())
    after = speak()
    names = ", ".join(type(m).__name__ for m in engine._offload.modules)
    verdict = offload_verdict(before, after, refs, alive, engine._offload, f"Qwen3TTSModel ({names})")
    if offloaded != 0:
        verdict = "MISMATCH resident_bytes not 0 while offloaded; " + verdict
    return (
        f"{verdict}; {len(before)} samples ({device}); resident_bytes {resident} -> {offloaded} while offloaded ->"
        f" {engine.resident_bytes()}; not covered: text tokenization (a fixed-ids stand-in)"
    )


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
