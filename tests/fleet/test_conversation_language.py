"""A conversation in a language the CPU reply model does not write (asr + moss_sts, the CPU cascade, default brain
config: SmolLM2-135M-Instruct writes English): the session is refused with FAILED_PRECONDITION naming
brain.base_url, before any audio; an English session is not, and its replies are English even about other countries
(brain.reply_examples; docs/conversation.md#languages)."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

from services.common import audio
from tests.conftest import cli_replies, start_fleet
from tests.speech import INTELLIGIBLE, intelligible
from tests.text_language import language_of
from voice.v1 import audio_pb2, conversation_pb2, conversation_pb2_grpc


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = start_fleet(tmp_path_factory.mktemp("conversation-language"), services=("asr", "brain", "moss_sts"))
    yield running
    running.fleet.stop()


def config(language: str) -> conversation_pb2.ConverseRequest:
    fmt = audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=16000, channels=1)
    return conversation_pb2.ConverseRequest(
        config=conversation_pb2.ConversationConfig(input_format=fmt, output_format=fmt, language=language)
    )


@pytest.mark.parametrize("language", ["zh-CN", "cmn", "fr"])
def test_a_language_the_reply_model_does_not_write_is_refused(fleet, language):
    with fleet.channel("moss_sts") as channel:
        stub = conversation_pb2_grpc.ConversationStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Converse(iter([config(language)]), timeout=30))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
    details = err.value.details()
    assert details.startswith(f"config.language: {language!r}: the reply model (smollm2-135m-instruct")
    assert "writes only en" in details and "set brain.base_url" in details


def test_an_english_session_opens(fleet):
    with fleet.channel("moss_sts") as channel:
        stub = conversation_pb2_grpc.ConversationStub(channel)
        # The config, then half-close: the session opens and ends with no turn (the brain is never asked).
        responses = list(stub.Converse(iter([config("en-US")]), timeout=30))
    assert not [r for r in responses if r.WhichOneof("event") == "turn_error"]


def test_a_spoken_question_about_france_is_answered_in_english(fleet, tmp_path):
    """Through the CLI, as a user would: piper says the question, the cascade answers it. Without the in-box
    examples this question got "Le Grand Paris, est le cité de la France." (2026-11-28), read by the English voice."""
    moss = fleet.fleet.config.moss_sts
    cli = [sys.executable, "-m", "services.cli.main", "--router", f"{moss.host}:{moss.port}"]
    question = tmp_path / "question.wav"
    spoken = subprocess.run(
        [*cli, "speak", "What is the capital of France?", "-o", str(question), "--rate", "16000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert spoken.returncode == 0, spoken.stderr
    answer = tmp_path / "reply.wav"
    out = subprocess.run(
        [*cli, "converse", str(question), "--fast", "-o", str(answer)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    assert "france" in out.stdout.lower(), out.stdout  # the question was heard
    reply = cli_replies(out.stdout)[0]
    assert len(reply.split()) >= 3, out.stdout
    assert language_of(reply) == "en", reply
    # and the voice said it: the strict listener hears the reply text in the reply's audio
    error, heard = intelligible(reply, *audio.read_wav(str(answer)))
    assert error <= INTELLIGIBLE, f"{reply!r} heard as {heard!r} (WER {error:.2f})"
