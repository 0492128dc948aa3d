"""What the two added talk frames cost the choice: ToolChooser.choose (services/brain/tool_calls.py, the product's
own code) with the first two talk frames and with all four, interleaved, on one thread (the brain's default
n_threads), three tools (get_weather, book_table, set_timer), the frames' prompts prepared first. The words are the
tuning sets' (sets.py), 5 rounds. Its output is timing.txt.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/tools-choice-2026-11-30/timing.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from llama_cpp import Llama

sys.path.insert(0, str(Path(__file__).parent))
from sets import SETS, A  # noqa: E402

from services.brain import tool_calls  # noqa: E402
from services.brain.llama_server import chat_formatter  # noqa: E402
from services.brain.server import smollm2_path  # noqa: E402

ROUNDS = 5


def main() -> None:
    llm = Llama(model_path=str(smollm2_path()), n_ctx=2048, n_threads=1, verbose=False)
    chooser = tool_calls.ToolChooser(llm, chat_formatter(llm))
    tools = [
        {
            "type": "function",
            "function": {"name": n, "description": d, "parameters": {"type": "object", "properties": p}},
        }
        for n, d, p in A[0]
    ]
    words = [w for groups in SETS.values() for _, requests in groups for w, _ in requests][::7]
    every = tool_calls.CHAT_FRAMES
    kinds = {"2 talk frames": every[:2], "4 talk frames": every}
    for frames in kinds.values():
        tool_calls.CHAT_FRAMES = frames
        chooser.prepare(tools, "auto")
    took: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(ROUNDS):
        for w in words:
            for kind, frames in kinds.items():
                tool_calls.CHAT_FRAMES = frames
                started = time.perf_counter()
                chooser.choose(w, tools, "auto")
                took[kind].append((time.perf_counter() - started) * 1000)
    print(f"{len(words)} requests x {ROUNDS} rounds, one thread")
    for kind, ms in took.items():
        q = statistics.quantiles(ms, n=20)
        print(f"{kind}: choice p50 {statistics.median(ms):.0f} ms, p95 {q[18]:.0f} ms")


if __name__ == "__main__":
    main()
