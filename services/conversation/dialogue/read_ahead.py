"""Reading ahead: the brain evaluates the user's words while they still speak, so the turn's own request resumes from
them (its prompt cache) instead of evaluating them after the turn ends.

The recognizer sends drafts (its greedy decode of the utterance so far, every ``brain_read_ahead_ms``); one is read at
a time (the next draft comes soon). None is read when the caller has paused: if the pause ends the turn, its final
is a moment away and the brain would still be reading the draft, on the cores the final's decode needs, when the
turn's request comes. Counted in ``voicefleet_sts_brain_read_aheads_total{outcome}``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from services.common import metrics

log = logging.getLogger("voicefleet.conversation.dialogue")

# A draft that arrives when the caller has been quiet this long is not read ahead.
READ_AHEAD_QUIET_MS = 64


def as_final_begins(draft: str) -> str:
    """A draft as the final will most likely begin: whisper's finals start with a capital letter, its greedy drafts
    of a short window often do not, and the brain's prompt cache reuses a prefix only token for token."""
    draft = draft.strip()
    return draft[:1].upper() + draft[1:]


class ReadAhead:
    """``read(text)`` is the engine's reading (True: read; False: skipped, the brain is busy)."""

    def __init__(self, read: Callable[[str], Awaitable[bool]], labels: tuple[str, str]):
        self._read = read
        self._labels = labels
        self.task: asyncio.Task | None = None

    def offer(self, pending: list[str], draft: str, quiet_ms: int) -> None:
        """A draft of the utterance in progress, the turn's earlier finals ``pending`` before it, the caller quiet
        for ``quiet_ms``: read it unless a reading is under way or the caller has paused."""
        if self.task is not None and not self.task.done():
            return
        if quiet_ms > READ_AHEAD_QUIET_MS:
            metrics.STS_BRAIN_READ_AHEADS.labels(*self._labels, "skipped").inc()
            return
        text = " ".join([*pending, as_final_begins(draft)]).strip()
        self.task = asyncio.create_task(self._reading(text), name="dialogue-read-ahead")

    async def _reading(self, text: str) -> None:
        try:
            sent = await self._read(text)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - only a head start: the turn's own request evaluates the words
            log.info("reading ahead failed (the turn evaluates the words itself): %s", e)
            metrics.STS_BRAIN_READ_AHEADS.labels(*self._labels, "failed").inc()
            return
        metrics.STS_BRAIN_READ_AHEADS.labels(*self._labels, "done" if sent else "skipped").inc()
