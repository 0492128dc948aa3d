"""Choosing a voice for a request from the voices an engine (or a route) offers: the servicers, the router's policy
and the cascade pick the same way.

- A named voice is checked to speak the language (the request's, or the one detected from the text's script);
  one that does not is refused with INVALID_ARGUMENT naming the voices that do.
- No voice but a language: the best voice that speaks it: one named like the language or whose first language it
  is, then one whose first language is the same language in another region or script, then any speaker; the
  engine's order (its default voice first) breaks ties. None does: INVALID_ARGUMENT naming the languages there are.
- Neither: the default voice.
- A voice id that is not there: NOT_FOUND naming the field, the few closest ids (or, when none is close, a handful
  of the voices there are) and how to list them all (``unknown_voice``) — not the whole list: one backend has ~150.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from services.common import languages
from services.common.engines import VoiceInfo
from services.common.errors import InvalidArgument, NotFound


class LanguageRefused(InvalidArgument):
    """No voice here speaks the language, or the named voice does not. The router rebuilds the message with the
    voices of every backend (``refusal``)."""

    def __init__(self, field: str, problem: str, voice: str, language: str, detected: bool):
        super().__init__(field, problem)
        self.voice, self.language, self.detected = voice, language, detected


# How many voice ids an unknown-voice message names.
SUGGESTED = 5


def unknown_voice(voice: str, ids: Iterable[str], where: str, field: str = "config", service: str = "") -> NotFound:
    """The NOT_FOUND for ``voice``, not one of ``ids`` (the voices of ``where``, in its order, default first): the
    closest ids (case-insensitive ``difflib`` matches), else the first few, and how to list them all (``voicefleet
    voices``, with ``--service`` when the voices are one ``service``'s; ListVoices)."""
    ids = list(dict.fromkeys(ids))
    lowered: dict[str, str] = {}
    for i in ids:
        lowered.setdefault(i.lower(), i)
    close = [lowered[m] for m in difflib.get_close_matches(voice.lower(), list(lowered), n=SUGGESTED)]
    if close:
        hint = f"closest: {', '.join(close)}"
    elif ids:
        hint = f"no close match; voices there include: {', '.join(ids[:SUGGESTED])}"
    else:
        hint = "no voices are loaded there"
    command = f"voicefleet voices --service {service}" if service else "voicefleet voices"
    count = f"all {len(ids)}" if len(ids) > 1 else "them"
    return NotFound(
        f"{field}.voice: {voice!r} is not a voice of {where}; {hint}; `{command}` (ListVoices) lists {count}"
    )


def _rank(voice: VoiceInfo, language: str) -> int:
    lang = languages.canonical(language)
    if languages.canonical(voice.id) == lang or languages.canonical(voice.languages[0]) == lang:
        return 0
    return 1 if languages.primary(voice.languages[0]) == languages.primary(language) else 2


def speakers(voices: list[VoiceInfo], language: str) -> list[VoiceInfo]:
    """The voices that speak ``language``, best first (see the module's docstring)."""
    found = [v for v in voices if v.speaks(language)]
    return sorted(found, key=lambda v: _rank(v, language))  # stable: the engine's order breaks ties


def refusal(voice: str, language: str, voices: list[VoiceInfo], field: str, detected: bool) -> LanguageRefused:
    """The INVALID_ARGUMENT for ``voice`` (or no voice) not speaking ``language``, naming the voices that do."""
    source = (
        f"{language!r} (detected from the text's script; set {field}.language to choose)"
        if detected
        else (repr(language))
    )
    able = speakers(voices, language)
    if able:
        names = ", ".join(f"{v.id} ({v.service}/{v.engine})" for v in able[:12])
        more = f" and {len(able) - 12} more" if len(able) > 12 else ""
        hint = f"voices that speak it: {names}{more}"
    else:
        spoken = sorted({languages.primary(t) for v in voices for t in v.languages})
        hint = f"no voice here speaks it; languages spoken: {', '.join(spoken[:40]) or 'none'}"
    if voice:
        found = next(v for v in voices if v.id == voice)
        problem = f"voice {voice!r} does not speak {source}; it speaks {', '.join(found.languages)}; {hint}"
    else:
        problem = (
            f"no voice was named and no voice here speaks {source}; {hint.removeprefix('no voice here speaks it; ')}"
        )
    return LanguageRefused(f"{field}.language", problem, voice, language, detected)


def pick_voice(
    voices: list[VoiceInfo], voice: str, language: str, where: str, field: str = "config", detected: bool = False
) -> VoiceInfo:
    """The requested voice (or the best one for ``language``, or the default, the first one), checked to speak
    ``language``. ``detected``: the language came from the text's script, not the request (for messages)."""
    if not voices:
        raise NotFound(f"{where} has no voices loaded")
    if voice:
        found = next((v for v in voices if v.id == voice), None)
        if found is None:
            raise unknown_voice(voice, (v.id for v in voices), where, field, service=where)
        if language and not found.speaks(language):
            raise refusal(voice, language, voices, field, detected)
        return found
    if not language:
        return voices[0]
    able = speakers(voices, language)
    if not able:
        raise refusal("", language, voices, field, detected)
    return able[0]
