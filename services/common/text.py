"""Cutting text into speakable segments, with their spans in the original text."""

from __future__ import annotations

import re

# A sentence ends at . ! ? … (or CJK 。！？) followed by space or the end, or at a line break.
_SENTENCE_END = re.compile(r"(?:[.!?…]+[\"')\]]*(?=\s|$))|[。！？]+|\n+")
_CLAUSE_MARK = re.compile(r"[,;:，；：](?=\s|$)|[，；：]")


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
