"""vLLM general plugin: CosyVoice3's LM class registered with vLLM in every process vLLM starts.

With ``cosyvoice_tts.gpu.load_vllm: true`` the LM runs as the vLLM model ``CosyVoice2ForCausalLM``. vLLM 0.11 runs
its engine core in a spawned child process once CUDA is initialised; a registration made in the engine's own
process (as the repo's vllm_example.py does at import) is not there. vLLM's documented way for out-of-tree models
is a plugin: every ``vllm.general_plugins`` entry point is loaded in each of its processes (vllm.plugins
``load_general_plugins``). This one is declared in pyproject.toml; the GPU image installs the code with
``pip install --no-deps -e .`` so that the entry point is in its metadata.

The class is registered lazily (``"module:Class"``, which vLLM imports when it needs the architecture), so loading
the plugin initialises no CUDA. A spawned process does not inherit the engine's sys.path: the checkout of CosyVoice
(and its Matcha-TTS) comes from ``VOICEFLEET_COSYVOICE_REPO_DIR``, which the engine sets from
``cosyvoice_tts.gpu.repo_dir`` before it loads the model; children inherit the environment.
"""

from __future__ import annotations

import os
import sys

REPO_ENV = "VOICEFLEET_COSYVOICE_REPO_DIR"
ARCH = "CosyVoice2ForCausalLM"
TARGET = "cosyvoice.vllm.cosyvoice2:CosyVoice2ForCausalLM"


def repo_paths(repo: str) -> list[str]:
    return [repo, os.path.join(repo, "third_party", "Matcha-TTS")]


def register() -> None:
    """The entry point: put the CosyVoice checkout on sys.path and register the LM class (once per process)."""
    repo = os.environ.get(REPO_ENV, "")
    if repo:
        for path in repo_paths(repo):
            if os.path.isdir(path) and path not in sys.path:
                sys.path.insert(0, path)
    from vllm import ModelRegistry

    if ARCH not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCH, TARGET)
