"""`make gpu-smoke` (bench/gpu_smoke.py) on a machine without a card: every step skips, its reason naming what is
missing (the card, or the stack it runs in), and the report (JSON + markdown) lists every step's status. Plus the
smoke's pure helpers: the tiny vLLM model directory it writes, the plugin's dist-info, the memory share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_smoke

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "gen" / "python")])


@pytest.mark.skipif(gpu_smoke.card() is not None, reason="this machine has a card: `make gpu-smoke` runs for real")
def test_without_a_card_or_stacks_every_step_skips_naming_what_is_missing(tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    env.pop("GPU_SMOKE_ASR_DEVICE", None)
    env["GPU_SMOKE_TORCH_PYTHON"] = str(tmp_path / "absent" / "python")  # no stack venvs, whatever build/ holds
    for stack in ("cosyvoice_tts", "qwen_tts", "qwen_tts_vllm_omni"):
        env[f"GPU_SMOKE_{stack.upper()}_PYTHON"] = str(tmp_path / "absent" / "python")
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "smoke.json").read_text())
    assert report["card"] is None
    steps = report["steps"]
    assert list(steps) == list(gpu_smoke.STEPS)
    assert all(s["status"] == "skipped" for s in steps.values()), steps
    # the fleet's venv has CTranslate2 but no card; every other step has no Python with its libraries
    assert steps["asr"]["why"].startswith("no card: CTranslate2 sees no CUDA device")
    assert steps["torch_offload"]["why"].startswith("no stack: no Python with torch")
    assert steps["gpu_checks"]["why"].startswith("no stack: no Python with torch")
    assert steps["whisper_cuda"]["why"].startswith("no card: CTranslate2 sees no CUDA device")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert report["commit"].startswith(head), report["commit"]  # issue 46: each report records its commit
    for name, stack in (
        ("vllm_cosyvoice", "cosyvoice_tts"),
        ("tiny_qwen_tts", "qwen_tts"),
        ("tiny_cosyvoice3", "cosyvoice_tts"),
        ("vllm_omni", "qwen_tts_vllm_omni"),
    ):
        why = steps[name]["why"]
        assert why.startswith(f"no stack: no {stack} venv") and f"make check-gpu-stacks STACKS={stack}" in why, why
    markdown = (out / "smoke.md").read_text()
    assert markdown.startswith("# GPU smoke: no card") and f"commit {report['commit']}" in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| step")]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == list(gpu_smoke.STEPS)
    assert all(" | skipped | no " in row for row in rows)


def test_the_vllm_model_directory_is_a_tiny_cosyvoice2_lm_with_no_tokenizer(tmp_path):
    from services.cosyvoice_tts.vllm_plugin import ARCH

    directory = gpu_smoke.write_vllm_model_dir(tmp_path / "vllm")
    assert sorted(p.name for p in directory.iterdir()) == ["config.json"]  # skip_tokenizer_init: no tokenizer read
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == [ARCH] and config["model_type"] == "qwen2"
    assert config["vocab_size"] == 6561 + 200  # CosyVoice3's speech tokens and its 200 stop tokens
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
    assert config["tie_word_embeddings"] is False  # the export's lm_head is the LM decoder, not the embedding
    bigger = json.loads(
        (gpu_smoke.write_vllm_model_dir(tmp_path / "b", num_hidden_layers=4) / "config.json").read_text()
    )
    assert bigger["num_hidden_layers"] == 4


def test_the_memory_share_is_4_gib_of_the_card_at_most_cosyvoices_own_0_2():
    gib = 1 << 30
    assert gpu_smoke.vllm_memory_fraction(80 * gib) == 0.05
    assert gpu_smoke.vllm_memory_fraction(24 * gib) == 0.167
    assert gpu_smoke.vllm_memory_fraction(8 * gib) == 0.2


def test_the_plugin_dist_info_exposes_the_entry_point_in_a_fresh_process(tmp_path):
    """What vLLM's load_general_plugins finds in each of its processes: pyproject.toml's entry point."""
    directory = gpu_smoke.plugin_dist_info(tmp_path / "plugin")
    code = (
        "from importlib.metadata import distribution;"
        "d = distribution('voicefleet-gpu-smoke');"
        "print(d.locate_file(''), [(e.group, e.name, e.value) for e in d.entry_points])"
    )
    env = dict(os.environ, PYTHONPATH=str(directory))
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    where, points = found.stdout.strip().split(" ", 1)
    assert where == str(directory)
    assert (
        points == "[('vllm.general_plugins', 'voicefleet_cosyvoice3', 'services.cosyvoice_tts.vllm_plugin:register')]"
    )


def test_a_stack_python_is_the_named_one_or_the_built_venv(tmp_path, monkeypatch):
    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv("GPU_SMOKE_QWEN_TTS_PYTHON", str(python))
    assert gpu_smoke.stack_python("qwen_tts") == str(python)
    monkeypatch.setenv("GPU_SMOKE_QWEN_TTS_PYTHON", str(tmp_path / "absent"))
    assert gpu_smoke.stack_python("qwen_tts") is None


def test_the_asr_step_runs_the_gpu_engine_with_the_precision_of_its_device():
    assert gpu_smoke.asr_config("cuda", "/m") == {
        "engine": "gpu",
        "gpu": {"model_dir": "/m", "device": "cuda", "compute_type": "float16", "num_workers": 1},
    }
    assert gpu_smoke.asr_config("cpu", "/m")["gpu"]["compute_type"] == "int8"


def test_the_markdown_report_has_a_row_per_step_with_its_status():
    report = {
        "card": {"name": "NVIDIA H100 80GB HBM3", "total_bytes": 80 << 30},
        "when": "2026-11-25 17:00 UTC",
        "host": "h",
        "steps": {"asr": {"status": "ran", "wer": 0.02}, "vllm_omni": {"status": "skipped", "why": "no a|b"}},
    }
    text = gpu_smoke.markdown(report)
    assert text.startswith("# GPU smoke: NVIDIA H100 80GB HBM3")
    assert '| asr | ran | {"wer": 0.02} |' in text
    assert "| vllm_omni | skipped | no a/b |" in text
