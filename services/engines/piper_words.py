"""Where each word of a piper segment ends in its audio, from the voice's own phoneme alignment.

piper's VITS graph computes how many audio frames each phoneme id lasts (its ``w_ceil`` tensor); piper exposes it
as ``AudioChunk.phoneme_alignments`` once that tensor is a graph output (``piper.patch_voice_with_alignment``, done
at load in piper_seed.seeded_model). espeak-ng's phonemes separate words with a space, so the sample where each
spoken word ends is known exactly. The conversation uses it to say which words of a reply cut part way the caller
heard (services/conversation/dialogue/heard.py).

Spoken words and written ones do not always pair up: espeak joins some ("was a" -> "wʌzɐ") and spells out others
("1,234" -> five words). They are paired by a small alignment (dynamic programming over both word lists, on word
lengths: a written word's letters against a spoken word's phonemes, a digit weighing DIGIT_LETTERS letters), where
a written word is one spoken word, two written words are one spoken word, or one written word is several spoken
ones. A written word ends where the last spoken word of its group ends, so two joined words both end where the
joined sound does (never before their sound did).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

#: piper's sentence start / end markers and espeak's word separator among the phonemes.
_BOS, _EOS, _SPACE = "^", "$", " "
_WORD = re.compile(r"\S+")
#: A digit's weight in letters ("18" is spoken "eighteen": 7 phonemes for 2 digits).
DIGIT_LETTERS = 3
#: What is not a sound among piper's phonemes: markers, the word separator, stress and punctuation.
_NOT_SOUNDS = frozenset("^$ ˈˌ,.!?;:-—…\"'()")
#: Alignment penalties: two written words said as one, one written word said as several (each extra), at most this
#: many (a four-digit number is five spoken words).
_JOIN, _SPLIT, _MAX_SPLIT = 0.5, 0.3, 8


def spoken_word_ends(chunks: Iterable) -> list[tuple[int, int]]:
    """(phonemes, sample where the word's sound ends) for each spoken word of piper's ``AudioChunk``s, in order,
    their audio taken as joined; [] when a chunk has no alignment (the model did not give one)."""
    ends: list[tuple[int, int]] = []
    base = 0
    for chunk in chunks:
        alignments = chunk.phoneme_alignments
        if not alignments:
            return []
        at, in_word = base, 0
        for a in alignments:
            if a.phoneme in (_SPACE, _EOS) and in_word:
                ends.append((in_word, at))
                in_word = 0
            if a.phoneme not in _NOT_SOUNDS:
                in_word += 1
            at += int(a.num_samples)
        if in_word:
            ends.append((in_word, at))
        base += len(chunk.audio_int16_bytes) // 2
    return ends


def written_words(text: str) -> list[tuple[int, int]]:
    """(letters, end char) of each written word of ``text`` that has a letter or digit (a digit weighs
    DIGIT_LETTERS)."""
    words = []
    for m in _WORD.finditer(text):
        n = sum(DIGIT_LETTERS if c.isdigit() else 1 for c in m.group() if c.isalnum())
        if n:
            words.append((n, m.end()))
    return words


def word_ends(text: str, chunks: Iterable) -> tuple[tuple[int, int], ...]:
    """(end char in ``text``, end sample in the joined audio) of each written word of ``text``, in order; () without
    an alignment."""
    spoken = spoken_word_ends(chunks)
    written = written_words(text)
    if not spoken or not written:
        return ()
    groups = _pair(written, spoken)
    if groups is None:
        return ()
    return tuple((written[i][1], spoken[k][1]) for i, k in groups)


def _cost(letters: int, phonemes: int) -> float:
    return abs(math.log(max(1, letters) / max(1, phonemes)))


def _pair(written: list[tuple[int, int]], spoken: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """For each written word i, the last spoken word k of its group, by the cheapest alignment; None when none
    covers both lists (more written words than two per spoken one)."""
    n, m = len(written), len(spoken)
    inf = float("inf")
    best = [[inf] * (m + 1) for _ in range(n + 1)]
    step: list[list[tuple[int, int] | None]] = [[None] * (m + 1) for _ in range(n + 1)]
    best[0][0] = 0.0
    for i in range(1, n + 1):
        for k in range(1, m + 1):
            # (written words, spoken words) in the group ending at (i, k), and the cost of such a group.
            moves = [(1, 1, 0.0), (2, 1, _JOIN)] + [(1, s, _SPLIT * (s - 1)) for s in range(2, _MAX_SPLIT + 1)]
            for dw, ds, penalty in moves:
                if dw > i or ds > k or best[i - dw][k - ds] == inf:
                    continue
                letters = sum(w for w, _ in written[i - dw : i])
                phonemes = sum(p for p, _ in spoken[k - ds : k])
                cost = best[i - dw][k - ds] + _cost(letters, phonemes) + penalty
                if cost < best[i][k]:
                    best[i][k], step[i][k] = cost, (dw, ds)
    if best[n][m] == inf:
        return None
    ends: list[tuple[int, int]] = []
    i, k = n, m
    while i:
        dw, ds = step[i][k]
        ends += [(w, k - 1) for w in range(i - 1, i - dw - 1, -1)]
        i, k = i - dw, k - ds
    return sorted(ends)
