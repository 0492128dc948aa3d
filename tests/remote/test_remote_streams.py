"""A fleet client's stream is taken or refused at open (services/remote/base.py ``accepted``): a real asr service at
capacity 1 on loopback, called through the remote engine the router and moss_sts use.

Before, the open returned at once and the first audio written raced the asr's refusal: gRPC failed the write and set
the call's status to INTERNAL ("Internal error from Core") on the client's side, so a full asr counted as a broken
one against the backend's health (under 50 conversations the router ejected a healthy moss_sts, 2026-11-29).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.common.engines import RESULT, RecognitionOptions
from services.common.errors import VoiceError
from services.remote.asr import RemoteAsrEngine, RemoteAsrStream
from tests.conftest import start_fleet
from tests.speech import wer
from voice.v1 import recognizer_pb2, recognizer_pb2_grpc

pytestmark = pytest.mark.timeout(120)
SENTENCE = "The library opens at nine on Saturday morning."


class RecordingBackend:
    """services.remote.base.Backend over one channel, recording what the engine counted against it."""

    def __init__(self, name: str, channel: grpc.aio.Channel):
        self.name, self.channel = name, channel
        self.failures: list[str] = []
        self.successes = 0

    def usable(self) -> bool:
        return True

    def describe(self) -> str:
        return self.name

    def record_success(self) -> None:
        self.successes += 1

    def record_failure(self, reason: str = "failures") -> None:
        self.failures.append(reason)


@pytest.fixture(scope="module")
def asr_of_one(tmp_path_factory):
    running = start_fleet(tmp_path_factory.mktemp("asr-of-one"), services=("asr",), asr={"max_concurrent_streams": 1})
    yield running
    running.fleet.stop()


async def test_a_full_asr_refuses_at_open_with_its_retry_hint_and_it_is_no_fault(asr_of_one, speakers):
    pcm, rate = await speakers.say("joe", SENTENCE)
    async with grpc.aio.insecure_channel(asr_of_one.address("asr")) as channel:
        backend = RecordingBackend("asr", channel)
        engine = RemoteAsrEngine(backend, deadline_margin_s=0.05)
        options = RecognitionOptions(language="en-US", sample_rate_hz=rate)
        taken = await engine.open_stream(options)
        try:
            # Refused every time while the place is taken, at open, with the field that sets the capacity and a
            # retry hint: never an INTERNAL error, never a fault against the backend.
            for _ in range(5):
                with pytest.raises(VoiceError) as refused:
                    await engine.open_stream(options)
                assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
                assert "asr.max_concurrent_streams" in refused.value.message
                assert refused.value.retry_after_s and refused.value.retry_after_s > 0
            assert backend.failures == []
            # The stream that was taken hears speech as it should.
            step = rate // 10 * 2
            for i in range(0, len(pcm), step):
                await taken.feed(pcm[i : i + step])
            await taken.feed(bytes(rate * 2))
            await taken.finish()
            finals = [e.result.transcript async for e in taken.events() if e.kind == RESULT and e.result.is_final]
        finally:
            await taken.close()
    assert finals and wer(SENTENCE, " ".join(finals)) <= 0.1, finals
    assert backend.failures == [] and backend.successes == 1


class HungRecognizer(recognizer_pb2_grpc.RecognizerServicer):
    """A backend whose handler never gets to take the call (its event loop stuck in a model, say)."""

    async def StreamingRecognize(self, request_iterator, context):
        await asyncio.sleep(3600)
        yield recognizer_pb2.StreamingRecognizeResponse()


async def test_a_backend_that_neither_takes_nor_refuses_the_call_is_unavailable_and_a_fault():
    server = grpc.aio.server()
    recognizer_pb2_grpc.add_RecognizerServicer_to_server(HungRecognizer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            backend = RecordingBackend("asr", channel)
            stream = RemoteAsrStream(backend, recognizer_pb2_grpc.RecognizerStub(channel).StreamingRecognize())
            with pytest.raises(VoiceError) as hung:
                await stream.accepted(timeout_s=0.5)
    finally:
        await server.stop(0)
    assert hung.value.code == grpc.StatusCode.UNAVAILABLE and "did not take the call" in hung.value.message
    assert backend.failures == ["failures"]
