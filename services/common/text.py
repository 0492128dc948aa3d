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
class FirstSegment:
    """Where the FIRST segment of a text is cut, so its audio starts early; later segments stay sentence-sized
    (prosody). One rule for Synthesize (``speech_segments``) and streaming text (``IncrementalSegmenter``); its
    knobs are ``<service>.chunking`` (ChunkingConfig.first_segment)."""

    # A first sentence up to this long is spoken whole: a cut inside a phrase costs an audible pause (piper: the
    # "meeting" sentence cut after 5 words came out 0.25 s longer). A CJK character counts as three (``spoken_len``).
    # Streaming text: decided once more than this arrived without a sentence end. 0: never cut.
    max_chars: int = 60
    # The first segment has at least this many characters (no "Oh," alone); in whole text so has what follows it.
    min_chars: int = 12
    # No clause mark: cut after this many words (0: never cut inside a clause), at a word boundary; in a stream
    # only once whitespace after the word arrived (the word is complete).
    words: int = 5
    # Text without spaces (CJK): cut after this many characters when no clause mark comes.
    cjk_chars: int = 10


@dataclass(frozen=True)
class BufferPolicy:
    """When buffered streaming text is spoken (TextBufferPolicy in the contract)."""

    # A clause ending in , ; : is spoken once it has this many characters, before its sentence ends.
    min_chars: int = 60
    # Whatever complete words are buffered are spoken once no new text came for this long (a first segment only once
    # it has ``first.min_chars``).
    max_wait_s: float = 0.4
    # The first segment's own, earlier cut (None: the first segment follows the rules above like every other).
    first: FirstSegment | None = None


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) spans of the sentences of ``text``, whitespace trimmed; empty sentences dropped."""
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.end()))
        start = m.end()
    spans.append((start, len(text)))
    return [s for s in (_trim(text, a, b) for a, b in spans) if s]


def speech_segments(text: str, first: FirstSegment | None) -> list[tuple[int, int]]:
    """Sentence spans, with a first sentence longer than ``first.max_chars`` cut where ``first_cut`` says.

    A shorter first segment means earlier first audio; later segments stay whole sentences for prosody.
    ``first`` None (or max_chars 0): sentences only.
    """
    spans = sentence_spans(text)
    if not spans or first is None or not first.max_chars:
        return spans
    a, b = spans[0]
    if spoken_len(text, a, b) <= first.max_chars:
        return spans
    cut = first_cut(text, a, b, first, complete=True)
    if cut is None:
        return spans
    head, tail = _trim(text, a, cut), _trim(text, cut, b)
    return [head, tail, *spans[1:]] if head and tail else spans


# CJK ideographs, kana and hangul: text written without spaces between words.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD = re.compile(r"\S+")


def spoken_len(text: str, a: int, b: int) -> int:
    """Length of ``text[a:b]`` in characters of English speech: a CJK character (a syllable) is spoken about as long
    as three letters, so a first-segment bound in characters holds for both."""
    return b - a + 2 * len(_CJK.findall(text, a, b))


def _spoken_index(text: str, a: int, b: int, limit: int) -> int:
    """The end of the longest ``text[a:i]`` (i <= b) whose ``spoken_len`` is at most ``limit`` + 1."""
    i, length = a, 0
    while i < b and length <= limit:
        length += 3 if _CJK.match(text, i) else 1
        i += 1
    return i


def first_cut(text: str, a: int, b: int, rule: FirstSegment, complete: bool) -> int | None:
    """Where the first segment of the sentence ``text[a:b]`` ends, earlier than the sentence end; None: no cut.

    The first clause mark (within ``rule.max_chars``) with at least ``rule.min_chars`` before it, else the end of
    word ``rule.words`` once the segment has ``rule.min_chars``, or in text without spaces (CJK) character
    ``rule.cjk_chars``. ``complete``: the sentence ends at ``b`` (whole text; the rest must keep ``rule.min_chars``
    too). Not complete (a stream, ``b`` is what arrived so far): a word counts only when whitespace follows it, as
    the next token may extend it.
    """
    while a < b and text[a].isspace():
        a += 1
    tail_min = rule.min_chars if complete else 0
    # Clause marks count within the first max_chars only: what a stream has seen when it decides (so streamed text
    # is cut where the same text in one piece is).
    seen = _spoken_index(text, a, b, rule.max_chars) if rule.max_chars else b
    for m in _CLAUSE_MARK.finditer(text, a + rule.min_chars, max(a, min(seen, b - tail_min))):
        if complete and not _trim(text, m.end(), b):
            break
        return m.end()
    if rule.words <= 0:
        return None
    words = 0
    for m in _WORD.finditer(text, a, b):
        cjk = _CJK.search(text, m.start(), m.end())
        if cjk is not None:  # no spaces to cut at: count characters from the first CJK one
            cut = cjk.start() + rule.cjk_chars
            if cut < m.end() and b - cut >= tail_min:
                return cut  # a CJK character is a whole unit: it needs no whitespace after it
            if cut < m.end():
                continue
        words += 1
        if words < rule.words or m.end() - a < rule.min_chars:
            continue
        if m.end() >= b or (not complete and m.end() >= len(text)):
            return None  # the word may still grow (stream) or is the sentence's last (whole text)
        return m.end() if b - m.end() > tail_min else None
    return None


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

    With ``first``, the FIRST segment is cut as ``speech_segments`` cuts whole text (``first_cut``: a first sentence
    longer than ``first.max_chars`` at its first clause mark, or after its first few complete words), decided as
    soon as more than ``first.max_chars`` arrived without a sentence end: speech starts while the rest of the
    sentence is still being written, and streamed text is cut where the same text in one piece would be. Later
    segments follow the rules above.
    """

    def __init__(self, min_chars: int = 60, max_chars: int = 300, first: FirstSegment | None = None):
        self.min_chars = min_chars
        self.max_chars = max(max_chars, min_chars + 1)
        self.first = first
        self.text = ""
        self._start = 0  # start of the text not yet given out as a segment
        self._first_given = False

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
        not cut a word the LLM is still writing); nothing when the buffer is one unfinished word, nor, with a
        ``first`` rule, a first segment shorter than its ``min_chars`` (a brain that stalls after "The" must not
        make the voice say "The" alone: piper's lone "The" is heard as "that")."""
        end = len(self.text)
        if whole_words and not self.text[end - 1 : end].isspace():
            last_space = max((m.start() for m in _WHITESPACE.finditer(self.text, self._start)), default=-1)
            if last_space < 0:
                return []
            end = last_space
        if whole_words and self.first is not None and not self._first_given:
            a, b = _trim(self.text, self._start, end) or (end, end)
            if spoken_len(self.text, a, b) < self.first.min_chars:
                return []
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
        if self.first is not None and self.first.max_chars and not self._first_given:
            # The whole-text rule, decided as soon as it can be: a first sentence is known to be long once more
            # than max_chars arrived without its end; a short one is spoken whole (as Synthesize speaks it).
            end = sentence.end() if sentence else len(text)
            if spoken_len(text, body, end) > self.first.max_chars:
                early = first_cut(text, body, end, self.first, complete=sentence is not None)
                if early is not None and (cut is None or early < cut):
                    cut = early
        return cut

    def _take(self, end: int) -> list[tuple[int, int]]:
        span = _trim(self.text, self._start, end)
        self._start = end
        if span:
            self._first_given = True
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
    segmenter = IncrementalSegmenter(policy.min_chars, first=policy.first)
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


# --- words of a transcript, as phrase matching compares them --------------------------------------------------------
_HYPHEN = re.compile(r"(?<=\w)-(?=\w)")
_NOT_WORD = re.compile(r"[^\w' ]+")


def spoken_words(text: str) -> list[str]:
    """Normalised words of a transcript: lower case, hyphens joined ("mm-hm" -> "mmhm", "uh-huh" -> "uhhuh"), other
    punctuation dropped, so whisper's "Mm-hmm." and pocketsphinx's "mm hmm" compare alike. Shared by barge-in by
    words (services/conversation/barge_in.py) and phrase spotting (RecognitionConfig.spot_phrases)."""
    text = _HYPHEN.sub("", text.lower())
    return [w.strip("'") for w in _NOT_WORD.sub(" ", text).split() if w.strip("'")]


def has_phrase(heard: list[str], phrase: tuple[str, ...] | list[str]) -> bool:
    """Whether the normalised words ``phrase`` occur in ``heard`` as whole words, in order, side by side."""
    n = len(phrase)
    return n > 0 and any(tuple(heard[i : i + n]) == tuple(phrase) for i in range(len(heard) - n + 1))
