"""The brain runs every model call on one thread (services/brain/llama_server.py).

llama-cpp-python's server hands each streamed chunk's ``next()`` to whichever Starlette worker thread is idle; with
several requests at once the model ran on several threads in turn, and llama.cpp's OpenMP backend (PASSIVE wait
policy) then took three times as long a token (``python -m bench.brain_threads``). The fleet's brain swaps those
two helpers of ``llama_cpp.server.app`` for ones bound to one thread. Checked here on the real server app with the
real model: the threads that ran llama.cpp's ``eval`` under concurrent streaming requests, not a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from services.brain import llama_server
from services.brain.server import server_command, smollm2_path
from services.cli.fleet import free_port
from services.common.config import load_config

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (services/brain/requirements-cpu.txt)"
)
pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed")
# CPU work with no clock in it: `make test` runs it in its background lane (scripts/test-lanes.sh).
pytestmark = pytest.mark.background


@contextlib.contextmanager
def serving(server):
    """The app under uvicorn on a free loopback port, in a thread of its own (as ``python -m llama_cpp.server`` runs
    it): its base URL."""
    import uvicorn

    port = free_port()
    runner = uvicorn.Server(uvicorn.Config(server, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        while not runner.started:
            time.sleep(0.02)
            assert thread.is_alive(), "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        runner.should_exit = True
        thread.join(10)


QUESTIONS = ["What is the capital of France?", "What color is the sky?", "Name a fruit.", "What is two plus two?"] * 2


def test_the_fleet_starts_the_one_thread_server():
    command = server_command(load_config(None))
    assert command[1:3] == ["-m", "services.brain.llama_server"]


async def test_calls_and_iterations_all_run_on_the_one_thread():
    def numbers(n):
        for i in range(n):
            yield i, threading.get_ident()

    async def drain(n):
        return [item async for item in llama_server.iterate_on_llama_thread(numbers(n))]

    results = await asyncio.gather(*(drain(5) for _ in range(4)))
    called = await llama_server.run_on_llama_thread(threading.get_ident)
    assert [[i for i, _ in r] for r in results] == [list(range(5))] * 4  # every item, in order, then the end
    threads = {t for r in results for _, t in r} | {called}
    assert len(threads) == 1 and threads != {threading.get_ident()}


@pytest.mark.timeout(180)
async def test_concurrent_streaming_requests_run_the_model_on_one_thread(monkeypatch):
    import anyio
    import httpx
    import llama_cpp.server.app as app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    for name in ("run_in_threadpool", "iterate_in_threadpool"):
        monkeypatch.setattr(app, name, getattr(app, name))  # put back after the test
    llama_server.install()

    threads: list[int] = []
    evaluate = llama_cpp.Llama.eval

    def recording_eval(self, tokens):
        threads.append(threading.get_ident())
        return evaluate(self, tokens)

    monkeypatch.setattr(llama_cpp.Llama, "eval", recording_eval)
    # n_threads 1, the shipped brain.n_threads: with 2 OpenMP threads on cores busy with the rest of `make test`
    # (its other lane), the four replies took over 180 s once (2026-11-29); 23 s on a quiet machine.
    model = ModelSettings(
        model=str(smollm2_path()), model_alias="brain", n_ctx=512, n_threads=1, verbose=False, logits_all=False
    )
    server = app.create_app(server_settings=ServerSettings(interrupt_requests=False), model_settings=[model])

    @server.get("/pool-work")
    async def pool_work() -> None:
        """Other work in the server's thread pool meanwhile, as FastAPI's synchronous dependencies (the server's
        settings, for each request) are: it holds a worker for a moment."""
        await anyio.to_thread.run_sync(time.sleep, 0.002)

    async def ask(client, question: str) -> str:
        body = {
            "model": "brain",
            "messages": [{"role": "user", "content": question}],
            "stream": True,
            "max_tokens": 24,
            "temperature": 0.0,
        }
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            return "".join([line async for line in response.aiter_lines() if '"content"' in line])

    with serving(server) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
            asking = asyncio.gather(*(ask(client, q) for q in QUESTIONS))
            while not asking.done():
                await asyncio.gather(*(client.get("/pool-work") for _ in range(4)))
            replies = await asking
    assert all(replies), replies  # every request streamed text
    assert len(threads) >= 4 * 2  # each request's prompt and its tokens went through eval
    assert len(set(threads)) == 1, f"the model ran on {len(set(threads))} threads"
