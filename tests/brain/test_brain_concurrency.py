"""The brain (llama-cpp-python's server with SmolLM2, a real fleet member) under concurrent turns.

Found in the container stack and in the 4-session conversation benchmark: about one turn in six came back with an
empty or one-word reply and no error. llama-cpp-python's server defaults to ``interrupt_requests``: a streaming
completion ends with ``[DONE]`` the moment another request waits for the model (another caller's turn, or a
readiness probe's completion). The brain member now lets requests take turns, and the client treats a stream that
ends without a ``finish_reason`` as a failed turn instead of a short answer."""

from __future__ import annotations

import asyncio

import pytest

from services.cli.fleet import LocalFleet
from services.common.engines import Sampling
from services.common.errors import Unavailable
from services.conversation.brain import ChatBrain

# CPU work with no clock in it: `make test` runs it in its background lane (scripts/test-lanes.sh).
pytestmark = [pytest.mark.timeout(240), pytest.mark.background]

QUESTIONS = [
    "What is the capital of France?",
    "What color is the sky?",
    "Can you recommend a good book?",
    "What is two plus two?",
]


async def _ask_all(brain: ChatBrain) -> list[str | Exception]:
    async def ask(question: str) -> str:
        messages = [{"role": "user", "content": question}]
        return "".join([delta async for delta in brain.stream_chat(messages, Sampling(), max_tokens=40)])

    try:
        return await asyncio.gather(*(ask(q) for q in QUESTIONS), return_exceptions=True)
    finally:
        await brain.close()


def test_concurrent_turns_each_get_a_whole_reply(tmp_path):
    fleet = LocalFleet.on_free_ports(tmp_path, ("brain",))
    try:
        b = fleet.config.brain
        brain = ChatBrain(b.url, b.model, "test", b.api_key, b.connect_timeout_seconds, 120.0)
        replies = asyncio.run(_ask_all(brain))
    finally:
        fleet.stop()
    cut = [r for r in replies if isinstance(r, Unavailable)]
    assert not cut, f"replies cut short by the server: {cut}"
    assert all(isinstance(r, str) and len(r.split()) >= 2 for r in replies), replies
