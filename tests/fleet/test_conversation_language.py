"""A conversation in a language the CPU reply model does not write (asr + moss_sts, the CPU cascade, default brain
config: SmolLM2-135M-Instruct writes English): the session is refused with FAILED_PRECONDITION naming
brain.base_url, before any audio; an English session is not (docs/conversation.md#languages)."""

from __future__ import annotations

import grpc
import pytest

from services.common import audio
from tests.conftest import start_fleet
from voice.v1 import audio_pb2, conversation_pb2, conversation_pb2_grpc


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = start_fleet(tmp_path_factory.mktemp("conversation-language"), services=("asr", "moss_sts"))
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
