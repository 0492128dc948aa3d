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

# CPU work with no clock in it: `make test` runs it in its background lane (scripts/test-lanes.sh).
pytestmark = pytest.mark.background

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


@pytest.mark.timeout(180)
async def test_a_read_ahead_leaves_the_turn_only_its_last_words(monkeypatch):
    """The conversation's read-ahead (ChatBrain.read_ahead, docs/conversation.md#reading-ahead) on the server as the
    fleet starts it (prompt cache on): after the draft "… at seven this" was read, the turn's request for "… at seven
    this evening." evaluates a few tokens; a turn of the same length read cold evaluates all of its words."""
    import llama_cpp.server.app as app

    from services.brain.server import smollm2_path
    from services.common.engines import Sampling
    from services.conversation.brain import ChatBrain
    from tests.brain.test_brain_one_thread import serving

    evaluated_tokens: list[int] = []
    evaluate = llama_cpp.Llama.eval

    def counting_eval(self, tokens):
        evaluated_tokens.append(len(tokens))
        return evaluate(self, tokens)

    monkeypatch.setattr(llama_cpp.Llama, "eval", counting_eval)
    model = server_settings(64).model_copy(update={"model": str(smollm2_path()), "model_alias": "brain"})
    from llama_cpp.server.settings import ServerSettings

    server = app.create_app(server_settings=ServerSettings(interrupt_requests=False), model_settings=[model])
    context = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hello, my name is Alice."},
        {"role": "assistant", "content": "Hello Alice, how can I help you today?"},
    ]

    def said(text: str) -> list[dict]:
        return [*context, {"role": "user", "content": text}]

    sampling = Sampling(temperature=0.0, top_p=1.0, seed=1)

    async def turn(brain: ChatBrain, text: str) -> int:
        """Prompt and reply tokens llama.cpp ran for the turn's streamed reply (a few reply tokens at most)."""
        before = len(evaluated_tokens)
        reply = "".join([piece async for piece in brain.stream_chat(said(text), sampling, max_tokens=2)])
        assert reply.strip()
        return sum(evaluated_tokens[before:])

    with serving(server) as base_url:
        brain = ChatBrain(f"{base_url}/v1", "brain", "test")
        try:
            await turn(brain, "Thank you.")  # the context is in the cache now, as after a session's first turn
            cold = await turn(brain, "Could you tell me which train goes to the airport early on Sunday morning?")
            before = len(evaluated_tokens)
            await brain.read_ahead(said("I would like to book a table for two people at seven this"))
            read = sum(evaluated_tokens[before:])
            warm = await turn(brain, "I would like to book a table for two people at seven this evening.")
        finally:
            await brain.close()
    # The cold turn ran its ~15 words' tokens and the chat template's; the read-ahead ran the draft's; the warm turn
    # ran what follows the draft ("evening.", the template's end) and its reply's first token.
    assert read >= 12, read
    assert warm * 2 < cold, (warm, cold)


def test_the_prompt_cache_holds_no_more_than_its_bound_says():
    """What the cache's bound counts (llama.cpp's state) is what its entries hold: each kept state carries no rows of
    logits that nothing reads (services/brain/llama_server.cache_states_without_logits; before it, up to 96 MiB an
    entry beside a bound of 64 MiB in all), and the model still answers from a restored state as before."""
    from llama_cpp.server.model import LlamaProxy

    from services.brain.llama_server import cache_states_without_logits

    cache_states_without_logits()
    llm = LlamaProxy.load_llama_from_model_settings(server_settings(64))
    system = {"role": "system", "content": SYSTEM}
    questions = [
        "What is the capital of France, and why is it famous?",
        "Can you recommend a good book about the history of space travel?",
        "How do I make a cup of green tea without it tasting bitter?",
        "Hello, my name is Alice and I live in a small town by the sea.",
    ]
    replies = [evaluated(llm, [system, {"role": "user", "content": q}])[1] for q in questions]
    entries = list(llm.cache.cache_state.values())
    assert len(entries) >= len(questions)  # a state per reply, kept
    row = llm.n_vocab() * 4
    held = sum(len(state.llama_state) + state.scores.nbytes + state.input_ids.nbytes for state in entries)
    counted = llm.cache.cache_size
    assert all(state.scores.nbytes <= row for state in entries), [state.scores.shape for state in entries]
    assert held <= counted + len(entries) * (row + llm.n_ctx() * 4), (held, counted)
    # A restored state still answers: the first question again resumes from its cached state (a few tokens run).
    n, again = evaluated(llm, [system, {"role": "user", "content": questions[0]}])
    assert again.strip() and all(r.strip() for r in replies)
    assert n < 5, f"the cached state was not used: {n} prompt tokens evaluated"
