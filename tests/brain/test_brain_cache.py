"""The brain keeps its prompt prefix cached (issue 23, item 4): ``brain.prompt_cache_mb`` turns on llama-cpp-python's
prompt cache in the server the fleet starts, and with it a session's next turn evaluates only its new tokens even
after another session's turn ran on the same model in between.

The server's own argument parser reads the command ``services.brain.server`` builds, and the server's own loader makes the
model from those settings (llama_cpp.server.model.LlamaProxy.load_llama_from_model_settings), so this checks what
the running brain does; "evaluated" is llama.cpp's count of prompt tokens it ran (llama_perf_context), not a time.
"""

from __future__ import annotations

import argparse

import pytest

from services.brain.server import server_command
from services.common.config import load_config

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (services/brain/requirements-cpu.txt)"
)

SYSTEM = "You are a friendly voice assistant. Answer in one short sentence."


def server_settings(prompt_cache_mb: int):
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, Settings

    config = load_config(None)
    config.brain = config.brain.model_copy(update={"prompt_cache_mb": prompt_cache_mb, "n_ctx": 1024})
    argv = server_command(config)[3:]  # llama_cpp.server's arguments, after "python -m services.brain.llama_server"
    parser = argparse.ArgumentParser()
    add_args_from_model(parser, Settings)
    return parse_model_from_args(ModelSettings, parser.parse_args(argv))


def test_the_brain_server_is_started_with_its_prompt_cache():
    settings = server_settings(64)
    assert (settings.cache, settings.cache_type, settings.cache_size) == (True, "ram", 64 << 20)
    assert server_settings(0).cache is False  # 0 = off


def evaluated(llm, messages: list[dict]) -> tuple[int, str]:
    """Prompt tokens llama.cpp ran for this chat completion, and the reply."""
    llama_cpp.llama_perf_context_reset(llm.ctx)
    reply = llm.create_chat_completion(messages, max_tokens=12, temperature=0.0)["choices"][0]["message"]["content"]
    return llama_cpp.llama_perf_context(llm.ctx).n_p_eval, reply


def second_turn_of_a(prompt_cache_mb: int) -> int:
    """Sessions A and B alternate (A1, B1, A2) on one model loaded as the server loads it: tokens A2 evaluated."""
    from llama_cpp.server.model import LlamaProxy

    llm = LlamaProxy.load_llama_from_model_settings(server_settings(prompt_cache_mb))
    system = {"role": "system", "content": SYSTEM}
    a1 = {"role": "user", "content": "Hello, my name is Alice and I live in a small town by the sea."}
    _, reply = evaluated(llm, [system, a1])
    evaluated(llm, [system, {"role": "user", "content": "What is the capital of France, and why is it famous?"}])
    n, _ = evaluated(llm, [system, a1, {"role": "assistant", "content": reply}, {"role": "user", "content": "Hi!"}])
    return n


def test_a_session_resumes_its_own_prefix_after_another_sessions_turn():
    without_cache = second_turn_of_a(0)
    with_cache = second_turn_of_a(64)
    # Without the cache only the system prompt is shared with B1's prompt: A1's line and reply are evaluated again.
    # With it, A2 resumes from A1's cached state: its reply's end and the new line only.
    assert with_cache * 2 < without_cache, (with_cache, without_cache)
