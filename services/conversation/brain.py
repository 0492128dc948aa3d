"""The brain: a client of an OpenAI-compatible chat endpoint (streaming chat completions over SSE).

CPU: llama-cpp-python's server with SmolLM2-135M-Instruct (services/brain/, fleet member
``brain``); GPU: vLLM's OpenAI server. Both speak ``POST {base_url}/chat/completions`` with ``"stream": true`` and
answer ``data: {json}`` lines ending in ``data: [DONE]``; the text is in ``choices[0].delta.content``.

Failures are the turn's, not the session's: an unreachable or failing brain raises ``Unavailable`` (the session
sends a TurnError with code UNAVAILABLE and keeps listening; the next turn tries again). Closing the generator
closes the HTTP response, which stops the server's generation.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.common import metrics
from services.common.brain_requests import JUDGEMENT, KIND_HEADER, READ_AHEAD, TURN, brain_places
from services.common.engines import Sampling
from services.common.errors import Unavailable, VoiceError
from services.conversation.brain_queue import BrainQueue

if TYPE_CHECKING:
    from services.common.config.brain import BrainConfig

log = logging.getLogger("voicefleet.conversation.brain")

# Sampling seed sent when the session gives none (0 means "a fixed default" in the contract).
DEFAULT_SEED = 1234
# What a recognizer closes a phrase with; the words judgement reads the words without it (end_of_turn_logprob).
CLOSING_MARKS = " \t\n.?!,;:\u2026"


@dataclass(frozen=True)
class BrainCall:
    """A function call the reply model made (``stream_chat`` with tools), its arguments whole (JSON text)."""

    name: str
    arguments: str


def request_headers(request_id: str, kind: str = "") -> dict[str, str]:
    """Our request id for the brain's logs, and the request's kind (brain_queue.py) for the in-box server's own
    queue (services/brain/llama_server.py: other processes' requests, the router's fallback, share it).
    llama-cpp-python's server answers HTTP 400 ("Wrong uuid") to an X-Request-Id that is not a UUID
    (starlette-context validates it), and voicefleet ids are 16 hex digits: send X-Request-Id only when it is a UUID,
    and the id itself always as X-Voicefleet-Request-Id."""
    headers = {KIND_HEADER: kind} if kind else {}
    if not request_id:
        return headers
    headers["X-Voicefleet-Request-Id"] = request_id
    try:
        uuid.UUID(request_id)
        headers["X-Request-Id"] = request_id
    except ValueError:
        pass
    return headers


class ChatBrain:
    def __init__(
        self,
        base_url: str,
        model: str,
        service: str,
        api_key: str = "",
        connect_timeout_s: float = 2.0,
        read_timeout_s: float = 30.0,
        languages: tuple[str, ...] = (),
        examples: tuple[tuple[str, str], ...] = (),
        parallel_requests: int = 1,
    ):
        """``languages``: the languages the reply model writes; () = any (a multilingual model). ``examples``:
        (user, assistant) exchanges sent after the system prompt of every request (brain.reply_examples).
        ``parallel_requests``: how many requests the server serves at once; more wait in ``queue``, turns first."""
        self.base_url = base_url.rstrip("/")
        self.languages = languages
        self.examples = [
            message
            for user, assistant in examples
            for message in ({"role": "user", "content": user}, {"role": "assistant", "content": assistant})
        ]
        self.model = model
        self.api_key = api_key
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._first_token = metrics.STS_BRAIN_FIRST_TOKEN.labels(service)
        self._service = service
        self._no_turn_route = False  # the server answered /end_of_turn with 404: it has none
        self._no_prepare_route = False  # ... /tools/prepare with 404 (a model that calls tools itself: vLLM)
        self._client = None
        self.queue = BrainQueue(service, parallel_requests)  # every session's requests of this process

    def check_language(self, language: str, field: str = "config.language") -> None:
        """FAILED_PRECONDITION when the reply model does not write ``language`` (an empty language is not checked)."""
        from services.common import languages as tags
        from services.common.errors import FailedPrecondition

        if not language or not self.languages or any(tags.matches(language, t) for t in self.languages):
            return
        raise FailedPrecondition(
            f"{field}: {language!r}: the reply model ({self.model} at {self.base_url}) writes only"
            f" {', '.join(self.languages)}; for a conversation in {language!r} set brain.base_url to a multilingual"
            " model's OpenAI endpoint (e.g. vLLM on GPU, docs/conversation.md#the-brain), or converse in"
            f" {self.languages[0]}"
        )

    def _http(self):
        if self._client is None:
            import httpx

            timeout = httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s)
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(timeout=timeout, headers=headers)
        return self._client

    def _unreachable(self, problem: str) -> Unavailable:
        return Unavailable(
            f"brain: the reply model at {self.base_url} {problem}; the session goes on and the next turn tries"
            " again (start it: `voicefleet up` runs it as fleet member brain; or set brain.base_url)"
        )

    @classmethod
    def from_config(cls, b: BrainConfig, service: str, *, check_languages: bool = True) -> ChatBrain:
        """The cascade's client of the brain section ``b`` (BrainConfig). ``check_languages`` False: any session
        language is let through (the router's fallback: moss_sts decides, and GPU MOSS-Speech speaks Chinese)."""
        languages = b.reply_languages if check_languages else ()
        return cls(
            b.url,
            b.model,
            service,
            b.api_key,
            b.connect_timeout_seconds,
            b.read_timeout_seconds,
            languages=languages,
            examples=b.example_turns,
            parallel_requests=brain_places(b),
        )

    def prompt(self, messages: list[dict]) -> list[dict]:
        """``messages`` with the example exchanges after the system prompt (before the first turn without one)."""
        if not self.examples:
            return messages
        system = 1 if messages and messages[0].get("role") == "system" else 0
        return messages[:system] + self.examples + messages[system:]

    async def stream_chat(
        self,
        messages: list[dict],
        sampling: Sampling,
        max_tokens: int,
        request_id: str = "",
        kind: str | Callable[[], str] = TURN,
        tools: list[dict] | None = None,
        tool_choice: str | dict = "auto",
    ) -> AsyncIterator[str | BrainCall]:
        """Text deltas of the reply to ``messages`` (OpenAI chat format), and with ``tools`` (OpenAI chat tools) the
        function calls it makes instead (a BrainCall each, once its arguments are whole). ``kind``: a committed
        turn's reply (``turn``) or one held until its turn commits (a callable that says ``held`` until then,
        ``turn`` after): its place in the brain's queue (brain_queue.py)."""
        body = {
            "model": self.model,
            "messages": self.prompt(messages),
            "stream": True,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": max_tokens,
            "seed": sampling.seed or DEFAULT_SEED,
        }
        if tools:
            body["tools"] = tools
            body["tool_choice"] = tool_choice
        calls: dict[int, dict] = {}  # tool_calls deltas by index: name and arguments so far
        kind_now = kind if callable(kind) else (lambda: kind)
        first = True
        finished = None  # the choice's finish_reason; a stream that ends without one was cut short
        async with self.queue.place(kind_now), self._request():
            headers = request_headers(request_id, kind_now())
            sent = time.monotonic()
            async with self._http().stream(
                "POST", f"{self.base_url}/chat/completions", json=body, headers=headers
            ) as response:
                if response.status_code >= 400:
                    detail = (await response.aread()).decode(errors="replace")[:300]
                    raise self._refused(response.status_code, detail)
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    try:
                        chunk = json.loads(data)
                    except json.JSONDecodeError:
                        log.warning("brain sent a line that is not JSON: %.200s", data)
                        continue
                    if "error" in chunk:
                        raise self._unreachable(f"failed: {chunk['error']}")
                    choices = chunk.get("choices") or []
                    if not choices:
                        continue
                    finished = choices[0].get("finish_reason") or finished
                    for piece in (choices[0].get("delta") or {}).get("tool_calls") or []:
                        call = calls.setdefault(piece.get("index", 0), {"name": "", "arguments": ""})
                        function = piece.get("function") or {}
                        call["name"] += function.get("name") or ""
                        call["arguments"] += function.get("arguments") or ""
                    text = (choices[0].get("delta") or {}).get("content") or ""
                    if text:
                        if first:
                            self._first_token.observe(time.monotonic() - sent)
                            first = False
                        yield text
            if finished is None:
                # An OpenAI-compatible server ends every choice with a finish_reason (stop, length); [DONE] or the
                # end of the body without one means the server gave up on this reply (llama-cpp-python's
                # interrupt_requests does that when another request arrives): a failed turn, not a short answer.
                raise self._unreachable("ended the reply without a finish_reason (cut short by the server)")
            for _, call in sorted(calls.items()):
                yield BrainCall(call["name"], call["arguments"])

    async def read_ahead(self, messages: list[dict], request_id: str = "") -> bool:
        """Have the server evaluate ``messages`` (the turn so far) without answering: a one-token completion. Its
        prompt cache (llama.cpp's; vLLM's prefix caching) then holds them, and the turn's own request, whose prompt
        begins the same, evaluates only what follows the shared prefix. Only while this client has nothing else in
        flight (False: skipped): the brain serves ``parallel_requests`` at a time, so with other sessions' requests
        under way a read-ahead would wait in the queue and then hold up the turns behind it (brain_queue.py)."""
        body = {
            "model": self.model,
            "messages": self.prompt(messages),
            "stream": False,
            "temperature": 0.0,
            "max_tokens": 1,
        }
        async with self.queue.place_if_idle() as place:
            if place is None:
                return False
            async with self._request():
                response = await self._http().post(
                    f"{self.base_url}/chat/completions", json=body, headers=request_headers(request_id, READ_AHEAD)
                )
        if response.status_code >= 400:
            raise self._refused(response.status_code, response.text[:300])
        return True

    async def prepare_tools(self, tools: list[dict], tool_choice, request_id: str = "") -> dict | None:
        """Have the in-box server weigh ``tools`` (OpenAI tools) ahead of the session's first request
        (services/brain/tool_calls.py ``POST /v1/tools/prepare``), as the lowest kind of work: the first request with
        them then evaluates only the user's words. Its answer ({"frames", "evaluated_tokens"}); None when the server
        has no such route (a model that calls tools itself): asked once, then never again."""
        if self._no_prepare_route:
            return None
        body = {"model": self.model, "tools": tools, "tool_choice": tool_choice}
        async with self.queue.place(READ_AHEAD), self._request():
            response = await self._http().post(
                f"{self.base_url}/tools/prepare", json=body, headers=request_headers(request_id, READ_AHEAD)
            )
        if response.status_code in (404, 405):
            self._no_prepare_route = True
            return None
        if response.status_code >= 400:
            raise self._refused(response.status_code, response.text[:300])
        return response.json()

    async def end_of_turn_logprob(self, messages: list[dict], request_id: str = "") -> float | None:
        """How sure the reply model is that the user's words (``messages[-1]``, the turn so far) end their turn: the
        natural log of the probability that the next token after them is the chat template's end-of-message token
        or a mark that closes a sentence (LiveKit's text turn detector reads a transcript the same way). The words
        are read without the recognizer's closing mark: whisper punctuates a phrase cut mid-way ("I'd like to book
        a table for.") as readily as a sentence, and a small model trusts the mark (SmolLM2-135M read most cut
        phrases of bench/turn_words.py's set as finished with the mark kept). One prompt
        evaluation, no token sampled, on the in-box server's ``POST /v1/end_of_turn`` (services/brain/
        llama_server.py); its prompt is the turn's own up to the user's last word, so the reply's request then
        evaluates little more. None when the server has no such route (vLLM): asked once, then never again."""
        if self._no_turn_route:
            return None
        *before, last = messages
        words = {**last, "content": last["content"].rstrip(CLOSING_MARKS)}
        if not words["content"]:
            return None
        body = {"model": self.model, "messages": self.prompt([*before, words])}
        async with self.queue.place(JUDGEMENT), self._request():
            sent = time.monotonic()
            response = await self._http().post(
                f"{self.base_url}/end_of_turn", json=body, headers=request_headers(request_id, JUDGEMENT)
            )
        if response.status_code in (404, 405):
            self._no_turn_route = True
            log.warning(
                "brain: %s has no /end_of_turn route (not voicefleet's llama.cpp server): the turn-taking goes on"
                " without the reply model's reading of the words (docs/conversation.md#the-words-judgement)",
                self.base_url,
            )
            return None
        if response.status_code >= 400:
            raise self._refused(response.status_code, response.text[:300])
        metrics.STS_BRAIN_TURN_JUDGEMENT.labels(self._service).observe(time.monotonic() - sent)
        return float(response.json()["sentence_end_logprob"])

    @contextlib.asynccontextmanager
    async def _request(self):
        """One request to the server: a timeout or a transport failure is the brain being unreachable."""
        import httpx

        try:
            yield
        except httpx.TimeoutException as e:
            raise self._unreachable(f"did not answer in time ({type(e).__name__})") from None
        except (httpx.TransportError, OSError) as e:
            raise self._unreachable(f"is unreachable ({type(e).__name__}: {e})") from None

    def _refused(self, status: int, detail: str) -> VoiceError:
        """An HTTP error answer: the server failing (5xx), missing (404) or overloaded (429) is unreachable; any
        other is the request rejected."""
        if status >= 500 or status in (404, 429):
            return self._unreachable(f"answered HTTP {status}: {detail}")
        return VoiceError(f"brain: the reply model rejected the request (HTTP {status}): {detail}")

    async def ready(self) -> bool:
        """GET /models answers (the readiness check the fleet uses too)."""
        import httpx

        try:
            reply = await self._http().get(f"{self.base_url}/models")
            return reply.status_code == 200
        except (httpx.HTTPError, OSError):
            return False

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
