"""Streaming text (``TextEvent``, ``BufferPolicy``) and cutting text into speakable segments, with their spans in the
original text. Imports nothing of the project, so the engine interfaces (engines.py) can build on it."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

# A sentence ends at . ! ? … (or CJK 。！？) followed by space or the end, or at a line break.
_SENTENCE_END = re.compile(r"(?:[.!?…]+[\"')\]]*(?=\s|$))|[。！？]+|\n+")
_CLAUSE_MARK = re.compile(r"[,;:，；：](?=\s|$)|[，；：]")


@dataclass(frozen=True)
class TextEvent:
    """One message of streaming text input: a delta of text, a flush, or the end of the text."""

    text: str = ""
    flush: bool = False
    end: bool = False


@dataclass(frozen=True)
class BufferPolicy:
    """When buffered streaming text is spoken (TextBufferPolicy in the contract)."""

    # A clause ending in , ; : is spoken once it has this many characters, before its sentence ends.
    min_chars: int = 60
    # Whatever complete words are buffered are spoken once no new text came for this long.
    max_wait_s: float = 0.4


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) spans of the sentences of ``text``, whitespace trimmed; empty sentences dropped."""
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.end()))
        start = m.end()
    spans.append((start, len(text)))
    return [s for s in (_trim(text, a, b) for a, b in spans) if s]


def speech_segments(text: str, first_max_chars: int, min_first_chars: int) -> list[tuple[int, int]]:
    """Sentence spans, with a long first sentence cut at its first clause mark past ``min_first_chars``.

    A shorter first segment means earlier first audio; later segments stay whole sentences for prosody.
    """
    spans = sentence_spans(text)
    if not spans or not first_max_chars:
        return spans
    a, b = spans[0]
    if b - a <= first_max_chars:
        return spans
    for m in _CLAUSE_MARK.finditer(text, a + min_first_chars, b - min_first_chars):
        head, tail = _trim(text, a, m.end()), _trim(text, m.end(), b)
        if head and tail:
            return [head, tail, *spans[1:]]
    return spans


def _trim(text: str, a: int, b: int) -> tuple[int, int] | None:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return (a, b) if b > a else None


# --- text that arrives in pieces (StreamingSynthesize) ------------------------------------------------------------
# In a stream a "." at the end of what arrived so far may still turn out to be "3.14" or "e.g": a sentence end counts
# only once whitespace follows it. CJK full stops and line breaks are unambiguous and count at once.
_STREAM_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*(?=\s)|[。！？]+[\"'”’」』)\]]*|\n+")
_STREAM_CLAUSE_MARK = re.compile(r"[,;:](?=\s)|[，；：、]")
_WHITESPACE = re.compile(r"\s")


class IncrementalSegmenter:
    """Cuts text fed piece by piece (LLM tokens) into speakable segments as soon as each is complete.

    A segment ends at the first of:
      * a sentence end followed by whitespace (or a CJK full stop, or a line break);
      * a clause mark (, ; : and CJK ，；：、) once the segment has at least ``min_chars`` characters;
      * the last whitespace before ``max_chars`` when no punctuation comes (text with no punctuation at all);
    and ``flush()`` ends one wherever the text is. Spans index ``self.text``, the concatenation of every piece.
    """

    def __init__(self, min_chars: int = 60, max_chars: int = 300):
        self.min_chars = min_chars
        self.max_chars = max(max_chars, min_chars + 1)
        self.text = ""
        self._start = 0  # start of the text not yet given out as a segment

    @property
    def pending(self) -> bool:
        """Buffered text with something to say."""
        return bool(self.text[self._start :].strip())

    def feed(self, delta: str) -> list[tuple[int, int]]:
        self.text += delta
        spans = []
        while True:
            cut = self._next_cut()
            if cut is None:
                return spans
            spans += self._take(cut)

    def flush(self, whole_words: bool = False) -> list[tuple[int, int]]:
        """Everything buffered as one segment. ``whole_words``: only up to the last whitespace (a timer flush must
        not cut a word the LLM is still writing); nothing when the buffer is one unfinished word."""
        end = len(self.text)
        if whole_words and not self.text[end - 1 : end].isspace():
            last_space = max((m.start() for m in _WHITESPACE.finditer(self.text, self._start)), default=-1)
            if last_space < 0:
                return []
            end = last_space
        return self._take(end)

    def _next_cut(self) -> int | None:
        text, start = self.text, self._start
        sentence = _STREAM_SENTENCE_END.search(text, start)
        cut = sentence.end() if sentence else None
        # Leading whitespace does not count towards min_chars.
        body = start + (len(text[start:]) - len(text[start:].lstrip()))
        for m in _STREAM_CLAUSE_MARK.finditer(text, start, cut if cut is not None else len(text)):
            if m.end() - body >= self.min_chars:
                cut = m.end()
                break
        if cut is None and len(text) - body > self.max_chars:
            spaces = [m.start() for m in _WHITESPACE.finditer(text, body, body + self.max_chars)]
            cut = spaces[-1] if spaces and spaces[-1] > body else body + self.max_chars
        return cut

    def _take(self, end: int) -> list[tuple[int, int]]:
        span = _trim(self.text, self._start, end)
        self._start = end
        return [span] if span else []


@dataclass(frozen=True)
class TextSegment:
    """A segment ready to speak: ``text`` is ``all_text[start:end]``."""

    start: int
    end: int
    text: str


_END, _FAILED = object(), object()


async def stream_segments(events: AsyncIterator[TextEvent], policy: BufferPolicy) -> AsyncIterator[TextSegment]:
    """Segments of streaming text, each as soon as it is complete, while more text keeps arriving.

    The events are read by a task of their own, so the text keeps flowing (and the max-wait timer keeps time)
    while the caller speaks the previous segment. ``end`` (or the events running out) speaks the rest. Events
    after ``end`` are still read until the caller has spoken the last segment, so an error they raise (e.g. text
    after end_of_text) reaches the caller. Closing this generator stops the reading task.
    """
    segmenter = IncrementalSegmenter(policy.min_chars)
    ready: asyncio.Queue = asyncio.Queue()
    failure: list[BaseException] = []

    def put(spans: list[tuple[int, int]]) -> None:
        for a, b in spans:
            ready.put_nowait(TextSegment(a, b, segmenter.text[a:b]))

    async def pump() -> None:
        source = aiter(events)
        pending_read: asyncio.Future | None = None
        ended = False
        try:
            while True:
                if pending_read is None:
                    pending_read = asyncio.ensure_future(anext(source, None))
                timeout = policy.max_wait_s if segmenter.pending and not ended else None
                done, _ = await asyncio.wait({pending_read}, timeout=timeout)
                if not done:  # no new text for max_wait: speak the complete words buffered so far
                    put(segmenter.flush(whole_words=True))
                    continue
                event, pending_read = pending_read.result(), None
                if event is None:  # the caller stopped sending: what is buffered is the rest
                    if not ended:
                        put(segmenter.flush())
                        ready.put_nowait(_END)
                    return
                if event.text:
                    put(segmenter.feed(event.text))
                if event.flush:
                    put(segmenter.flush())
                if event.end and not ended:
                    ended = True
                    put(segmenter.flush())
                    ready.put_nowait(_END)
        except Exception as e:  # noqa: BLE001 - handed to the consumer, raised there
            failure.append(e)
            ready.put_nowait(_FAILED)
        finally:
            if pending_read is not None:
                pending_read.cancel()

    reader = asyncio.create_task(pump(), name="stream-segments")
    try:
        while True:
            item = await ready.get()
            if failure:  # a bad message wins over segments still queued: stop speaking, report it
                raise failure[0]
            if item is _END:
                break
            yield item
        if failure:  # e.g. a text delta after end_of_text arrived while the last segment was spoken
            raise failure[0]
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
