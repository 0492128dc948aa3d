"""What the user heard of a reply: the text whose audio was handed out.

An interrupted reply enters the context (and the INTERRUPTED event) only as far as the user heard it, so the agent
never "remembers" saying what it did not say. Each audio piece carries the span of the reply text it speaks; a piece
sent whole counts whole, a piece cut part way counts pro rata by its voiced audio (a voice's pause before a sentence
holds none of its words), less the last CUT_WORD_MARGIN_MS before the cut, cut back to a word boundary: pro rata by
characters places a word's end no closer than about a word, and a word cut part way is not heard as that word (the
strict listener, whisper, drops it: the Realtime truncate test's item kept "… backyard. She was a" where the audio
it got said "… backyard.")."""

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


def voiced_span(pcm: bytes) -> tuple[int, int]:
    """[first, last) sample of s16le ``pcm`` that is sound: windows within 40 dB of its loudest and above -55 dBFS."""
    levels, window = window_levels_db(pcm)
    if not len(levels):
        return 0, 0
    voiced = np.flatnonzero((levels >= levels.max() - 40.0) & (levels >= -55.0))
    if not len(voiced):
        return 0, len(pcm) // 2
    return int(voiced[0]) * window, min(len(pcm) // 2, (int(voiced[-1]) + 1) * window)


def heard_text(text: str, pieces: list[SentPiece], played_samples: int | None = None) -> str:
    """The prefix of ``text`` whose audio was sent: whole spans of fully sent pieces; a partly sent piece counts
    pro rata by its voiced audio (the silence before its first sound holds no words), cut back to the last word
    boundary. ``played_samples``: only that much of the audio sent, in order, counts (what the caller had played when
    the reply was cut; the rest was sent ahead of playback and never heard)."""
    end = 0
    left = played_samples
    for p in pieces:
        sent = p.sent_samples if left is None else min(p.sent_samples, max(0, left))
        if left is not None:
            left -= p.sent_samples
        if sent <= 0 or p.text_end <= p.text_start:
            continue
        if sent >= p.total_samples:
            end = max(end, p.text_end)
            continue
        voiced_end = p.total_samples if p.voiced_end is None else p.voiced_end
        heard_until = sent - p.rate * CUT_WORD_MARGIN_MS // 1000
        spoken = min(1.0, max(0.0, (heard_until - p.voiced_start) / max(1, voiced_end - p.voiced_start)))
        cut = p.text_start + int((p.text_end - p.text_start) * spoken)
        while cut > p.text_start and cut < len(text) and not text[cut].isspace():
            cut -= 1
        end = max(end, cut)
    return text[:end].strip()
