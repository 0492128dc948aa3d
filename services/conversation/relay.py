"""How a conversation session relays to its caller, once for every session kind (the dialogue's turn-taking and the
router's failover session alike):

* ``EventRelay``: the queue a session's events leave through; it ends once, and an error it ends with is raised to
  the caller after the events queued before it;
* ``AudioRing``: the caller's recent audio, bounded, indexed by stream sample (a turn's audio for engines that
  answer audio; a turn replayed into another session after a failover);
* ``shifted``: a transcript's offsets moved into the caller's stream time.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from services.common.engines import Hypothesis


class EventRelay:
    """Items go out in order until ``end``; after the end nothing more is queued."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()
        self._error: BaseException | None = None
        self.ended = False

    def put(self, item: Any) -> None:
        if not self.ended:
            self._queue.put_nowait(item)

    def end(self, error: BaseException | None = None) -> None:
        """End the events (first call wins); ``error`` is raised to the caller after what was queued before it."""
        if not self.ended:
            self.ended = True
            self._error = error
            self._queue.put_nowait(None)

    async def items(self) -> AsyncIterator[Any]:
        while True:
            item = await self._queue.get()
            if item is None:
                if self._error is not None:
                    raise self._error
                return
            yield item


class AudioRing:
    """The last ``keep_samples`` (or a little more: whole pieces are dropped) of s16le audio, by stream sample."""

    def __init__(self, keep_samples: int):
        self.keep_samples = keep_samples
        self.start = 0  # stream sample index of the ring's first sample
        self.end = 0  # stream sample index after the last sample
        self._pieces: collections.deque[bytes] = collections.deque()
        self._samples = 0

    def append(self, pcm: bytes) -> None:
        self._pieces.append(pcm)
        self._samples += len(pcm) // 2
        self.end += len(pcm) // 2
        while self._pieces and self._samples - len(self._pieces[0]) // 2 >= self.keep_samples:
            dropped = self._pieces.popleft()
            self._samples -= len(dropped) // 2
            self.start += len(dropped) // 2

    def since(self, sample: int) -> bytes:
        """The audio from stream sample ``sample`` (or the ring's start, if that is later) to now."""
        joined = b"".join(self._pieces)
        return joined[max(0, sample - self.start) * 2 :]


def shifted(result: Hypothesis, ms: int) -> Hypothesis:
    """``result`` with its offsets moved ``ms`` later (a stream's time 0 is the caller's stream time ``ms``)."""
    return dataclasses.replace(
        result,
        utterance_start_ms=result.utterance_start_ms + ms,
        utterance_end_ms=result.utterance_end_ms + ms,
        audio_processed_ms=result.audio_processed_ms + ms,
    )
