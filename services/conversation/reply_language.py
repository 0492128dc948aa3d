"""A reply's language, judged before its voice reads it: the voice must never read a language it cannot speak.

The in-box reply model (SmolLM2-135M) writes English, mostly: asked about a country, it sometimes answers in that
country's language ("What is the capital of Spain?" -> "El primer capital del país, it is Madrid.": 1 of 21 replies
on 2026-11-29 with examples that share nothing with the questions), and piper's English voice would read it. So the
cascade holds a reply's text clause by clause (the voice speaks whole clauses anyway, except its first segment, cut
after ``moss_sts.reply_first_segment_words`` words: the first release is cut there too), and text this identifier is
confident is another language (the clause alone, or the reply so far) is never released: before anything of the
reply was, the reply is asked again with another seed (once, then the turn fails naming the language); after, the
reply ends at the last text released. Short or mixed text the identifier is unsure of passes: an English "Sure,"
scores no language at all. The first two words judge less well: "El primer" is Spanish at 0.93 and "La ciudad" at
0.996, but "Le Grand" only 0.47 (French), so a reply can say two foreign words before the next clause stops it.

The identifier is langid.py's (py3langid: its model ships in the wheel, ~0.1 ms a clause), restricted to the
languages the reply model drifts into and the session's own.
"""

from __future__ import annotations

import functools
import re

from services.common import languages as tags


@functools.lru_cache(maxsize=8)
def _identifier(candidates: tuple[str, ...]):
    """langid.py's identifier restricted to ``candidates`` (loaded once per set: ~0.1 s)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(list(candidates))
    return identifier


# The languages SmolLM2-135M drifted into (13 of 48 replies before the examples: fr, de, es, it, pt), and Dutch.
DRIFTS = ("en", "fr", "de", "es", "it", "pt", "nl")
#: A clause is foreign when the identifier gives another language at least this (normalised over DRIFTS):
#: "El primer capital" 0.83, "La capitale de la France est Paris." 0.80; English clauses that scored another
#: language scored it under 0.3 ("The capital" -> it 0.29).
FOREIGN_CONFIDENCE = 0.75
#: Text held without a clause mark is judged once it is this long (the voice's own buffering: 40 characters).
MAX_HELD_CHARS = 40
#: Text with fewer letters is not judged (it passes): "2 plus 2" scored French at 0.91; from 10 letters on, none of
#: the English openings tried scored another language at 0.75 ("2 plus 2 equals" French 0.50), while "El primer
#: capital" scored Spanish 0.82, "Die Hauptstadt" German 0.91 (2026-11-29). The first text is held until it has this
#: many letters too (or a clause ends): a few ms of the first words' latency, one token at most.
MIN_JUDGED_LETTERS = 10
_CLAUSE_END = re.compile(r"[,;:.!?\u2026](\s|$)")
_COMPLETE_WORD = re.compile(r"\S+\s")  # a word with the whitespace after it: complete


class LanguageGuard:
    """Judges text against the languages a voice speaks (``languages``: BCP-47 tags, e.g. ("en-US",))."""

    def __init__(self, languages: tuple[str, ...]):
        self.languages = languages
        self._identifier = _identifier(tuple(sorted({*DRIFTS, *(t.split("-")[0].lower() for t in languages)})))

    def foreign(self, text: str) -> str | None:
        """The language ``text`` is confidently written in, when the voice does not speak it; else None."""
        if sum(c.isalpha() for c in text) < MIN_JUDGED_LETTERS:
            return None
        language, confidence = self._identifier.classify(text)
        if confidence < FOREIGN_CONFIDENCE or any(tags.matches(language, t) for t in self.languages):
            return None
        return language


class HeldClauses:
    """A reply's text deltas, held until a clause ends (or MAX_HELD_CHARS without one; the first text also after
    ``first_words`` complete words, where the voice cuts its first segment): ``add`` returns the text ready to judge,
    if any; ``rest`` what is left at the end."""

    def __init__(self, first_words: int = 0):
        self._held = ""
        self._first_words = first_words
        self._first = True

    def add(self, delta: str) -> str:
        self._held += delta
        ends = list(_CLAUSE_END.finditer(self._held))
        if ends:
            cut = ends[-1].end()
        elif len(self._held) >= MAX_HELD_CHARS:
            cut = len(self._held)
        elif self._first and self._first_words and (first := self._first_cut()):
            cut = first
        else:
            return ""
        ready, self._held = self._held[:cut], self._held[cut:]
        self._first = False
        return ready

    def _first_cut(self) -> int:
        """Where the first text can go: after ``first_words`` complete words and MIN_JUDGED_LETTERS letters (0: not
        yet)."""
        words = list(_COMPLETE_WORD.finditer(self._held))
        for n, word in enumerate(words, 1):
            if n >= self._first_words and sum(c.isalpha() for c in self._held[: word.end()]) >= MIN_JUDGED_LETTERS:
                return word.end()
        return 0

    def rest(self) -> str:
        rest, self._held = self._held, ""
        return rest
