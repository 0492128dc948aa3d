"""Reply audio handed out at the pace it plays: cut into small chunks (a short first one), each queued only while
the audio queued is at most ``playout_lead_s`` ahead of what the caller has taken and of what has played.

So an interruption stops what the user would hear (audio not yet handed out is never sent), and what was handed out
is known piece by piece (heard.py). A held reply's audio waits here for the commit (reply.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

from services.common.engines import REPLY_AUDIO, REPLY_TEXT, AudioPiece, StsEvent
from services.conversation.dialogue.heard import SentPiece, voiced_span
from services.conversation.dialogue.limits import DialogueLimits
from services.conversation.dialogue.reply import Reply


class Playout:
    """``emit(event, extra)`` queues an event to the caller; ``speaking()`` runs before a reply's first chunk."""

    def __init__(self, limits: DialogueLimits, emit: Callable[..., None], speaking: Callable[[], None]):
        self.limits = limits
        self._emit = emit
        self._speaking = speaking

    async def text(self, reply: Reply, delta: str) -> None:
        if reply.first_text_wall is None:
            reply.first_text_wall = time.monotonic()
        reply.text += delta
        if reply.hold_text(delta):
            return
        self._emit(StsEvent(REPLY_TEXT, reply.turn.index, text=delta))

    async def audio(self, reply: Reply, piece: AudioPiece) -> None:
        """Cut the piece into chunks and hand each out when playback is within ``playout_lead_s`` of it."""
        samples = len(piece.pcm) // 2
        if samples == 0:
            return
        if reply.held:
            await reply.released.wait()  # a preemptive reply: nothing is sent before the turn commits
        if reply.discarded:
            raise asyncio.CancelledError
        sent = SentPiece(
            piece.text_start,
            piece.text_end,
            samples,
            0,
            *voiced_span(piece.pcm),
            piece.sample_rate_hz,
            word_ends=piece.word_ends,
        )
        reply.pieces.append(sent)
        rate = piece.sample_rate_hz
        offset = 0
        lead = self.limits.playout_lead_s
        while offset < samples:
            limit_ms = self.limits.first_chunk_ms if not reply.started_speaking else self.limits.chunk_ms
            n = min(samples - offset, max(1, rate * limit_ms // 1000))
            # Pace: queue a chunk only while the audio queued is at most `lead` ahead of both what the caller has
            # taken and what has played since the first chunk went out.
            while True:
                if reply.interrupted_reason:
                    raise asyncio.CancelledError  # belt and braces: never queue audio for a cut reply
                played = time.monotonic() - reply.first_audio_wall if reply.first_audio_wall else 0.0
                ahead = reply.queued_s - min(reply.sent_s, played)
                if ahead <= lead:
                    break
                reply.progress.clear()
                # Not asyncio.wait_for: on Python 3.11 it can swallow a cancel (the interruption) when the event
                # is set in the same loop iteration; asyncio.wait never does.
                waiter = asyncio.ensure_future(reply.progress.wait())
                try:
                    await asyncio.wait({waiter}, timeout=max(0.005, ahead - lead))
                finally:
                    waiter.cancel()
            chunk = dataclasses.replace(piece, pcm=piece.pcm[offset * 2 : (offset + n) * 2])
            if not reply.started_speaking:
                reply.started_speaking = True
                self._speaking()
            self._emit(StsEvent(REPLY_AUDIO, reply.turn.index, audio=chunk), (reply, sent, n))
            offset += n
            reply.queued_s += n / rate

    @staticmethod
    def taken(reply: Reply, piece: SentPiece, samples: int, rate: int) -> bool:
        """The caller took ``samples`` of ``piece`` (the relay handed the chunk out): counted as heard, and the pacing
        wakes. Returns whether it was the reply's first audio."""
        now = time.monotonic()
        first = reply.first_audio_wall is None
        if first:
            reply.first_audio_wall = now
        piece.sent_samples += samples
        reply.sent_s += samples / rate
        reply.last_audio_wall = now
        reply.progress.set()
        return first
