"""Language tags and voice choice (services/common/languages.py, services/common/voices.py): the language of a text
from its script, how a requested language matches a voice's tags, and which voice a request gets."""

from __future__ import annotations

import re

import grpc
import pytest

from services.common import languages
from services.common.engines import VoiceInfo
from services.common.errors import InvalidArgument, NotFound
from services.common.voices import pick_voice


@pytest.mark.parametrize(
    "text,language",
    [
        ("你好，欢迎使用语音合成服务。", "zh"),
        ("こんにちは、世界。東京へ行きます。", "ja"),  # Han with Kana is Japanese
        ("안녕하세요, 만나서 반갑습니다.", "ko"),
        ("Привет, как дела?", "ru"),
        ("مرحبا بكم", "ar"),
        ("Καλημέρα σας", "el"),
        ("שלום עולם", "he"),
        ("สวัสดีครับ", "th"),
        ("नमस्ते दुनिया", "hi"),
        ("Hello, world.", ""),  # Latin: many languages; the default voice speaks it as before
        ("Bonjour à tous, ça va ?", ""),
        ("Call 555-0199 at 9:30.", ""),
        ("The word 你好 means hello.", ""),  # mostly Latin letters
        ("我用 Python 写代码。", "zh"),  # mostly Han
        ("123 !?", ""),
    ],
)
def test_detect_names_the_language_of_the_script(text, language):
    assert languages.detect(text) == language


@pytest.mark.parametrize(
    "request_tag,voice_tag,speaks",
    [
        ("zh-CN", "zh", True),  # the voice is general
        ("zh-CN", "cmn", True),  # cmn is Mandarin
        ("cmn", "zh", True),
        ("zh", "cmn", True),
        ("en", "en-US", True),  # the request is general
        ("en-us", "en-US", True),
        ("en-GB", "en-US", False),  # two regions
        ("zh-CN", "yue", False),
        ("fr", "en-US", False),
    ],
)
def test_voice_tags_match_requests(request_tag, voice_tag, speaks):
    voice = VoiceInfo("v", "v", (voice_tag,), 22050, "svc", "eng")
    assert voice.speaks(request_tag) is speaks


def voice(id_, *langs):
    return VoiceInfo(id_, id_, langs, 22050, "svc", "eng")


VOICES = [
    voice("en-us", "en-US"),
    voice("yue", "yue", "zh-yue", "zh"),
    voice("cmn", "cmn", "zh-cmn", "zh"),
    voice("fr", "fr-FR"),
]


@pytest.mark.parametrize(
    "language,chosen",
    [("", "en-us"), ("zh", "cmn"), ("zh-CN", "cmn"), ("cmn", "cmn"), ("yue", "yue"), ("fr", "fr"), ("en", "en-us")],
)
def test_a_language_without_a_voice_gets_a_voice_that_speaks_it(language, chosen):
    assert pick_voice(VOICES, "", language, "svc").id == chosen


def test_a_voice_that_does_not_speak_the_language_is_refused_naming_those_that_do():
    with pytest.raises(InvalidArgument) as err:
        pick_voice(VOICES, "en-us", "zh-CN", "svc")
    message = str(err.value)
    assert message.startswith("config.language: voice 'en-us' does not speak 'zh-CN'")
    assert "voices that speak it: cmn (svc/eng), yue (svc/eng)" in message
    with pytest.raises(InvalidArgument) as err:
        pick_voice(VOICES, "en-us", "zh", "svc", detected=True)
    assert "'zh' (detected from the text's script; set config.language to choose)" in str(err.value)


def test_no_voice_speaks_the_language():
    with pytest.raises(InvalidArgument) as err:
        pick_voice(VOICES, "", "th", "svc", field="config.synthesis")
    message = str(err.value)
    assert message.startswith("config.synthesis.language: no voice was named and no voice here speaks 'th'")
    assert "languages spoken: en, fr, yue, zh" in message


def test_an_unknown_voice_is_not_found_naming_the_closest_ids_not_all_of_them():
    """One backend has ~150 voices: the message names the few closest and how to list them all, not the list."""
    many = [voice("joe", "en-US"), voice("Vivian", "zh-CN"), voice("Ryan", "en-US")]
    many += [voice(f"x{i:03d}", "en") for i in range(150)]
    with pytest.raises(NotFound) as err:
        pick_voice(many, "vivien", "", "qwen_tts")
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    message = str(err.value)
    assert message.startswith("config.voice: 'vivien' is not a voice of qwen_tts; closest: Vivian;"), message
    assert message.endswith("`voicefleet voices --service qwen_tts` (ListVoices) lists all 153"), message
    named = [v.id for v in many if re.search(rf"\b{re.escape(v.id)}\b", message)]
    assert named == ["Vivian"], named
    # Nothing close: a handful of the voices there are, the default first.
    with pytest.raises(NotFound) as err:
        pick_voice(many, "nobody", "", "qwen_tts", field="config.synthesis")
    message = str(err.value)
    assert message.startswith("config.synthesis.voice: 'nobody' is not a voice of qwen_tts;"), message
    assert "no close match; voices there include: joe, Vivian, Ryan, x000, x001;" in message
    assert "x002" not in message
