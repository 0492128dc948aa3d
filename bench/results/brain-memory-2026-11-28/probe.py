"""Probe (issue 45 item 5): the brain's memory as its prompt cache fills. The model is loaded as the fleet's server
loads it (tests/brain/test_brain_cache.server_settings: our command line through llama_cpp.server's own parser and
loader, prompt_cache_mb 64), then 4 sessions alternate 10 turns each (greedy 48-token replies); the process's PSS
(/proc/self/smaps_rollup) and the bytes the cache's entries hold are printed every 10 replies.

    python probe.py before|after     (after: services.brain.llama_server.cache_states_without_logits installed)
"""

import sys


def pss_mb() -> float:
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main(mode: str) -> None:
    from llama_cpp.server.model import LlamaProxy

    from tests.brain.test_brain_cache import SYSTEM, server_settings

    if mode == "after":
        from services.brain.llama_server import cache_states_without_logits

        cache_states_without_logits()
    llm = LlamaProxy.load_llama_from_model_settings(server_settings(64).model_copy(update={"n_ctx": 2048}))
    print(f"{mode}: loaded, PSS {pss_mb():.0f} MB", flush=True)
    sessions = [[{"role": "system", "content": SYSTEM}] for _ in range(4)]
    lines = [
        "Tell me about your favourite city and why you like it.",
        "What should I cook for dinner tonight?",
        "How far away is the moon from the earth?",
        "Can you recommend a good book about space travel?",
        "Why is the sky blue during the day?",
        "What is a good name for a small grey cat?",
        "How do I keep my plants alive in winter?",
        "What is the best way to learn a new language?",
        "Tell me something interesting about octopuses.",
        "How long does it take to boil an egg?",
    ]
    replies = 0
    for turn in range(10):
        for s, messages in enumerate(sessions):
            messages.append({"role": "user", "content": lines[(turn + s) % len(lines)]})
            out = llm.create_chat_completion(messages, max_tokens=48, temperature=0.0)
            messages.append({"role": "assistant", "content": out["choices"][0]["message"]["content"]})
            replies += 1
        entries = list(llm.cache.cache_state.values())
        held = sum(len(e.llama_state) + e.scores.nbytes + e.input_ids.nbytes for e in entries) / 2**20
        print(
            f"{mode}: {replies} replies, PSS {pss_mb():.0f} MB, cache: {len(entries)} entries, counted"
            f" {llm.cache.cache_size / 2**20:.0f} MiB, held {held:.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1])
