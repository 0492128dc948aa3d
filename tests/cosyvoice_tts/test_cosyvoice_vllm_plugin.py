"""CosyVoice3's LM class reaches vLLM's spawned engine core through a ``vllm.general_plugins`` entry point
(services/cosyvoice_tts/vllm_plugin.py). vLLM is not installed here (CUDA wheels): the fresh process gets a stand-in
``vllm`` package, a test double at that library boundary with ModelRegistry's two calls the plugin makes
(``get_supported_archs``, ``register_model``); the entry point is loaded the way vLLM's ``load_general_plugins``
loads it (importlib.metadata's EntryPoint.load, then the call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STAND_IN_VLLM = '''
"""Test double of vllm (not installable here): ModelRegistry with the calls the plugin makes."""
class _Registry:
    def __init__(self):
        self.models = {"Qwen2ForCausalLM": "vllm.model_executor.models.qwen2:Qwen2ForCausalLM"}

    def get_supported_archs(self):
        return self.models.keys()

    def register_model(self, arch, cls):
        self.models[arch] = cls

ModelRegistry = _Registry()
'''


def declared_plugins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project.get("entry-points", {}).get("vllm.general_plugins", {})


def test_the_entry_point_is_declared_for_vllms_general_plugins():
    assert declared_plugins() == {"voicefleet_cosyvoice3": "services.cosyvoice_tts.vllm_plugin:register"}


def test_loading_the_entry_point_in_a_fresh_process_registers_the_class_from_the_checkout(tmp_path):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text(STAND_IN_VLLM)
    repo = tmp_path / "CosyVoice"
    (repo / "third_party" / "Matcha-TTS").mkdir(parents=True)
    ((name, value),) = declared_plugins().items()
    child = textwrap.dedent(
        f"""
        import json, sys
        from importlib.metadata import EntryPoint
        EntryPoint({name!r}, {value!r}, "vllm.general_plugins").load()()
        EntryPoint({name!r}, {value!r}, "vllm.general_plugins").load()()  # vLLM may load plugins twice
        from vllm import ModelRegistry
        print(json.dumps({{"models": ModelRegistry.models, "path": sys.path[:2]}}))
        """
    )
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", VOICEFLEET_COSYVOICE_REPO_DIR=str(repo))
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["models"]["CosyVoice2ForCausalLM"] == "cosyvoice.vllm.cosyvoice2:CosyVoice2ForCausalLM"
    assert len(seen["models"]) == 2
    assert sorted(seen["path"]) == sorted([str(repo), str(repo / "third_party" / "Matcha-TTS")])


def test_the_gpu_image_installs_the_code_so_the_entry_point_is_in_its_metadata():
    dockerfile = (ROOT / "services" / "cosyvoice_tts" / "Dockerfile").read_text()
    assert "COPY pyproject.toml pyproject.toml" in dockerfile
    assert "pip install --no-cache-dir --no-deps -e ." in dockerfile
