"""Language tags: how a request's language matches a voice's, and the language of a text from its script.

Matching (``matches``) is BCP-47-ish and lenient where that is safe: 'en' matches a voice's 'en-US' (the request is
general), 'zh-CN' matches a voice's 'zh' (the voice is general), and the macrolanguage aliases below ('cmn' is
Mandarin, 'zh') are the same language; two different regions ('en-US', 'en-GB') do not match.

Detection (``detect``) looks only at the script: a text mostly in Han characters is Chinese ('zh'), with any Kana it
is Japanese, Hangul is Korean, and so on (the table below). Latin script is many languages: it gives '' (no
language: the route's default voice speaks it, as before). Cyrillic gives 'ru' and Arabic script 'ar', the most
spoken language of each; a caller with Ukrainian or Persian text sets the language.
"""

from __future__ import annotations

# The same language under another tag (ISO 639-3 / deprecated codes -> the tag voices mostly use).
ALIASES = {"cmn": "zh", "zh-cmn": "zh", "iw": "he", "in": "id", "ji": "yi", "jw": "jv"}

# (first code point, last code point, language): the scripts that name (mostly) one language.
_SCRIPTS: tuple[tuple[int, int, str], ...] = (
    (0x0370, 0x03FF, "el"),  # Greek
    (0x1F00, 0x1FFF, "el"),  # Greek extended
    (0x0400, 0x052F, "ru"),  # Cyrillic
    (0x0530, 0x058F, "hy"),  # Armenian
    (0x0590, 0x05FF, "he"),  # Hebrew
    (0x0600, 0x06FF, "ar"),  # Arabic
    (0x0750, 0x077F, "ar"),
    (0x08A0, 0x08FF, "ar"),
    (0x0900, 0x097F, "hi"),  # Devanagari
    (0x0980, 0x09FF, "bn"),  # Bengali
    (0x0A00, 0x0A7F, "pa"),  # Gurmukhi
    (0x0A80, 0x0AFF, "gu"),  # Gujarati
    (0x0B00, 0x0B7F, "or"),  # Oriya
    (0x0B80, 0x0BFF, "ta"),  # Tamil
    (0x0C00, 0x0C7F, "te"),  # Telugu
    (0x0C80, 0x0CFF, "kn"),  # Kannada
    (0x0D00, 0x0D7F, "ml"),  # Malayalam
    (0x0D80, 0x0DFF, "si"),  # Sinhala
    (0x0E00, 0x0E7F, "th"),  # Thai
    (0x0E80, 0x0EFF, "lo"),  # Lao
    (0x1000, 0x109F, "my"),  # Myanmar
    (0x10A0, 0x10FF, "ka"),  # Georgian
    (0x1100, 0x11FF, "ko"),  # Hangul jamo
    (0x1200, 0x139F, "am"),  # Ethiopic
    (0x1780, 0x17FF, "km"),  # Khmer
    (0x3040, 0x30FF, "ja"),  # Hiragana, Katakana
    (0x31F0, 0x31FF, "ja"),  # Katakana extensions
    (0x3130, 0x318F, "ko"),  # Hangul compatibility jamo
    (0x3400, 0x4DBF, "zh"),  # Han extension A
    (0x4E00, 0x9FFF, "zh"),  # Han
    (0xAC00, 0xD7AF, "ko"),  # Hangul syllables
    (0xF900, 0xFAFF, "zh"),  # Han compatibility
    (0xFF66, 0xFF9F, "ja"),  # half-width Katakana
    (0x20000, 0x2FA1F, "zh"),  # Han extensions B..
)


_PER_CHARACTER = {"zh", "ja"}


def _script_language(ch: str) -> str | None:
    """The language of ``ch``'s script; 'latin' for Latin letters; None for digits, punctuation, spaces."""
    cp = ord(ch)
    if cp < 0x250 or 0x1E00 <= cp <= 0x1EFF:
        return "latin" if ch.isalpha() else None
    for lo, hi, lang in _SCRIPTS:
        if lo <= cp <= hi:
            return lang if ch.isalpha() else None
    return None


def detect(text: str) -> str:
    """The language of ``text`` from its scripts; '' when most of it is Latin or it has no letters.

    Units compared: each Han or Kana character (about a word each), each run of letters of an alphabetic script (a
    word): "我用 Python 写代码" is Chinese; "The word 你好 means hello" is not."""
    counts: dict[str, int] = {}
    previous = None
    for ch in text:
        lang = _script_language(ch)
        if lang is not None and (lang in _PER_CHARACTER or lang != previous):
            counts[lang] = counts.get(lang, 0) + 1
        previous = lang
    latin = counts.pop("latin", 0)
    if not counts or latin >= sum(counts.values()):
        return ""
    if counts.get("ja"):  # Japanese writes Han characters too: any Kana makes Han text Japanese
        counts["ja"] += counts.pop("zh", 0)
    return max(counts, key=counts.__getitem__)


def canonical(tag: str) -> str:
    """Lower case, aliases resolved: 'cmn' -> 'zh', 'zh-cmn-Hans' -> 'zh-hans', 'en-US' -> 'en-us'."""
    t = tag.lower()
    for alias, target in ALIASES.items():
        if t == alias or t.startswith(alias + "-"):
            return target + t[len(alias) :]
    return t


def primary(tag: str) -> str:
    """The language subtag, aliases resolved: 'zh-CN' -> 'zh', 'cmn' -> 'zh'."""
    return canonical(tag).split("-")[0]


def matches(request: str, tag: str) -> bool:
    """Whether a voice tagged ``tag`` speaks the requested language (see the module's docstring)."""
    r, t = canonical(request), canonical(tag)
    return r == t or t.startswith(r + "-") or r.startswith(t + "-")
