"""The language of a reply's text, for the tests of the in-box brain (py3langid: langid.py's model ships in its
wheel)."""

from __future__ import annotations

import py3langid

# The languages SmolLM2-135M drifted into, and English: the identifier chooses among these alone.
CANDIDATES = ["en", "fr", "de", "es", "it", "pt", "nl"]


def language_of(text: str) -> str:
    py3langid.set_languages(CANDIDATES)
    return py3langid.classify(text)[0]
