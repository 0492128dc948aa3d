"""The in-box brain serves its one model in order of kind (services/brain/llama_server.py: a committed turn's
reply before held replies and readings, whichever process asked) and stops a reply whose caller hung up (issue 49).

Real server (llama.cpp + SmolLM2) on loopback; the order is read from the events, never from times."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from services.cli.fleet import LocalFleet
from services.common.brain_requests import HELD, JUDGEMENT, KIND_HEADER, TURN

pytestmark = [pytest.mark.timeout(300), pytest.mark.background]  # CPU work with no clock in it

STORY = [{"role": "user", "content": "Tell me a long story about a brave little dragon."}]


@pytest.fixture(scope="module")
def brain(tmp_path_factory):
    fleet = LocalFleet.on_free_ports(tmp_path_factory.mktemp("brain-queue"), ("brain",))
    yield fleet
    fleet.stop()


async def reply(
    client: httpx.AsyncClient, fleet, kind: str, max_tokens: int, events: list, label: str, stop=0, began=None
):
    """A streamed reply asked as ``kind``; ``events`` gets (label, "first") at its first text (and ``began`` is set)
    and (label, "done") at its end. ``stop``: hang up after that many pieces of text."""
    b = fleet.config.brain
    body = {"model": b.model, "messages": STORY, "stream": True, "max_tokens": max_tokens, "temperature": 0.0}
    pieces = 0
    async with client.stream("POST", f"{b.url}/chat/completions", json=body, headers={KIND_HEADER: kind}) as response:
        assert response.status_code == 200, (await response.aread())[:300]
        async for line in response.aiter_lines():
            if line.startswith("data:") and '"content"' in line:
                pieces += 1
                if pieces == 1:
                    events.append((label, "first"))
                    if began is not None:
                        began.set()
                if stop and pieces >= stop:
                    break
    events.append((label, "done"))
    return pieces


async def test_a_committed_turn_is_served_before_held_work_that_asked_first(brain):
    events: list = []
    async with httpx.AsyncClient(timeout=120) as client:
        began = asyncio.Event()
        busy = asyncio.create_task(reply(client, brain, TURN, 60, events, "busy", began=began))
        await began.wait()  # the model is taken: what follows queues
        held = asyncio.create_task(reply(client, brain, HELD, 4, events, "held"))
        reading = asyncio.create_task(reply(client, brain, JUDGEMENT, 4, events, "judgement"))
        await asyncio.sleep(0.3)  # both have reached the server's queue before the turn
        turn = asyncio.create_task(reply(client, brain, TURN, 4, events, "turn"))
        counts = await asyncio.gather(busy, held, reading, turn)
    assert all(counts), f"a reply came back without text: {counts}"
    firsts = [label for label, what in events if what == "first"]
    # held and judgement rank alike (in the order they reached the server); the turn goes before both
    assert firsts[:2] == ["busy", "turn"] and sorted(firsts[2:]) == ["held", "judgement"], events


async def test_a_reply_whose_caller_hangs_up_stops_and_frees_the_model(brain):
    log = brain.members["brain"].log_path
    before = log.read_text(errors="replace").count("Disconnected from client")
    events: list = []
    async with httpx.AsyncClient(timeout=120) as client:
        # 400 tokens would hold the model for seconds; the caller hangs up after its first words.
        pieces = await reply(client, brain, TURN, 400, events, "hung-up", stop=2)
        assert pieces == 2
        after = await reply(client, brain, TURN, 4, events, "next")
    assert after > 0
    deadline = time.monotonic() + 60
    while log.read_text(errors="replace").count("Disconnected from client") == before:
        assert time.monotonic() < deadline, "the brain never noticed the hang-up (llama_cpp.server prints it)"
        await asyncio.sleep(0.1)
