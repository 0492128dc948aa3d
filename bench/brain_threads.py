"""Does it matter which thread runs the brain's model? llama.cpp + SmolLM2-135M (the CPU brain), 2 threads, with the
brain's OpenMP settings (OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=10000: services/brain/server.py).

1. In process: a streamed reply whose chunks are all pulled by one thread, against one whose chunks are pulled by
   two threads in turn (what llama-cpp-python's server does when its Starlette thread pool hands each ``next()``
   to whichever worker is idle). Per-token time inside a reply and the first token, medians.
2. Through HTTP: the stock server (``python -m llama_cpp.server``) and the fleet's (``python -m
   services.brain.llama_server``: every model call on one thread), each answering 4 streaming requests at once,
   three rounds, while a client polls ``GET /v1/models`` (as readiness checks do). Per-token time inside a reply.
   The stock server's result varies from run to run: it depends on which workers the pool happened to use.

Run: ``python -m bench.brain_threads`` (about a minute). Not part of ``make bench``; docs/conversation.md#the-brain
quotes a run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before llama_cpp loads libgomp, as the brain member sets them
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

SYSTEM = "You are a friendly voice assistant. Answer in one or two short sentences. Do not use lists or emojis."
LINES = ["How far away is the airport?", "Do I need an umbrella today?", "Where did I park my car?"]
MAX_TOKENS = 16


def in_process() -> None:
    import llama_cpp

    from services.brain.server import smollm2_path

    llm = llama_cpp.Llama(
        str(smollm2_path()), n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False, logits_all=False
    )
    one = concurrent.futures.ThreadPoolExecutor(1)
    other = concurrent.futures.ThreadPoolExecutor(1)
    for mode in ("one thread", "two threads in turn"):
        per_token, first = [], []
        for _ in range(4):
            for line in LINES:
                messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": line}]
                chunks = llm.create_chat_completion(messages, stream=True, max_tokens=MAX_TOKENS, seed=1, temperature=0)
                t0, times, i = time.perf_counter(), [], 0
                while True:
                    pool = other if mode != "one thread" and i % 2 else one
                    i += 1
                    chunk = pool.submit(next, chunks, None).result()
                    if chunk is None:
                        break
                    if chunk["choices"][0]["delta"].get("content"):
                        times.append(time.perf_counter() - t0)
                first.append(times[0])
                per_token.append((times[-1] - times[0]) / (len(times) - 1))
        print(
            f"in process, {mode:<20}: per token {1000 * statistics.median(per_token):5.1f} ms, first token"
            f" {1000 * statistics.median(first):4.0f} ms (n={len(first)})",
            flush=True,
        )


async def _stream(client, line: str) -> float:
    body = {
        "model": "brain",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": line}],
        "stream": True,
        "max_tokens": 24,
        "seed": 1,
        "temperature": 0.7,
    }
    times = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for text in response.aiter_lines():
            if text.startswith("data:") and '"content"' in text:
                times.append(time.perf_counter())
    return (times[-1] - times[0]) / (len(times) - 1)


async def _load(base_url: str) -> list[float]:
    import httpx

    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        out: list[float] = []
        for _ in range(3):
            asking = asyncio.gather(*(_stream(client, LINES[i % len(LINES)]) for i in range(4)))
            while not asking.done():
                await client.get("/v1/models")
                await asyncio.sleep(0.05)
            out += await asking
        return out


def through_http() -> None:
    import httpx

    from services.brain.server import smollm2_path

    for module in ("llama_cpp.server", "services.brain.llama_server"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen(
            [sys.executable, "-m", module, "--model", str(smollm2_path()), "--model_alias", "brain"]
            + ["--port", str(port), "--n_ctx", "2048", "--n_threads", "2", "--n_threads_batch", "2"]
            + ["--verbose", "False", "--interrupt_requests", "False", "--logits_all", "False"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base_url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{base_url}/v1/models", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit(f"{module} did not start")
                time.sleep(0.2)
            per_token = asyncio.run(_load(base_url))
            print(
                f"HTTP, 4 streams at once, {module:<28}: per token {1000 * statistics.median(per_token):5.1f} ms"
                f" median, {1000 * max(per_token):5.1f} ms worst reply (n={len(per_token)})",
                flush=True,
            )
        finally:
            server.terminate()
            server.wait(10)


def main() -> None:
    from bench.harness import machine

    print(machine(), flush=True)
    in_process()
    through_http()


if __name__ == "__main__":
    main()
