"""Audio of streams' first segments, kept for reuse (``scheduling.segment_cache_mb``; docs/scheduling.md#segment-cache).

A CPU voice's segment is a pure function of its text, speaking rate and seed (piper draws its noise from the
request's seed: services/engines/piper_seed.py), so a segment said before can be sent again without synthesizing it.
First segments are where that pays: a caller waits for them, and they repeat — a reply model opens with the same
few words ("I'm sorry,", "Sure,", "That's a"), an IVR greets every caller alike. Least recently used first out, bounded
by the bytes of audio held; only engines whose output is bit-for-bit reproducible may use it.
"""

from __future__ import annotations

from collections import OrderedDict

from services.common import metrics

SegmentKey = tuple[str, float, int]  # (segment text, speaking rate, seed)
WordEnds = tuple[tuple[int, int], ...]  # (end char, end sample) of the segment's words (AudioPiece.word_ends)


class SegmentCache:
    def __init__(self, service: str, engine: str, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[SegmentKey, tuple[bytes, WordEnds]] = OrderedDict()
        self._bytes = 0
        self._hits = metrics.TTS_SEGMENT_CACHE.labels(service, engine, "hit")
        self._misses = metrics.TTS_SEGMENT_CACHE.labels(service, engine, "miss")
        self._held = metrics.TTS_SEGMENT_CACHE_BYTES.labels(service, engine)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: SegmentKey) -> tuple[bytes, WordEnds] | None:
        """The segment's audio and word ends when held (now the most recently used), else None; counted as a hit
        or a miss."""
        if not self.max_bytes:
            return None
        entry = self._entries.get(key)
        if entry is None:
            self._misses.inc()
            return None
        self._entries.move_to_end(key)
        self._hits.inc()
        return entry

    def put(self, key: SegmentKey, pcm: bytes, word_ends: WordEnds = ()) -> None:
        """Keep ``pcm`` (and its word ends) for ``key``, dropping the least recently used until it fits (audio
        larger than the whole cache is not kept); the bytes held are the audio's."""
        if not self.max_bytes or len(pcm) > self.max_bytes or key in self._entries:
            return
        self._entries[key] = (pcm, word_ends)
        self._bytes += len(pcm)
        while self._bytes > self.max_bytes:
            _, (dropped, _) = self._entries.popitem(last=False)
            self._bytes -= len(dropped)
        self._held.set(self._bytes)
