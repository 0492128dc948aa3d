"""llama-cpp-python's OpenAI server (``llama_cpp.server``) with every call into the model on one thread.

``python -m services.brain.llama_server ARGS`` takes the arguments of ``python -m llama_cpp.server`` and runs it
(services/brain/server.py execs it). The server hands each model call to Starlette's thread pool: the completion
to one worker, then each streamed chunk's ``next()`` to whichever worker is idle, so a reply's tokens were computed
by two or more threads in turn. llama.cpp's CPU backend runs on OpenMP, which keeps a team of threads per calling
thread, and with the brain's OMP_WAIT_POLICY=PASSIVE (server.py says why) a token computed on another thread than
the one before took three times as long: SmolLM2-135M, 2 threads, 2-core Intel Xeon, 2026-11-27, 33.5 ms a token
against 11.4 ms, the first token 100 against 52 ms (``python -m bench.brain_threads``, 08:18 UTC); the stock server,
with 4 streaming requests at once, 23.6 ms against 12.3 ms (docs/conversation.md#the-brain). Here the two functions ``llama_cpp.server.app`` calls for
that (imported there from ``starlette.concurrency``) are replaced by ones that run on a single dedicated thread.
The server already lets one request use the model at a time (its llama lock), so one thread costs no parallelism.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

LLAMA_THREAD = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
_EXHAUSTED = object()


async def run_on_llama_thread(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``starlette.concurrency.run_in_threadpool``, on the model's one thread."""
    return await asyncio.get_running_loop().run_in_executor(LLAMA_THREAD, functools.partial(func, *args, **kwargs))


async def iterate_on_llama_thread(iterator: Iterator[T]) -> AsyncIterator[T]:
    """``starlette.concurrency.iterate_in_threadpool``, each ``next()`` on the model's one thread."""
    while True:
        item = await run_on_llama_thread(next, iterator, _EXHAUSTED)
        if item is _EXHAUSTED:
            return
        yield item


def install() -> None:
    """Route llama_cpp.server.app's model calls to the one thread (before it builds the app)."""
    import llama_cpp.server.app as app

    for name in ("run_in_threadpool", "iterate_in_threadpool"):
        if not hasattr(app, name):  # a llama-cpp-python that no longer calls them: say so rather than run slow
            raise RuntimeError(f"llama_cpp.server.app has no {name}; services/brain/llama_server.py needs updating")
    app.run_in_threadpool = run_on_llama_thread
    app.iterate_in_threadpool = iterate_on_llama_thread


def main() -> None:
    install()
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
