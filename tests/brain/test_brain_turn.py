"""The brain's reading of the user's words (``POST /v1/end_of_turn``, services/brain/llama_server.py;
``ChatBrain.end_of_turn_logprob``; docs/conversation.md#the-words-judgement), on the real in-box server.

The phrases here are held out from the tuning set (bench/turn_words.py): whole requests must read finished at the
shipped threshold, the same requests cut mid-phrase (as a speaker pausing to think) unfinished."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from services.cli.fleet import LocalFleet
from services.common.config import load_config
from services.conversation.brain import ChatBrain

pytestmark = [pytest.mark.timeout(300), pytest.mark.background]  # CPU work with no clock in it

WHOLE = [
    "What is the capital of France?",
    "Can you recommend a good book about space?",
    "I'd like to order a large pizza with mushrooms.",
    "Please wake me up at six thirty tomorrow.",
    "How do I get to the train station from the museum?",
]
# Cut where people pause to think: after a preposition, a determiner, a possessive, an auxiliary, a verb that wants
# its object, an adjective before its noun.
CUT = [
    "I'd like to book a table for",
    "Can you tell me the",
    "Please send the report to my",
    "How long would it",
    "I need to buy a new",
    "Could you remind me to",
    "What is the best way to get to the",
    "My daughter wants to learn",
]


@pytest.fixture(scope="module")
def brain(tmp_path_factory):
    fleet = LocalFleet.on_free_ports(tmp_path_factory.mktemp("brain-turn"), ("brain",))
    yield fleet
    fleet.stop()


def read(fleet: LocalFleet, texts: list[str]) -> list[float | None]:
    b = fleet.config.brain
    client = ChatBrain(b.url, b.model, "test", read_timeout_s=120.0, examples=b.example_turns)
    system = load_config().moss_sts.default_system_prompt

    async def all_of():
        try:
            return [
                await client.end_of_turn_logprob(
                    [{"role": "system", "content": system}, {"role": "user", "content": t}]
                )
                for t in texts
            ]
        finally:
            await client.close()

    return asyncio.run(all_of())


def test_whole_requests_read_finished_and_requests_cut_mid_phrase_unfinished(brain):
    threshold = load_config().moss_sts.brain_turn_logprob
    whole, cut = read(brain, WHOLE), read(brain, CUT)
    assert all(lp is not None for lp in whole + cut)
    unfinished_whole = [(t, lp) for t, lp in zip(WHOLE, whole, strict=True) if lp < threshold]
    finished_cut = [(t, lp) for t, lp in zip(CUT, cut, strict=True) if lp >= threshold]
    assert not unfinished_whole, f"whole requests read unfinished (below {threshold}): {unfinished_whole}"
    assert not finished_cut, f"cut phrases read finished (at or above {threshold}): {finished_cut}"


def test_the_reading_is_a_probability_and_a_bad_request_names_the_field(brain):
    (logprob,) = read(brain, ["Tell me a joke."])
    assert logprob is not None and logprob <= 0.0
    url = brain.config.brain.url
    bad = [
        {"messages": "hello"},
        {"messages": [{"role": "assistant", "content": "Hi."}]},
        {"messages": [{"role": "user", "content": "   "}]},
    ]
    for body in bad:
        reply = httpx.post(f"{url}/end_of_turn", json=body, timeout=60)
        assert reply.status_code == 400 and "messages" in reply.text, (body, reply.status_code, reply.text)
    # The server is still up and still reads.
    assert read(brain, ["Tell me a joke."])[0] == pytest.approx(logprob, abs=1e-3)


def test_a_server_without_the_route_is_asked_once_then_never_again():
    """vLLM's OpenAI server has no /end_of_turn: the client says so once and the turn goes on without the reading."""
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(404, json={"detail": "Not Found"})

    client = ChatBrain("http://brain.invalid/v1", "m", "test")
    client._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))  # the HTTP boundary: no such server

    async def twice():
        try:
            messages = [{"role": "user", "content": "Hello there."}]
            return [await client.end_of_turn_logprob(messages), await client.end_of_turn_logprob(messages)]
        finally:
            await client.close()

    assert asyncio.run(twice()) == [None, None]
    assert calls == ["/v1/end_of_turn"]
