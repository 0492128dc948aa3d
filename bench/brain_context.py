"""A long conversation through the dialogue's bounded ``Context`` (services/conversation/dialogue/context.py): time to the
brain's first token per turn, the context dropping one turn whenever it is over a bound against dropping down to half
of both bounds at once (``Context.TRIM_TO``). llama.cpp + SmolLM2-135M in process (the same
``Llama.create_chat_completion`` the server runs), 2 threads, the server's 64 MiB RAM prompt cache, greedy 48-token
replies, ``Context(16, 3000)`` as moss_sts's defaults (docs/conversation.md#the-brain). Not part of `make bench`:

    python -m bench.brain_context [TURNS]
"""

from __future__ import annotations

import statistics
import sys
import time

from bench.harness import machine
from services.conversation.dialogue import Context, Message

SYSTEM = "You are a helpful voice assistant. Answer in one or two short sentences."
LINES = (
    "How far away is the airport?",
    "Can you turn the music down?",
    "I would like to find a quiet coffee shop where I can sit and read for an hour.",
    "Could you remind me to pick up the dry cleaning before the shop closes tomorrow?",
    "We are trying to decide whether the red sofa or the grey one fits the room better.",
    "Where did I park my car?",
    "Please set an alarm for seven.",
    "My neighbour asked me to look after her two cats while she is away next week.",
)


class OneAtATime(Context):
    """The trim before 2026-11-27: the oldest message dropped while over either bound."""

    def _trim(self) -> None:
        while len([m for m in self.messages if m.role == "user"]) > self.max_turns:
            self.messages.popleft()
        while len(self.messages) > 1 and sum(m.size() for m in self.messages) > self.max_chars:
            self.messages.popleft()
        while self.messages and self.messages[0].role != "user":
            self.messages.popleft()


def first_tokens(context: Context, turns: int) -> list[float]:
    import llama_cpp

    from services.brain.server import smollm2_path

    llm = llama_cpp.Llama(str(smollm2_path()), n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False)
    llm.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=64 << 20))
    out = []
    for i in range(turns):
        context.add(Message("user", LINES[i % len(LINES)]))
        t0, first, text = time.perf_counter(), None, ""
        for chunk in llm.create_chat_completion(context.chat(SYSTEM), stream=True, max_tokens=48, temperature=0):
            delta = chunk["choices"][0]["delta"].get("content")
            if delta:
                first = first if first is not None else time.perf_counter() - t0
                text += delta
        context.add(Message("assistant", text))
        out.append(first * 1000)
    return out


def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    started = machine()
    for name, context in (("one at a time", OneAtATime(16, 3000)), ("halving", Context(16, 3000))):
        ms = first_tokens(context, turns)
        late = sorted(ms[10:])
        print(
            f"{name}: first token per turn {[round(x) for x in ms]}\n  turns 2-10 median"
            f" {statistics.median(ms[1:10]):.0f} ms; turns 11-{turns} median {statistics.median(late):.0f} ms,"
            f" p95 {late[round(0.95 * (len(late) - 1))]:.0f} ms"
        )
    print(f"machine {started}; load after {machine()['load_average_1min']}")


if __name__ == "__main__":
    main()
