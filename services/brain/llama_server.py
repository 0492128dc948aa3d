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

Function calling (``tools``, ``tool_choice`` and function-call history in chat completions) is answered by
services/brain/tool_calls.py in front of the stock route.

It also serves ``POST /v1/end_of_turn`` (``{"model", "messages"}`` -> ``{"logprob", "token", "prompt_tokens"}``): the
log probability that the chat template's end-of-message token follows the last user message's words, for the
dialogue's reading of a pause (services/conversation/turn_words.py). It renders the messages with the model's own
chat template (the one its chat completions use), evaluates the prompt up to the user's last word through the
library's ``create_completion`` (so its prompt cache serves it and keeps the state for the reply that follows), and
reads the next token's logits in a logits processor: nothing is sampled that anyone sees.

The model serves one request at a time (the server's model lock). Here the lock is a queue in order of the kind a
request names in its ``X-Voicefleet-Request-Kind`` header (services/common/brain_requests.py): a committed turn's
reply goes before held replies, readings and read-aheads of every process (moss_sts's sessions, the router's
fallback cascade), oldest first within a kind; a request without the header (another client) counts as a turn.
The stock lock serves whoever asked first, so a turn waited behind other sessions' speculative work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from services.common.brain_requests import KIND_HEADER, QUEUE_PATH, TURN, RankedPlaces

T = TypeVar("T")
# Stands in for the user's words while the chat template is rendered: what precedes it is the prompt up to the words,
# what follows begins with the template's end-of-message token.
WORDS_MARK = "\u2063voicefleet-words\u2063"
# The marks that close a sentence: with the end-of-message token, what "the words end here" reads as.
SENTENCE_MARKS = (".", "?", "!")

LLAMA_THREAD = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
_EXHAUSTED = object()
# The kind the request being handled named (KIND_HEADER), set by KindMiddleware for the model's queue.
REQUEST_KIND: contextvars.ContextVar[str] = contextvars.ContextVar("voicefleet_request_kind", default=TURN)
MODEL_PLACE = RankedPlaces(1)  # llama_cpp.server's model lock, in order of kind


class KindMiddleware:
    """Reads a request's kind from its KIND_HEADER into REQUEST_KIND (a plain ASGI middleware: the streamed
    response's sender runs in the request's context and sees it)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            wanted = KIND_HEADER.lower().encode()
            kind = next((v.decode(errors="replace") for k, v in scope["headers"] if k == wanted), TURN)
            REQUEST_KIND.set(kind)
        await self.app(scope, receive, send)


async def get_llama_proxy_in_order():
    """``llama_cpp.server.app.get_llama_proxy`` with its lock replaced by MODEL_PLACE: the model, once this
    request's turn comes (module doc)."""
    import llama_cpp.server.app as app

    kind = REQUEST_KIND.get()
    async with MODEL_PLACE.place(lambda: kind):
        yield app._llama_proxy  # noqa: SLF001 - the proxy the stock dependency yields


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


class TurnRequestError(ValueError):
    """A /v1/end_of_turn request this model cannot judge (HTTP 400 with the message)."""


def chat_formatter(llama):
    """The model's own chat template as a formatter, built the way ``Llama`` builds its chat handler for it."""
    from llama_cpp import llama_chat_format

    if llama.chat_format != "chat_template.default" or "tokenizer.chat_template" not in llama.metadata:
        raise TurnRequestError(
            f"the end-of-turn reading needs the model's own chat template; this server uses chat format"
            f" {llama.chat_format!r}"
        )
    vocab = llama._model  # noqa: SLF001 - the library's own token texts, as Llama.__init__ reads them
    eos, bos = llama.token_eos(), llama.token_bos()
    return llama_chat_format.Jinja2ChatFormatter(
        template=llama.metadata["tokenizer.chat_template"],
        eos_token=vocab.token_get_text(eos) if eos != -1 else "",
        bos_token=vocab.token_get_text(bos) if bos != -1 else "",
    )


def around_words(formatter, messages: list[dict]) -> tuple[str, str]:
    """The chat template's text before and after the last message's words (``messages[-1]`` is the user's; its
    content is not read): the prompt up to the words, and what the template puts after them."""
    rendered = formatter(messages=[*messages[:-1], {"role": "user", "content": WORDS_MARK}]).prompt
    before, mark, after = rendered.partition(WORDS_MARK)
    if not mark:
        raise TurnRequestError("the chat template does not show the user's message as written")
    return before, after


def end_of_turn_logprob(llama, messages: list[dict]) -> dict:
    """log P(the template's end-of-message token | the conversation up to the last user message's words)."""
    import numpy as np
    from llama_cpp import LogitsProcessorList

    if not messages or messages[-1].get("role") != "user" or not isinstance(messages[-1].get("content"), str):
        raise TurnRequestError("messages: the last message must be the user's, with text content")
    words = messages[-1]["content"]
    if not words.strip():
        raise TurnRequestError("messages: the user's last message is empty")
    before, after = around_words(chat_formatter(llama), messages)
    ends = llama.tokenize(after.encode(), add_bos=False, special=True)
    if not ends:
        raise TurnRequestError("the chat template puts nothing after the user's message")
    end_token = ends[0]
    marks = sorted({llama.tokenize(m.encode(), add_bos=False, special=False)[0] for m in SENTENCE_MARKS})
    seen: list[tuple[float, float]] = []

    def read_next(_input_ids, scores):
        logits = np.asarray(scores, dtype=np.float64)
        logp = logits - logits.max()
        logp -= np.log(np.exp(logp).sum())
        ending = logp[[end_token, *marks]]
        seen.append((float(logp[end_token]), float(np.log(np.exp(ending).sum()))))
        return scores

    prompt = llama.tokenize((before + words).encode(), add_bos=False, special=True)
    llama.create_completion(
        prompt=prompt, max_tokens=1, temperature=0.0, logits_processor=LogitsProcessorList([read_next])
    )
    if not seen:
        raise RuntimeError("llama-cpp-python sampled without calling the logits processor")
    return {
        "logprob": seen[0][0],
        "sentence_end_logprob": seen[0][1],
        "token": llama.detokenize([end_token], special=True).decode(errors="replace"),
        "prompt_tokens": len(prompt),
    }


def add_turn_route(app) -> None:
    """``POST /v1/end_of_turn`` on the server's app, under its llama lock, on the model's one thread; and ``GET
    /v1/queue``, what the model's queue holds now (brain_requests.queue_report)."""
    from fastapi import Body, Depends, HTTPException
    from llama_cpp.server.app import get_llama_proxy

    @app.get(QUEUE_PATH)
    async def queue() -> dict:
        return MODEL_PLACE.report()

    @app.post("/v1/end_of_turn")
    async def end_of_turn(body: dict = Body(...), proxy=Depends(get_llama_proxy)) -> dict:  # noqa: B008 - FastAPI
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise HTTPException(status_code=400, detail="messages: must be a list of chat messages")
        llama = proxy(body.get("model"))
        try:
            return await run_on_llama_thread(end_of_turn_logprob, llama, messages)
        except TurnRequestError as e:
            raise HTTPException(status_code=400, detail=str(e)) from None


def cache_states_without_logits() -> None:
    """Prompt-cache entries without the logits nothing reads. ``Llama.save_state`` copies ``Llama._scores`` (the
    first n_tokens rows of its logits array) into every state the RAM prompt cache keeps. With ``logits_all`` off (the
    brain's setting: server.py) that array has n_batch rows (512) which nothing fills or reads (sampling reads
    llama.cpp's own logits), and a row is the vocabulary's logits: SmolLM2, 49,152 x 4 B = 192 KiB, up to 96 MiB per
    entry, while the cache's bound (``brain.prompt_cache_mb``) counts only llama.cpp's state (~23 KB a token). The
    brain grew from 223 to 1,244 MB over ~35 conversation turns with a 64 MiB bound (issue 45). Here a state of a
    model without logits_all is saved with one row (``load_state`` broadcasts it over the rows it restores, as it
    restored rows nothing reads)."""
    from llama_cpp.llama import Llama

    if getattr(Llama.save_state, "voicefleet_without_logits", False):
        return
    save_state = Llama.save_state

    def save_state_without_logits(self):
        if self._logits_all:  # noqa: SLF001 - the library's own flag: logits are kept and read then
            return save_state(self)
        kept = self.scores
        self.scores = kept[:1]  # ``_scores`` (what save_state copies) is ``scores[:n_tokens]``: one row at most
        try:
            return save_state(self)
        finally:
            self.scores = kept

    save_state_without_logits.voicefleet_without_logits = True
    Llama.save_state = save_state_without_logits


def install() -> None:
    """Route llama_cpp.server.app's model calls to the one thread, its model lock through the queue in order of kind,
    and add the end-of-turn route (before the server's ``__main__`` imports ``create_app``)."""
    import llama_cpp.server.app as app

    for name in ("run_in_threadpool", "iterate_in_threadpool", "create_app", "get_llama_proxy", "_llama_proxy"):
        if not hasattr(app, name):  # a llama-cpp-python that no longer calls them: say so rather than run slow
            raise RuntimeError(f"llama_cpp.server.app has no {name}; services/brain/llama_server.py needs updating")
    cache_states_without_logits()
    app.run_in_threadpool = run_on_llama_thread
    app.iterate_in_threadpool = iterate_on_llama_thread
    stock_proxy = app.get_llama_proxy
    app.get_llama_proxy = get_llama_proxy_in_order  # streamed replies take the model through this module global
    create_app = app.create_app

    def create_app_with_turn_route(*args, **kwargs):
        server = create_app(*args, **kwargs)
        server.dependency_overrides[stock_proxy] = get_llama_proxy_in_order  # every other route's Depends
        server.add_middleware(KindMiddleware)
        add_turn_route(server)
        from services.brain.tool_calls import ToolCallMiddleware

        server.add_middleware(
            ToolCallMiddleware,
            model_of=lambda name: app._llama_proxy(name),  # noqa: SLF001 - the proxy the stock dependency yields
            run=run_on_llama_thread,
            place=MODEL_PLACE.place,
            formatter_of=chat_formatter,
        )
        return server

    app.create_app = create_app_with_turn_route


def main() -> None:
    from services.common.server import die_with_supervisor

    die_with_supervisor()  # a worker of the brain's front (front.py) dies with it
    install()
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
