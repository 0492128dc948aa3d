"""SmolLM2-135M prompt evaluation after a cached prefix, in process: ``prompt_eval.py THREADS`` (README.md here)."""

import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import llama_cpp  # noqa: E402 - after the OpenMP policy is set

from services.brain.server import smollm2_path  # noqa: E402

SYSTEM = b"<|im_start|>system\nYou are a friendly voice assistant. Answer in one or two short sentences.<|im_end|>\n"
TURN = (
    b"I was thinking we could meet at the station around nine and then walk to the museum together before it gets"
    b" too crowded.<|im_end|>\n<|im_start|>assistant\n"
)


def main() -> None:
    threads = int(sys.argv[1])
    llm = llama_cpp.Llama(str(smollm2_path()), n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False)
    base = llm.tokenize(SYSTEM + b"<|im_start|>user\n", special=True)
    tail = llm.tokenize(TURN, add_bos=False, special=True)
    for n in (1, 5, 10, 20, len(tail)):
        times = []
        for _ in range(5):
            llm.reset()
            llm.eval(base + tail[: len(tail) - n])
            t = time.perf_counter()
            llm.eval(tail[len(tail) - n :])
            times.append(time.perf_counter() - t)
        print(f"threads {threads} eval {n:2d} new tokens: {1000 * min(times):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
