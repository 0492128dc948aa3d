"""Qwen3-TTS CustomVoice: its 9 preset speakers and 10 languages, and how the CPU engine stands in for them.

The GPU engines speak these speakers with the real model. The CPU engine (espeak-ng) offers the same 9 ids so a
client written for the GPU service runs unchanged on the CPU fleet; each is an espeak *language voice + voice
variant* (e.g. Vivian = espeak's Mandarin ``cmn`` with its female variant ``f2``). The voice's description says
so: it is espeak's voice, not Qwen's timbre. Language picks the espeak language voice (Vivian asked for English
speaks espeak's en-US with variant f2), the way Qwen's speakers read any of the 10 languages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QwenLanguage:
    name: str  # what qwen-tts and vLLM-Omni take: "Chinese", "English", ...
    tags: tuple[str, ...]  # BCP-47 tags we accept for it on GPU (first is the one we list first)
    espeak_voice: str  # espeak voice id (identifier's last part) that reads it on CPU


# Order: Qwen's own listing (Chinese, English, Japanese, Korean, German, French, Russian, Portuguese, Spanish,
# Italian). Qwen3-TTS has no region variants; tags list the common ones a client sends.
LANGUAGES: tuple[QwenLanguage, ...] = (
    QwenLanguage("Chinese", ("zh", "zh-CN", "cmn"), "cmn"),
    QwenLanguage("English", ("en", "en-US", "en-GB"), "en-US"),
    QwenLanguage("Japanese", ("ja", "ja-JP"), "ja"),
    QwenLanguage("Korean", ("ko", "ko-KR"), "ko"),
    QwenLanguage("German", ("de", "de-DE"), "de"),
    QwenLanguage("French", ("fr", "fr-FR"), "fr"),
    QwenLanguage("Russian", ("ru", "ru-RU"), "ru"),
    QwenLanguage("Portuguese", ("pt", "pt-BR", "pt-PT"), "pt"),
    QwenLanguage("Spanish", ("es", "es-ES"), "es"),
    QwenLanguage("Italian", ("it", "it-IT"), "it"),
)
BY_NAME = {lang.name: lang for lang in LANGUAGES}


@dataclass(frozen=True)
class Preset:
    id: str  # as Qwen spells it in its model card; matched case-insensitively by the model itself
    native: str  # QwenLanguage.name
    description: str  # Qwen's model-card description
    espeak_variant: str  # CPU stand-in: an espeak voice variant (!v/<name>), chosen by gender


PRESETS: tuple[Preset, ...] = (
    Preset("Vivian", "Chinese", "bright, slightly edgy young female voice", "f2"),
    Preset("Serena", "Chinese", "warm, gentle young female voice", "f4"),
    Preset("Uncle_Fu", "Chinese", "seasoned male voice with a low, mellow timbre", "m3"),
    Preset("Dylan", "Chinese", "youthful Beijing male voice (Beijing dialect)", "m1"),
    Preset("Eric", "Chinese", "lively Chengdu male voice (Sichuan dialect)", "m2"),
    Preset("Ryan", "English", "dynamic male voice with strong rhythmic drive", "m4"),
    Preset("Aiden", "English", "sunny American male voice with a clear midrange", "m7"),
    Preset("Ono_Anna", "Japanese", "playful Japanese female voice", "f3"),
    Preset("Sohee", "Korean", "warm Korean female voice", "f1"),
)
BY_ID = {p.id.lower(): p for p in PRESETS}


def preset(voice_id: str) -> Preset | None:
    return BY_ID.get(voice_id.lower())


def languages_for(p: Preset) -> list[QwenLanguage]:
    """The speaker's native language first, then the others in Qwen's order."""
    native = BY_NAME[p.native]
    return [native, *(lang for lang in LANGUAGES if lang is not native)]


def qwen_language(tag: str) -> QwenLanguage | None:
    """The Qwen language for a BCP-47 tag (by its primary subtag; 'cmn' is Chinese); None if Qwen lacks it."""
    primary = tag.lower().split("-")[0]
    for lang in LANGUAGES:
        if any(t.lower().split("-")[0] == primary for t in lang.tags):
            return lang
    return None
