"""What the user heard of a reply: the text whose audio was handed out.

An interrupted reply enters the context (and the INTERRUPTED event) only as far as the user heard it, so the agent
never "remembers" saying what it did not say. Each audio piece carries the span of the reply text it speaks; a piece
sent whole counts whole, a piece cut part way counts pro rata by its voiced audio (a voice's pause before a sentence
holds none of its words), cut back to a word boundary."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.conversation.dialogue.caller_sound import window_levels_db


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


def voiced_span(pcm: bytes) -> tuple[int, int]:
    """[first, last) sample of s16le ``pcm`` that is sound: windows within 40 dB of its loudest and above -55 dBFS."""
    levels, window = window_levels_db(pcm)
    if not len(levels):
        return 0, 0
    voiced = np.flatnonzero((levels >= levels.max() - 40.0) & (levels >= -55.0))
    if not len(voiced):
        return 0, len(pcm) // 2
    return int(voiced[0]) * window, min(len(pcm) // 2, (int(voiced[-1]) + 1) * window)


def heard_text(text: str, pieces: list[SentPiece]) -> str:
    """The prefix of ``text`` whose audio was sent: whole spans of fully sent pieces; a partly sent piece counts
    pro rata by its voiced audio (the silence before its first sound holds no words), cut back to the last word
    boundary."""
    end = 0
    for p in pieces:
        if p.sent_samples <= 0 or p.text_end <= p.text_start:
            continue
        if p.sent_samples >= p.total_samples:
            end = max(end, p.text_end)
            continue
        voiced_end = p.total_samples if p.voiced_end is None else p.voiced_end
        spoken = min(1.0, max(0.0, (p.sent_samples - p.voiced_start) / max(1, voiced_end - p.voiced_start)))
        cut = p.text_start + int((p.text_end - p.text_start) * spoken)
        while cut > p.text_start and cut < len(text) and not text[cut].isspace():
            cut -= 1
        end = max(end, cut)
    return text[:end].strip()
