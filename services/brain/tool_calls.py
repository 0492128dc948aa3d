"""OpenAI function calling on the in-box brain: ``tools`` and ``tool_choice`` in ``POST /v1/chat/completions``
(docs/conversation.md#tools).

llama-cpp-python's server takes ``tools`` but only a chat format written for function calling uses them, and
SmolLM2-135M never writes a call by itself: asked to answer ``CALL name {...}`` when a request needs a function, it
did so for 0 of 10 requests that needed one (2-core AMD EPYC, 2026-11-29). So the choice and the arguments are made
here, each as a small model can make them, and everything else is left to the stock server:

* **Which tool.** The request's words are scored under one short system prompt per declared tool ("The user wants you
  to <its description>") and four for talk (CHAT_FRAMES): the frame under which the words are likeliest wins (the
  words' log-likelihood, per token). A frame that fits raises the likelihood
  of the words it explains; an instruction-tuned model of 135M parameters cannot be asked, but it can be read. One
  pass of the scorer per frame, on a small context of its own over the same weights (the chat's prompt cache is not
  touched). ``tool_choice`` narrows the frames: "none" never calls, "required" leaves out talk, a named function is
  called without scoring.
* **Its arguments.** Written by the model under a grammar made from the tool's JSON Schema (llama.cpp's
  ``LlamaGrammar.from_json_schema``), from the user's words; validated against the schema (jsonschema) and written once
  more at a higher temperature when they do not fit; a call whose arguments never fit is an HTTP 500 naming the tool,
  never a call with bad arguments.
* **After the call.** A history with function calls and their outputs is rewritten into plain chat messages the
  model's template can show (an assistant message that says the call, a system message with its output). When the
  last message is a function's output, the reply is that output as words (a grammar: RESULT_OPENING, the output,
  then optionally one sentence of the model's own): asked freely, the 135M model said the output in 6 of 15 replies
  and invented weather in the others, and under a grammar that left it a lead-in of its own it wrote broken words
  ("Paris is knownlyleapf: 18 degrees and sunny.", same machine and day). A model that can relay a result (vLLM on a
  card) is not constrained: this module serves only the in-box server.

**Ahead of the first request.** ``POST /v1/tools/prepare`` (``{"model", "tools", "tool_choice"}``) evaluates the frames'
prompts of a tool set and answers ``{"frames", "evaluated_tokens"}`` (0 tokens: they were held already). A
conversation asks it when it opens (ChatBrain.prepare_tools), at the lowest priority, so the caller's first request
does not pay for them (~2.8 s for three tools on a 2-core Zen 1 EPYC, 2026-11-29).

The answer is OpenAI's: a streamed ``delta.tool_calls`` (the call's id, name, then its arguments) with
``finish_reason`` "tool_calls", or the same as one ``message`` when not streamed. A request without tools (and without
function-call history) passes through untouched.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from services.common.brain_requests import KIND_HEADER, TURN

log = logging.getLogger("voicefleet.brain.tools")

# Talk (no call) is four frames, the likeliest of them counting: with only the first, questions about people and
# places ("Who wrote Romeo and Juliet?") read as a call of get_weather; with the second, 28 of 30 requests of the first
# tuning set were placed right against 20 (bench/results/tools-2026-11-29/). Small talk and requests for a joke or a
# story still read as calls of whatever tool was declared ("Nice to meet you!" as get_weather); the third and fourth
# frames took 110 typed tuning requests (three sets, six tool sets) from 90 to 95 placed right, and a fourth set of
# 32 from 26 to 28 (written before they were measured, but read for them after it had turned down another way:
# bench/results/tools-choice-2026-11-30/).
CHAT_FRAMES = (
    "answer a question, tell something or just chat.",
    "answer a general knowledge question about people, places, things or words.",
    "chat with you: greet you, thank you, or tell you how they feel.",
    "tell a joke, a story, a riddle, a poem or a song.",
)
FRAME_PREFIX = "You are a helpful voice assistant. The user wants you to "
PREPARE_PATH = "/v1/tools/prepare"
SCORER_CONTEXT = 2048  # tokens held by the scorer: every frame's prompt, and the words once per frame
SCORER_BATCH = 512
SCORER_SEQUENCES = 40  # frames weighed at once: MAX_TOOLS (32) and the talk frames
MAX_WORDS_TOKENS = 48  # the words weighed: a request's first 48 tokens
ARGUMENT_TOKENS = 96
ARGUMENT_TRIES = ((0.0, 0), (0.7, 1))  # (temperature, seed offset): greedy first, then once more with sampling


def frame_text(description: str) -> str:
    words = description.strip() or "call a function."
    return FRAME_PREFIX + words[0].lower() + words[1:]


def spoken(output: str) -> str:
    """A function's output as words to say: JSON objects as "key value, key value" (underscores as spaces), lists
    joined with commas, text as it is."""
    try:
        value = json.loads(output)
    except ValueError:
        return " ".join(output.split()).rstrip(".")

    def say(v: Any) -> str:
        if isinstance(v, dict):
            return ", ".join(f"{str(k).replace('_', ' ')} {say(x)}" for k, x in v.items())
        if isinstance(v, list):
            return ", ".join(say(x) for x in v)
        if isinstance(v, bool):
            return "yes" if v else "no"
        return "" if v is None else str(v)

    return say(value).strip()


# What the reply to a function's output opens with, before the output itself: said first, a number was misheard by
# the strict listener (piper joe's "18 degrees and sunny." heard as "aching degrees and sunny."; "Here it is. 18
# degrees and sunny." heard right, 2026-11-29), and a listener may miss a reply's first word the same way.
RESULT_OPENING = "Here it is: "


def result_grammar(output: str) -> str:
    """GBNF: RESULT_OPENING, the output as words, then nothing or one sentence of the model's own."""
    said = spoken(output) or "done"
    return f'root ::= {json.dumps(RESULT_OPENING + said)} "." tail\ntail ::= "" | " " [^.!?\\n]{{1,120}} [.!?]\n'


def plain_messages(messages: list[dict]) -> tuple[list[dict], str | None]:
    """Messages with function calls and outputs as plain chat (module doc), and the last message's output when the
    conversation ends with one (None otherwise)."""
    names: dict[str, str] = {}
    out: list[dict] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                function = call.get("function") or {}
                names[call.get("id", "")] = function.get("name", "")
                calls.append(f"{function.get('name', '')}({function.get('arguments', '')})")
            text = (m.get("content") or "").strip()
            out.append({"role": "assistant", "content": (text + " " if text else "") + f"(calling {', '.join(calls)})"})
        elif role == "tool":
            name = names.get(m.get("tool_call_id", ""), "the function")
            out.append({"role": "system", "content": f"{name} returned: {spoken(str(m.get('content') or ''))}."})
        else:
            out.append(m)
    last = messages[-1] if messages else {}
    return out, (str(last.get("content") or "") if last.get("role") == "tool" else None)


def uses_tools(request: dict) -> bool:
    messages = request.get("messages") or []
    return bool(request.get("tools")) or any(
        isinstance(m, dict) and (m.get("role") == "tool" or m.get("tool_calls")) for m in messages
    )


def candidates(tools: list[dict], choice) -> tuple[list[dict], bool]:
    """The tools the choice allows, and whether talk (no call) is one of the options."""
    if choice == "none":
        return [], True
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return [t for t in tools if t["function"]["name"] == name], False
    return tools, choice != "required"


class Scorer:
    """Log-likelihood of the user's words under each frame, on a context of its own over the model's weights.

    Each frame's prompt up to the words (the system prompt and the template around it) stays evaluated in a sequence
    of its own, so a request evaluates only its words once per frame, all frames in one batch: on a 2-core AMD EPYC
    (2026-11-29) five frames took 2.4-2.8 s evaluated whole each time, the model being compute-bound at ~10 ms a
    token there. The cache is dropped whole when a new frame does not fit (a session's tools are few and fixed)."""

    def __init__(self, llama):
        from llama_cpp import _internals, llama_cpp

        self.llama = llama
        self._llama_cpp = llama_cpp
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = SCORER_CONTEXT
        params.n_batch = params.n_ubatch = SCORER_BATCH
        params.n_seq_max = SCORER_SEQUENCES
        params.kv_unified = True  # one pool of cells for every frame's sequence, not n_ctx / n_seq_max each
        params.n_threads = params.n_threads_batch = llama.n_threads
        self.context = _internals.LlamaContext(model=llama._model, params=params, verbose=False)  # noqa: SLF001
        self.batch = _internals.LlamaBatch(n_tokens=SCORER_BATCH, embd=0, n_seq_max=1, verbose=False)
        self.n_vocab = llama.n_vocab()
        self.cached: dict[str, tuple[int, list[int]]] = {}  # frame -> (its sequence, its prompt's tokens)

    def _prompt(self, system: str, formatter) -> list[int]:
        # As llama_server.around_words renders it (not imported: llama_server imports this module).
        mark = "\u2063"
        rendered = formatter(messages=[{"role": "system", "content": system}, {"role": "user", "content": mark}]).prompt
        before = rendered.partition(mark)[0]
        return self.llama.tokenize(before.encode(), add_bos=False, special=True)

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """Decode (token, position, sequence, wants logits) items in one batch."""
        b = self.batch.batch
        b.n_tokens = len(items)
        for i, (token, pos, seq, logits) in enumerate(items):
            b.token[i], b.pos[i], b.seq_id[i][0], b.n_seq_id[i], b.logits[i] = token, pos, seq, 1, logits
        self.context.decode(self.batch)

    def _cache(self, systems: list[str], formatter, words_tokens: int) -> int:
        """Every frame's prompt, but its last token, evaluated in its sequence (the last goes with the words); the
        tokens evaluated now (0: every frame was held)."""
        prompts = {s: self._prompt(s, formatter) for s in systems if s not in self.cached}
        held = sum(len(p) for _, p in self.cached.values()) + sum(len(p) for p in prompts.values())
        room = SCORER_CONTEXT - len(systems) * (words_tokens + 1)
        if len(self.cached) + len(prompts) > SCORER_SEQUENCES or held > room:
            self.context.kv_cache_clear()
            self.cached.clear()
            prompts = {s: self._prompt(s, formatter) for s in systems}
            if sum(len(p) for p in prompts.values()) > room:
                raise ValueError("the tools' descriptions are too long to weigh at once")
        used = {seq for seq, _ in self.cached.values()}
        free = (seq for seq in range(SCORER_SEQUENCES) if seq not in used)
        evaluated = 0
        for system, prompt in prompts.items():
            seq = next(free)
            head = prompt[:-1]
            for start in range(0, len(head), SCORER_BATCH):
                chunk = head[start : start + SCORER_BATCH]
                self._decode([(t, start + i, seq, False) for i, t in enumerate(chunk)])
            evaluated += len(head)
            self.cached[system] = (seq, prompt)
        return evaluated

    def prepare(self, systems: list[str], formatter) -> int:
        """The frames' prompts evaluated ahead of the words (room kept for the longest words weighed)."""
        return self._cache(list(dict.fromkeys(systems)), formatter, MAX_WORDS_TOKENS)

    def words_logprobs(self, systems: list[str], words: str, formatter) -> list[float]:
        """Mean log P of the words' tokens as the user's message after each system prompt (the chat template)."""
        tail = self.llama.tokenize(words.encode(), add_bos=False, special=False)[:MAX_WORDS_TOKENS]
        if not tail:
            return [0.0 for _ in systems]
        unique = list(dict.fromkeys(systems))  # two tools with one description share a sequence
        if len(unique) < len(systems):
            mean_of = dict(zip(unique, self.words_logprobs(unique, words, formatter), strict=True))
            return [mean_of[system] for system in systems]
        self._cache(systems, formatter, len(tail))
        per_batch = max(1, SCORER_BATCH // len(tail))
        means: list[float] = []
        for start in range(0, len(systems), per_batch):
            group = systems[start : start + per_batch]
            items = []
            for system in group:
                seq, prompt = self.cached[system]
                fed = [prompt[-1], *tail[:-1]]  # the logits after each predict the next word token
                items += [(t, len(prompt) - 1 + i, seq, True) for i, t in enumerate(fed)]
            self._decode(items)
            for k in range(len(group)):
                total = 0.0
                for i, token in enumerate(tail):
                    row = np.ctypeslib.as_array(self.context.get_logits_ith(k * len(tail) + i), shape=(self.n_vocab,))
                    top = row.max()
                    total += float(row[token] - top - np.log(np.exp(row - top).sum()))
                means.append(total / len(tail))
            memory = self.context.memory
            for system in group:  # the words go; the frame's prompt stays for the next request
                seq, prompt = self.cached[system]
                self._llama_cpp.llama_memory_seq_rm(memory, seq, len(prompt) - 1, -1)
        return means


class ToolChooser:
    """Which tool (or none) and its arguments, for one model (module doc)."""

    def __init__(self, llama, formatter):
        self.llama = llama
        self.formatter = formatter
        self._scorer: Scorer | None = None

    def _frames(self, tools: list[dict], choice) -> tuple[list[dict], list[str], list[str]]:
        """(the tools that may be called, their frames, the talk frames): no frames when nothing is weighed."""
        allowed, talk = candidates(tools, choice)
        if not allowed or (len(allowed) == 1 and not talk):
            return allowed, [], []
        systems = [frame_text(t["function"].get("description", "")) for t in allowed]
        return allowed, systems, [FRAME_PREFIX + f for f in CHAT_FRAMES] if talk else []

    def _the_scorer(self) -> Scorer:
        if self._scorer is None:
            self._scorer = Scorer(self.llama)
        return self._scorer

    def prepare(self, tools: list[dict], choice) -> dict:
        """The frames of ``tools`` evaluated now, so the first request with them weighs only its words."""
        _, systems, talks = self._frames(tools, choice)
        if not systems:
            return {"frames": 0, "evaluated_tokens": 0}
        evaluated = self._the_scorer().prepare(systems + talks, self.formatter)
        return {"frames": len(set(systems + talks)), "evaluated_tokens": evaluated}

    def choose(self, words: str, tools: list[dict], choice) -> tuple[dict | None, dict[str, float]]:
        allowed, systems, talks = self._frames(tools, choice)
        if not allowed:
            return None, {}
        if not systems:
            return allowed[0], {}
        talk = bool(talks)
        means = self._the_scorer().words_logprobs(systems + talks, words, self.formatter)
        scores = {t["function"]["name"]: m for t, m in zip(allowed, means, strict=False)}
        if talk:
            scores[""] = max(means[len(systems) :])
        best = max(scores, key=scores.get)
        return next((t for t in allowed if t["function"]["name"] == best), None), scores

    def arguments(self, words: str, tool: dict) -> str:
        """JSON arguments for ``tool`` from the user's words, valid against its schema (ValueError when two tries
        never fit)."""
        from jsonschema import validators
        from llama_cpp import LlamaGrammar

        function = tool["function"]
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        if not (schema.get("properties") or {}):
            return "{}"
        grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
        fields = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in schema["properties"].items())
        system = (
            f"You are a helpful voice assistant. Fill in the arguments of the function {function['name']}({fields}):"
            f" {function.get('description', '')} Take the values from the user's words."
        )
        prompt = self.formatter(
            messages=[{"role": "system", "content": system}, {"role": "user", "content": words}]
        ).prompt
        validator = validators.validator_for(schema, default=validators.Draft202012Validator)(schema)
        problem = ""
        for temperature, seed in ARGUMENT_TRIES:
            text = self.llama.create_completion(
                prompt=prompt, max_tokens=ARGUMENT_TOKENS, temperature=temperature, seed=1234 + seed, grammar=grammar
            )["choices"][0]["text"]
            try:
                value = json.loads(text)
            except ValueError as e:
                problem = f"not JSON ({e})"
                continue
            errors = list(validator.iter_errors(value))
            if not errors:
                return json.dumps(value)
            problem = errors[0].message
        raise ValueError(f"the model's arguments for {function['name']} never fitted its parameters: {problem}")


def call_chunks(model: str, call_id: str, name: str, arguments: str) -> list[dict]:
    """OpenAI chat completion chunks of one function call."""
    created, cid = int(time.time()), f"chatcmpl-{uuid.uuid4().hex[:24]}"

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    head = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    return [
        chunk({"role": "assistant", "content": None, "tool_calls": [head]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
        chunk({}, "tool_calls"),
    ]


def call_completion(model: str, call_id: str, name: str, arguments: str) -> dict:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
    }


class ToolCallMiddleware:
    """``POST /v1/chat/completions`` with tools or function-call history (module doc); every other request passes
    through. ``model_of(name)`` gives the Llama; ``run`` runs a function on the model's one thread; ``place(kind)``
    is the model's queue (llama_server.py)."""

    def __init__(self, app, model_of: Callable, run: Callable, place: Callable, formatter_of: Callable):
        self.app = app
        self.model_of = model_of
        self.run = run
        self.place = place
        self.formatter_of = formatter_of
        self._choosers: dict[int, ToolChooser] = {}

    async def __call__(self, scope, receive, send):
        path = scope.get("path")
        if scope["type"] != "http" or scope["method"] != "POST" or path not in ("/v1/chat/completions", PREPARE_PATH):
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if path == PREPARE_PATH:
            await self._prepare(scope, request, send)
            return
        if isinstance(request, dict) and uses_tools(request):
            try:
                answered = await self._answer(scope, request, send)
            except ValueError as e:
                await _json(send, 500, {"error": {"message": str(e), "type": "tool_arguments"}})
                return
            if answered:
                return
            body = json.dumps(request).encode()
        await self.app(scope, _replay(body, receive), send)

    def _chooser(self, request: dict) -> ToolChooser:
        llama = self.model_of(request.get("model"))
        chooser = self._choosers.get(id(llama))
        if chooser is None:
            chooser = self._choosers[id(llama)] = ToolChooser(llama, self.formatter_of(llama))
        return chooser

    async def _prepare(self, scope, request, send) -> None:
        """``POST /v1/tools/prepare``: the tool set's frames evaluated ahead of the first request (module doc)."""
        tools = request.get("tools") if isinstance(request, dict) else None
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            await _json(send, 400, {"error": {"message": "tools: must be a list of OpenAI tools", "type": "tools"}})
            return
        functions = [t for t in tools if t.get("type") == "function" and isinstance(t.get("function"), dict)]
        kind = next((v.decode() for k, v in scope["headers"] if k == KIND_HEADER.lower().encode()), TURN)
        started = time.perf_counter()
        try:
            async with self.place(lambda: kind):
                chooser = self._chooser(request)
                done = await self.run(chooser.prepare, functions, request.get("tool_choice") or "auto")
        except ValueError as e:  # descriptions too long to weigh at once: the request itself will say so
            await _json(send, 400, {"error": {"message": str(e), "type": "tools"}})
            return
        log.info(
            "tools: %d frames prepared, %d tokens evaluated (%.0f ms)",
            done["frames"],
            done["evaluated_tokens"],
            (time.perf_counter() - started) * 1000,
        )
        await _json(send, 200, done)

    async def _answer(self, scope, request: dict, send) -> bool:
        """Answer a call here (True), or rewrite ``request`` for the stock server (False)."""
        messages = request.get("messages") or []
        tools = [t for t in (request.pop("tools", None) or []) if t.get("type") == "function"]
        choice = request.pop("tool_choice", None) or "auto"
        request.pop("parallel_tool_calls", None)
        plain, output = plain_messages(messages)
        request["messages"] = plain
        if output is not None:  # the reply to a function's output starts with it (module doc)
            request.setdefault("grammar", result_grammar(output))
            return False
        last = messages[-1] if messages else {}
        words = last.get("content") if last.get("role") == "user" else None
        if not tools or not isinstance(words, str) or not words.strip():
            return False
        kind = next((v.decode() for k, v in scope["headers"] if k == KIND_HEADER.lower().encode()), TURN)
        model = request.get("model") or ""
        async with self.place(lambda: kind):
            chooser = self._chooser(request)
            started = time.perf_counter()
            tool, scores = await self.run(chooser.choose, words, tools, choice)
            chose_ms = (time.perf_counter() - started) * 1000
            if tool is None:
                log.info("tools: %r answers in words (%.0f ms; %s)", words, chose_ms, _scores(scores))
                return False
            arguments = await self.run(chooser.arguments, words, tool)
        name = tool["function"]["name"]
        log.info("tools: %r calls %s(%s) (choice %.0f ms; %s)", words, name, arguments, chose_ms, _scores(scores))
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        if request.get("stream"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
                }
            )
            for chunk in call_chunks(model, call_id, name, arguments):
                await send(
                    {"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode(), "more_body": True}
                )
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
        else:
            await _json(send, 200, call_completion(model, call_id, name, arguments))
        return True


def _scores(scores: dict[str, float]) -> str:
    return ", ".join(f"{name or 'talk'} {value:.2f}" for name, value in scores.items()) or "not scored"


def _replay(body: bytes, receive):
    """The request's body (read here) once, then the connection's own messages (its disconnect)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _json(send, status: int, value: dict) -> None:
    data = json.dumps(value).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": data})
