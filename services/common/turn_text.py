"""The text check of semantic endpointing (docs/asr.md#the-text-check): a pause right after a word that (almost) never
ends an English sentence is not the end of the turn, whatever the turn model hears.

The turn model (services/engines/asr/turn_model.py) hears only audio; on a pause mid-phrase it sometimes says
"complete" (on piper joe, "I need to book a table for | ..." scored 0.71-0.82). The words before the pause are known
by then: the speculative final of the utterance so far starts at the pause's first judgement
(services/engines/asr/speculation.py, read by services/engines/asr/pause_judge.py). When they end with a closed-class word that needs something after it, the turn
goes on. Pure text, no model: the asr engines use it, and the config and servicers validate word lists with it.

The list is closed-class words, chosen by what they are, not by any test set's pauses:

* articles and the determiner "every"; possessive determiners that are never pronouns (my, your, its, our, their;
  "his" and "her" end sentences as pronouns: "it's his", "I saw her");
* coordinating conjunctions that join (and, or, nor, but; not "so", "yet": "I think so", "not yet"), subordinating
  conjunctions that never end a clause (because, although, unless, whether, if, than, as, whereas, until; not "though",
  "since", "after", "before", "once", "while": "ever since", "the day after", "for a while");
* the infinitive "to" and prepositions that are not also particles or adverbs at a sentence's end (of, at, for, from,
  with, about, into ...; not "up", "down", "in", "on", "off", "out", "over", "by", "around", "through", "after":
  "pick it up", "come in", "the day after");
* the auxiliaries that are never main verbs, be-forms and modals (am, is, are, was, were; can, could, will, would,
  shall, should, may, might, must), and contracted pronoun + auxiliary (i'm, it's, they'll, we'd ...), which can
  never stand before an ellipsis ("yes it is", never "yes it's"). An uncontracted auxiliary right after a subject
  pronoun is an ellipsis that ends sentences ("yes I can", "here it is", "that's what it was"): no veto there.
  "have", "do", "be" and their forms are main verbs too ("that's all we have"): not listed. A listed word written
  capitalized inside a sentence is a name ("in May", "Will"), not the modal.

The other direction (``finished``): the turn model hears some finished sentences as unfinished (0.01-0.2 for
"... because of the storm." in a flat, synthetic voice), and they waited ``max_silence_ms``. When the same words read
as a finished sentence -- whisper wrote a sentence end ('.', '?', '!'; not an ellipsis, not a cut word "f-"), and the
last word is not a veto word -- the turn ends after ``sentence_end_silence_ms`` (600) instead. Whisper punctuates
from the audio as well as the words: a phrase cut mid-way mostly comes back as "... whether to...", "... at the" or
"... table for f-". The cost: a pause longer than that bound right after words that make a sentence on their own
("I'd like to book a table. | For two.") ends the turn there.

Known cost of the veto, the safe direction: a finished sentence that does end on such a word waits for ``max_silence_ms`` (1.5 s):
a stranded preposition ("where are you from?", "what is it for?"), an elliptical "to" ("I'd love to"), an auxiliary
after a noun ("I know what the problem was"). English only: another language's text is not checked.
"""

from __future__ import annotations

import re

DETERMINERS = ("a", "an", "the", "every")
POSSESSIVE_DETERMINERS = ("my", "your", "its", "our", "their")
CONJUNCTIONS = (
    "and",
    "or",
    "nor",
    "but",
    "because",
    "although",
    "unless",
    "whether",
    "if",
    "than",
    "as",
    "whereas",
    "until",
)
PREPOSITIONS = (
    "to",
    "of",
    "at",
    "for",
    "from",
    "with",
    "without",
    "about",
    "into",
    "onto",
    "upon",
    "toward",
    "towards",
    "among",
    "during",
    "despite",
    "against",
    "via",
    "per",
    "except",
    "unlike",
)
AUXILIARIES = (
    "am",
    "is",
    "are",
    "was",
    "were",
    "can",
    "could",
    "will",
    "would",
    "shall",
    "should",
    "may",
    "might",
    "must",
)
CONTRACTED = tuple(
    f"{pronoun}'{aux}"
    for pronoun, auxes in (
        ("i", ("m", "ve", "ll", "d")),
        ("you", ("re", "ve", "ll", "d")),
        ("we", ("re", "ve", "ll", "d")),
        ("they", ("re", "ve", "ll", "d")),
        ("he", ("s", "ll", "d")),
        ("she", ("s", "ll", "d")),
        ("it", ("s", "ll")),
        ("that", ("s",)),
        ("there", ("s",)),
        ("let", ("s",)),
    )
    for aux in auxes
)
#: The default list (asr.endpointing.non_final_words).
NON_FINAL_WORDS = (*DETERMINERS, *POSSESSIVE_DETERMINERS, *CONJUNCTIONS, *PREPOSITIONS, *AUXILIARIES, *CONTRACTED)
# Subjects after which an uncontracted auxiliary is an ellipsis that ends a sentence ("yes I can", "here it is").
SUBJECT_PRONOUNS = frozenset(("i", "you", "he", "she", "it", "we", "they", "there", "that", "this", "who", "one"))
# What a word in the list may be: lower-case letters with inner apostrophes (the config's and the request's check).
WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")
MAX_WORDS = 500
_CASED_TOKEN = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)*")


def _is_name(token: str, before: str) -> bool:
    """A capitalized word inside a sentence (not after . ? !, not "I" or "I'm"): a name."""
    if not token[0].isupper() or token == "I" or token.lower().startswith("i'"):
        return False
    return not before.rstrip().endswith((".", "?", "!"))


def bad_word(words) -> str:
    """Why a word list is not acceptable ("" when it is): the message for the field that holds it."""
    if len(words) > MAX_WORDS:
        return f"has {len(words)} words; at most {MAX_WORDS}"
    for w in words:
        if not WORD.fullmatch(w):
            return f'{w!r} is not one word (letters and inner apostrophes, e.g. "the", "it\'s")'
    return ""


def is_english(language: str) -> bool:
    return language.lower().split("-")[0] in ("en", "english")


# A sentence's end as whisper writes it: '.', '?' or '!' (optionally inside closing quotes or brackets), but not the
# ellipsis it writes for speech that trails off.
_SENTENCE_END = re.compile(r"""(?<![.\u2026])[.?!]["')\]]*$""")


class TextCheck:
    """``veto(text)``: the word that keeps the turn open ("" when none), for English text ending at a pause;
    ``finished(text)``: whether the text reads as a finished sentence."""

    def __init__(self, words=NON_FINAL_WORDS):
        self.words = frozenset(words)

    def veto(self, text: str) -> str:
        text = text.replace("\u2019", "'")
        found = list(_CASED_TOKEN.finditer(text))
        tokens = [m.group().lower() for m in found]
        if not tokens or tokens[-1] not in self.words:
            return ""
        last = tokens[-1]
        if len(found) > 1 and _is_name(found[-1].group(), text[: found[-1].start()]):
            return ""  # "in May", "of his own free Will": capitalized inside a sentence, a name, not the modal
        if last in AUXILIARIES and len(tokens) > 1 and tokens[-2] in SUBJECT_PRONOUNS:
            return ""  # "yes I can", "here it is": an ellipsis, the sentence may end
        return last

    def veto_beam(self, best: str, others: tuple[str, ...] = ()) -> str:
        """``veto`` of the decode's best text, else of another text of its beam with as many words: the beam
        disagreeing about a word ("... it takes it" / "... it takes to"), not about where the words stop. A shorter
        one is the beam weighing an early stop ("Thank you very much for", "I need a taxi to" beside the whole
        sentences): read, it held 11 of 144 finished sentences open (docs/asr.md#the-text-check)."""
        count = len(_CASED_TOKEN.findall(best))
        alike = (text for text in others if len(_CASED_TOKEN.findall(text)) == count)
        return next(filter(None, map(self.veto, (best, *alike))), "")

    def finished(self, text: str) -> bool:
        """Ends with a sentence end (not an ellipsis, not a cut word like "f-") after a word that may end one."""
        text = text.replace("\u2019", "'").strip()
        if not _SENTENCE_END.search(text) or text.endswith(("-.", "-?", "-!")):
            return False
        return bool(_CASED_TOKEN.search(text)) and not self.veto(text.rstrip(".?!\"')]"))
