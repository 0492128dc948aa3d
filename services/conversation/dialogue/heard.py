"""What the user heard of a reply: the text whose audio was handed out (or played, when the caller says).

An interrupted reply enters the context (and the INTERRUPTED event) only as far as the user heard it, so the agent
never "remembers" saying what it did not say. Each audio piece carries the span of the reply text it speaks; a piece
sent whole counts whole. A piece cut part way counts:

- with the voice's own word timings (``word_ends``: piper's phoneme alignment, services/engines/piper_words.py), the
  words whose sound ended before the cut, exactly;
- without them, pro rata by its voiced audio (a voice's pause before a sentence holds none of its words), less the
  last CUT_WORD_MARGIN_MS before the cut, cut back to a word boundary: pro rata by characters places a word's end no
  closer than about a word, and a word cut part way is not heard as that word (the strict listener, whisper, drops
  it: the Realtime truncate test's item once kept "… backyard. She was a" where the audio said "… backyard.").

Consecutive pieces with the same text span are one piece cut into chunks (a remote voice's 200 ms messages): they
count together, never a chunk for its whole sentence."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.conversation.dialogue.caller_sound import window_levels_db

#: Audio before a cut inside a piece that counts none of its words (about a word).
CUT_WORD_MARGIN_MS = 300


@dataclass
class SentPiece:
    """One audio piece of a reply: the text span it speaks and how much of its audio was handed out."""

    text_start: int
    text_end: int
    total_samples: int
    sent_samples: int = 0
    # Where the piece's words are: its audio from the first to the last sound (``voiced_span``); a voice's pause
    # before a sentence holds none of them.
    voiced_start: int = 0
    voiced_end: int | None = None
    rate: int = 16_000  # the piece's sample rate (for CUT_WORD_MARGIN_MS)
    # (end char in the reply text, end sample in this piece) of each word, in order, when the voice knows them.
    word_ends: tuple[tuple[int, int], ...] = ()


def voiced_span(pcm: bytes) -> tuple[int, int]:
    """[first, last) sample of s16le ``pcm`` that is sound: windows within 40 dB of its loudest and above -55 dBFS."""
    levels, window = window_levels_db(pcm)
    if not len(levels):
        return 0, 0
    voiced = np.flatnonzero((levels >= levels.max() - 40.0) & (levels >= -55.0))
    if not len(voiced):
        return 0, len(pcm) // 2
    return int(voiced[0]) * window, min(len(pcm) // 2, (int(voiced[-1]) + 1) * window)


def heard_text(text: str, pieces: list[SentPiece], played_s: float | None = None) -> str:
    """The prefix of ``text`` whose audio was sent: whole spans of fully sent pieces; a partly sent piece up to its
    last word whose sound was sent (word timings), or pro rata by its voiced audio less a word, cut back to the last
    word boundary. ``played_s``: only that much of the audio sent, in order, counts (what the caller had played when
    the reply was cut; the rest was sent ahead of playback and never heard)."""
    end = 0
    left = played_s
    for p in _whole_pieces(pieces):
        sent = p.sent_samples if left is None else min(p.sent_samples, max(0, round(left * p.rate)))
        if left is not None:
            left -= p.sent_samples / p.rate
        if sent <= 0 or p.text_end <= p.text_start:
            continue
        if sent >= p.total_samples:
            end = max(end, p.text_end)
        elif p.word_ends:
            end = max([end] + [char for char, sample in p.word_ends if sample <= sent])
        else:
            end = max(end, _pro_rata_cut(text, p, sent))
    return text[:end].strip()


def _pro_rata_cut(text: str, p: SentPiece, sent: int) -> int:
    voiced_end = p.total_samples if p.voiced_end is None else p.voiced_end
    heard_until = sent - p.rate * CUT_WORD_MARGIN_MS // 1000
    spoken = min(1.0, max(0.0, (heard_until - p.voiced_start) / max(1, voiced_end - p.voiced_start)))
    cut = p.text_start + int((p.text_end - p.text_start) * spoken)
    while cut > p.text_start and cut < len(text) and not text[cut].isspace():
        cut -= 1
    return cut


def _whole_pieces(pieces: list[SentPiece]) -> list[SentPiece]:
    """Runs of consecutive pieces with one text span (and rate) joined into one: the chunks of one sentence."""
    joined: list[SentPiece] = []
    for p in pieces:
        last = joined[-1] if joined else None
        if last is None or (last.text_start, last.text_end, last.rate) != (p.text_start, p.text_end, p.rate):
            joined.append(SentPiece(**{f: getattr(p, f) for f in SentPiece.__dataclass_fields__}))
            continue
        offset = last.total_samples
        if last.voiced_end is None:
            last.voiced_end = offset
        if p.voiced_end is None or p.voiced_end > p.voiced_start:
            last.voiced_end = offset + (p.total_samples if p.voiced_end is None else p.voiced_end)
        last.word_ends += tuple((char, offset + sample) for char, sample in p.word_ends)
        # Samples count as sent only up to the first chunk not sent whole (chunks go out in order).
        last.sent_samples = last.sent_samples + p.sent_samples if last.sent_samples >= offset else last.sent_samples
        last.total_samples = offset + p.total_samples
    return joined
