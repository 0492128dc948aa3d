"""Does transcript -> first reply token grow with the conversation? llama.cpp + SmolLM2-135M (the CPU brain), in
process (the same ``Llama.create_chat_completion`` the server runs), with and without llama-cpp-python's prompt cache.

A conversation of TURNS user lines; each turn's prompt is the system prompt + every earlier turn (user + the model's
own reply) + the new line, as services/conversation/dialogue/ builds it. Scenarios: one session, and two sessions
whose turns alternate on the same model (A1 B1 A2 B2 ...: without a cache each prompt shares only the system prompt
with the one before, so the whole context is evaluated again). Measured per turn: time to the first streamed token
and the prompt tokens llama.cpp evaluated (``llama_perf_context``: n_p_eval).

Run: ``python -m bench.brain_prefix [CACHE_MIB [SESSIONS,...]]`` (default: no cache; 1 and 2 sessions).
"""

from __future__ import annotations

import statistics
import sys
import time

SYSTEM = "You are a friendly voice assistant. Answer in one short sentence."
LINES = [
    "Hello, my name is Alice.",
    "What is two plus two?",
    "What color is the sky?",
    "Can you recommend a good book?",
    "What is the capital of France?",
    "How are you today?",
    "What is my name?",
    "Tell me a fun fact about cats.",
]
MAX_TOKENS = 24
ROUNDS = 3


def load(cache_bytes: int):
    import llama_cpp

    from services.brain.server import smollm2_path

    llm = llama_cpp.Llama(str(smollm2_path()), n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False, seed=7)
    if cache_bytes:
        llm.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=cache_bytes))
    return llm


def turn(llm, messages: list[dict]) -> tuple[float, int, str]:
    """(seconds to the first token, prompt tokens evaluated, reply)."""
    import llama_cpp

    llama_cpp.llama_perf_context_reset(llm.ctx)
    t0 = time.perf_counter()
    first = None
    reply = ""
    for chunk in llm.create_chat_completion(messages, max_tokens=MAX_TOKENS, temperature=0.0, stream=True):
        text = chunk["choices"][0]["delta"].get("content") or ""
        if text and first is None:
            first = time.perf_counter() - t0
        reply += text
    evaluated = llama_cpp.llama_perf_context(llm.ctx).n_p_eval
    return first if first is not None else float("nan"), evaluated, reply.strip()


def conversation(llm, sessions: int) -> dict[int, list[tuple[float, int]]]:
    """Turn index -> [(ttft, evaluated)] over the sessions."""
    history: list[list[dict]] = [[] for _ in range(sessions)]
    out: dict[int, list[tuple[float, int]]] = {}
    for i in range(len(LINES)):
        for s in range(sessions):
            # each session says other things (the lines rotated), so two sessions share only the system prompt
            user = {"role": "user", "content": LINES[(i + 3 * s) % len(LINES)]}
            messages = [{"role": "system", "content": SYSTEM}, *history[s], user]
            ttft, evaluated, reply = turn(llm, messages)
            history[s] += [user, {"role": "assistant", "content": reply}]
            out.setdefault(i + 1, []).append((ttft, evaluated))
    return out


def main() -> None:
    cache_bytes = (int(sys.argv[1]) << 20) if len(sys.argv) > 1 else 0  # MiB
    session_counts = tuple(int(n) for n in sys.argv[2].split(",")) if len(sys.argv) > 2 else (1, 2)
    rows: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for _ in range(ROUNDS):
        for sessions in session_counts:
            llm = load(cache_bytes)  # a fresh model per conversation: nothing carried over
            for t, values in conversation(llm, sessions).items():
                rows.setdefault((sessions, t), []).extend(values)
            del llm
    import resource

    label = f"RAM cache {cache_bytes >> 20} MiB" if cache_bytes else "no cache"
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(f"{label}: peak RSS of this process {peak_mib} MiB (the model alone: ~200 MiB)", flush=True)
    for (sessions, t), values in sorted(rows.items()):
        if t not in (1, 2, 4, 8):
            continue
        ttft = statistics.median(v[0] for v in values) * 1000
        evaluated = statistics.median(v[1] for v in values)
        print(
            f"{label:<18} sessions {sessions} turn {t}: first token median {ttft:5.0f} ms, prompt tokens evaluated"
            f" median {evaluated:.0f} (n={len(values)})",
            flush=True,
        )


if __name__ == "__main__":
    main()
