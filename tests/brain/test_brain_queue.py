"""The in-box brain serves its model processes in order of kind (a committed turn's reply before held replies and
readings, whichever process asked) and stops a reply whose caller hung up (issue 49): with one worker, the server's
own queue (services/brain/llama_server.py); with two, the front's (services/brain/front.py).

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


@pytest.fixture(scope="module", params=[1, 2], ids=["one-worker", "two-workers"])
def brain(tmp_path_factory, request):
    fleet = LocalFleet.on_free_ports(
        tmp_path_factory.mktemp("brain-queue"), ("brain",), brain={"workers": request.param}
    )
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
    workers = brain.config.brain.workers
    events: list = []
    async with httpx.AsyncClient(timeout=120) as client:
        busy, began = [], []
        for i in range(workers):  # every worker taken: what follows queues
            began.append(asyncio.Event())
            busy.append(asyncio.create_task(reply(client, brain, TURN, 60, events, f"busy{i}", began=began[-1])))
        await asyncio.gather(*(b.wait() for b in began))
        held = asyncio.create_task(reply(client, brain, HELD, 4, events, "held"))
        reading = asyncio.create_task(reply(client, brain, JUDGEMENT, 4, events, "judgement"))
        await asyncio.sleep(0.3)  # both have reached the server's queue before the turn
        turn = asyncio.create_task(reply(client, brain, TURN, 4, events, "turn"))
        counts = await asyncio.gather(*busy, held, reading, turn)
    assert all(counts), f"a reply came back without text: {counts}"
    firsts = [label for label, what in events if what == "first"]
    # held and judgement rank alike (in the order they reached the server); the turn goes before both
    assert firsts[workers : workers + 1] == ["turn"] and sorted(firsts[workers + 1 :]) == ["held", "judgement"], events


async def test_two_workers_serve_two_replies_at_once(brain):
    """With two workers, a second reply starts while the first is still being written (the front hands it to the
    free worker); with one, it waits for the first to end."""
    events: list = []
    async with httpx.AsyncClient(timeout=120) as client:
        began = asyncio.Event()
        first = asyncio.create_task(reply(client, brain, TURN, 120, events, "first", began=began))
        await began.wait()
        second = asyncio.create_task(reply(client, brain, TURN, 4, events, "second"))
        await asyncio.gather(first, second)
    second_began, first_ended = events.index(("second", "first")), events.index(("first", "done"))
    if brain.config.brain.workers == 2:
        assert second_began < first_ended, events
    else:
        assert second_began > first_ended, events


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
