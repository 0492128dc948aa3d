"""Playout: reply audio handed out in small chunks at the pace it plays; a held reply's audio waits for the commit;
a dropped or interrupted reply queues nothing more (services/conversation/dialogue/playout.py). In virtual time."""

from __future__ import annotations

import asyncio

import pytest

from services.common.engines import REPLY_AUDIO, REPLY_TEXT, AudioPiece
from services.conversation.dialogue.limits import DialogueLimits
from services.conversation.dialogue.playout import Playout
from services.conversation.dialogue.reply import Reply, UserTurn
from tests.conversation.dialogue.kit import tone, virtual_time

LIMITS = DialogueLimits(echo_cancellation=False)


class Caller:
    """Takes every chunk as soon as it is queued (a caller with a fast line), noting when."""

    def __init__(self):
        self.chunks: list[tuple[float, float, int]] = []  # (time, audio queued before it, samples)
        self.texts: list[str] = []
        self.speaking = 0

    def emit(self, event, extra=None):
        if event.kind == REPLY_TEXT:
            self.texts.append(event.text)
            return
        assert event.kind == REPLY_AUDIO
        reply, piece, samples = extra
        self.chunks.append((asyncio.get_running_loop().time(), reply.queued_s, samples))
        Playout.taken(reply, piece, samples, event.audio.sample_rate_hz)


def reply(**kw) -> Reply:
    return Reply(UserTurn(0, "Hi", None, None, 0.0), **kw)


def test_a_short_first_chunk_then_chunks_of_chunk_ms(monkeypatch):
    caller = Caller()
    playout = Playout(LIMITS, caller.emit, lambda: setattr(caller, "speaking", caller.speaking + 1))
    r = reply()
    with virtual_time(monkeypatch) as run:
        run(playout.audio(r, AudioPiece(tone(1000), 16_000, 0, 10, "t/t")))
    assert [n for _, _, n in caller.chunks] == [640] + [1600] * 9 + [960]
    assert caller.speaking == 1 and r.started_speaking
    assert r.pieces[0].sent_samples == 16_000 and r.sent_s == 1.0


def test_audio_is_queued_at_most_playout_lead_ahead_of_what_has_played(monkeypatch):
    caller = Caller()
    playout = Playout(LIMITS, caller.emit, lambda: None)
    with virtual_time(monkeypatch) as run:
        run(playout.audio(reply(), AudioPiece(tone(2000), 16_000, 0, 10, "t/t")))
    t0 = caller.chunks[0][0]
    for t, queued, _ in caller.chunks:
        assert queued - (t - t0) <= LIMITS.playout_lead_s + 1e-6
    assert caller.chunks[-1][0] - t0 >= 2.0 - LIMITS.playout_lead_s - LIMITS.chunk_ms / 1000


def test_a_held_reply_sends_nothing_before_its_release(monkeypatch):
    caller = Caller()
    playout = Playout(LIMITS, caller.emit, lambda: None)
    r = reply(held=True)

    async def scenario():
        await playout.text(r, "Hi.")
        task = asyncio.create_task(playout.audio(r, AudioPiece(tone(200), 16_000, 0, 3, "t/t")))
        await asyncio.sleep(1.0)
        assert caller.texts == [] and caller.chunks == [] and r.text == "Hi."
        assert r.release() == ["Hi."]
        await task

    with virtual_time(monkeypatch) as run:
        run(scenario())
    assert sum(n for _, _, n in caller.chunks) == 3200


@pytest.mark.parametrize("how", ["discarded", "interrupted"])
def test_a_dropped_or_interrupted_reply_queues_nothing_more(monkeypatch, how):
    caller = Caller()
    playout = Playout(LIMITS, caller.emit, lambda: None)
    r = reply(held=how == "discarded")

    async def scenario():
        task = asyncio.create_task(playout.audio(r, AudioPiece(tone(3000), 16_000, 0, 3, "t/t")))
        await asyncio.sleep(0.5)
        if how == "discarded":
            r.discard()
        else:
            r.interrupted_reason = "barge_in"
        await asyncio.wait({task})
        return task

    with virtual_time(monkeypatch) as run:
        task = run(scenario())
    assert task.cancelled()
    queued = sum(n for _, _, n in caller.chunks)
    assert queued == 0 if how == "discarded" else 0 < queued < 16_000
