"""The in-box brain serves its model processes in order of kind (a committed turn's reply before held replies and
readings, whichever process asked) and stops a reply whose caller hung up (issue 49): with one worker, the server's
own queue (services/brain/llama_server.py); with two, the front's (services/brain/front.py).

Real server (llama.cpp + SmolLM2) on loopback; the order is read from the events, never from times: work waits behind
replies that cannot end (their end token is barred) until the test hangs them up, once the brain's own queue
(``GET /v1/queue``) shows what waits."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from services.cli.fleet import LocalFleet
from services.common.brain_requests import HELD, JUDGEMENT, KIND_HEADER, TURN

pytestmark = [pytest.mark.timeout(300), pytest.mark.background]  # CPU work with no clock in it

STORY = [{"role": "user", "content": "Tell me a long story about a brave little dragon."}]
# A reply that cannot end: SmolLM2's end tokens are barred, so it holds its place until its caller hangs up. Its
# length is what the context leaves (n_ctx 2048): ~19 s alone on a 2-core AMD EPYC, longer beside other work.
ENDLESS = {"logit_bias": {"<|im_end|>": -100, "<|endoftext|>": -100}, "logit_bias_type": "tokens"}
ENDLESS_TOKENS = 1900


@pytest.fixture(scope="module", params=[1, 2], ids=["one-worker", "two-workers"])
def brain(tmp_path_factory, request):
    fleet = LocalFleet.on_free_ports(
        tmp_path_factory.mktemp("brain-queue"), ("brain",), brain={"workers": request.param}
    )
    yield fleet
    fleet.stop()


async def reply(
    client: httpx.AsyncClient,
    fleet,
    kind: str,
    max_tokens: int,
    events: list,
    label: str,
    stop=0,
    began=None,
    hang_up: asyncio.Event | None = None,
):
    """A streamed reply asked as ``kind``; ``events`` gets (label, "first") at its first text (and ``began`` is set)
    and (label, "done") at its end. ``stop``: hang up after that many pieces of text. ``hang_up``: the reply cannot
    end (ENDLESS) and the caller hangs up once the event is set."""
    b = fleet.config.brain
    body = {"model": b.model, "messages": STORY, "stream": True, "max_tokens": max_tokens, "temperature": 0.0}
    if hang_up is not None:
        body |= ENDLESS
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
                if hang_up is not None and hang_up.is_set():
                    break
    if hang_up is not None:
        assert hang_up.is_set(), f"{label} ran to its {max_tokens} tokens before the test hung up: make it longer"
    events.append((label, "done"))
    return pieces


async def until_waiting(client: httpx.AsyncClient, fleet, **counts: int) -> None:
    """Until the brain's queue (``GET /v1/queue``) holds ``counts`` waiting requests of each kind named."""
    deadline = time.monotonic() + 120  # only ends a hang; nothing here is timed
    while True:
        response = await client.get(f"{fleet.config.brain.url}/queue")
        assert response.status_code == 200, response.text
        waiting = response.json()["waiting"]
        if all(waiting[kind] == n for kind, n in counts.items()):
            return
        assert time.monotonic() < deadline, f"the brain's queue never held {counts}: {waiting}"
        await asyncio.sleep(0.05)


def test_the_queue_route_names_its_places_and_every_kind(brain):
    """First in the module: nothing has used the brain yet."""
    body = httpx.get(f"{brain.config.brain.url}/queue", timeout=30).json()
    assert body == {
        "places": brain.config.brain.workers,
        "busy": 0,
        "waiting": {"turn": 0, "judgement": 0, "held": 0, "read_ahead": 0},
    }


async def test_a_committed_turn_is_served_before_held_work_that_asked_first(brain):
    workers = brain.config.brain.workers
    events: list = []
    async with httpx.AsyncClient(timeout=120) as client:
        busy, began, hang_up = [], [], []
        for i in range(workers):  # every worker taken: what follows queues
            began.append(asyncio.Event())
            hang_up.append(asyncio.Event())
            busy.append(
                asyncio.create_task(
                    reply(client, brain, TURN, ENDLESS_TOKENS, events, f"busy{i}", began=began[-1], hang_up=hang_up[-1])
                )
            )
        await asyncio.gather(*(b.wait() for b in began))
        held = asyncio.create_task(reply(client, brain, HELD, 4, events, "held"))
        reading = asyncio.create_task(reply(client, brain, JUDGEMENT, 4, events, "judgement"))
        await until_waiting(client, brain, held=1, judgement=1)
        turn = asyncio.create_task(reply(client, brain, TURN, 4, events, "turn"))
        await until_waiting(client, brain, turn=1, held=1, judgement=1)
        hang_up[0].set()  # one place frees: the turn that asked last takes it
        await turn
        for h in hang_up:
            h.set()
        counts = await asyncio.gather(*busy, held, reading)
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
