"""Choosing a voice for a request from the voices an engine (or a route) offers: the servicers, the router's policy
and the cascade pick the same way."""

from __future__ import annotations

from services.common.engines import VoiceInfo
from services.common.errors import InvalidArgument, NotFound


def pick_voice(voices: list[VoiceInfo], voice: str, language: str, where: str, field: str = "config") -> VoiceInfo:
    """The requested voice (or the default, the first one), checked to speak ``language``."""
    if not voices:
        raise NotFound(f"{where} has no voices loaded")
    if voice:
        found = next((v for v in voices if v.id == voice), None)
        if found is None:
            known = ", ".join(v.id for v in voices[:20])
            raise NotFound(f"{field}.voice: {voice!r} is not a voice of {where}; ListVoices shows: {known}")
    else:
        found = voices[0]
    if language and not found.speaks(language):
        raise InvalidArgument(
            f"{field}.language",
            f"voice {found.id!r} does not speak {language!r}; it speaks {', '.join(found.languages)}",
        )
    return found
