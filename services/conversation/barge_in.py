"""Barge-in by words: tell "stop" from "mm-hm" from the transcript of speech over the agent's reply.

Duration alone cannot separate a backchannel ("okay", "mm-hm": 300-700 ms) from a short command ("stop", "wait":
the same length) — docs/conversation.md. The transcript can: speech over the reply interrupts at once when it holds a
stop word or phrase, or once it has ``min_words`` words that are not backchannels; speech made only of backchannels
never interrupts. Words are compared normalised: lower case, hyphens joined ("mm-hm" -> "mmhm", "uh-huh" ->
"uhhuh"), other punctuation dropped, so whisper's "Mm-hmm." and pocketsphinx's "mm hmm" both match.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config.base import (  # noqa: F401 - the lists live with the config that names them
    DEFAULT_BACKCHANNELS,
    DEFAULT_MIN_WORDS,
    DEFAULT_STOP_WORDS,
)
from services.common.text import has_phrase
from services.common.text import spoken_words as words

FILLER_WORDS = frozenset(("the", "an", "and", "of", "to", "in", "on", "is", "it", "that", "this", "them", "his", "her"))


@dataclass(frozen=True)
class Verdict:
    interrupt: bool
    why: str  # stop_word | words | backchannel | too_few_words | empty


class WordRule:
    """The words part of the barge-in decision, for one session's settings."""

    def __init__(self, stop_words: tuple[str, ...], backchannels: tuple[str, ...], min_words: int):
        self.stop_phrases = [tuple(words(s)) for s in (stop_words or DEFAULT_STOP_WORDS) if words(s)]
        self.backchannels = {w for b in (backchannels or DEFAULT_BACKCHANNELS) for w in words(b)}
        self.min_words = min_words or DEFAULT_MIN_WORDS

    def content_words(self, heard: list[str]) -> list[str]:
        """Words that are not backchannels. Single letters ("m m h m": pass 1 spelling a hum) and the commonest
        function words do not count: pass 1 fills a hum with them ("and the nature of them" for "mm-hm")."""
        return [w for w in heard if w not in self.backchannels and len(w) > 1 and w not in FILLER_WORDS]

    def judge(self, transcript: str) -> Verdict:
        heard = words(transcript)
        if not heard:
            return Verdict(False, "empty")
        if any(has_phrase(heard, phrase) for phrase in self.stop_phrases):
            return Verdict(True, "stop_word")
        content = self.content_words(heard)
        if not content:
            return Verdict(False, "backchannel")
        if len(content) >= self.min_words:
            return Verdict(True, "words")
        return Verdict(False, "too_few_words")
