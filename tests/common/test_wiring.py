"""How services are wired: each service's build() served over real gRPC on loopback, as the bootstrap registers it.

Every RPC of every process goes through the one wrapper (services/common/rpc.py), read from the contract's
descriptors; the request id is the caller's (made when missing) and shows in log lines and INTERNAL details; every
TTS service's Synthesizer cuts its first chunk as its section's chunking.first_chunk_ms says.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import logging

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from prometheus_client import REGISTRY

from services.common import audio
from services.common.config import load_config
from services.common.rpc import ParseRequests
from services.common.server import add_servicers, log_handler
from voice.v1 import audio_pb2, synthesizer_pb2, synthesizer_pb2_grpc

# Every gRPC fleet process (the brain is an OpenAI-compatible HTTP server; the gateway serves HTTP).
PROCESSES = {
    "asr": "services.asr.service",
    "cosyvoice_tts": "services.cosyvoice_tts.service",
    "qwen_tts": "services.qwen_tts.service",
    "moss_sts": "services.moss_sts.service",
    "router": "services.router.service",
    "lease_authority": "services.residency.__main__",
}
TTS_SERVICES = ("cosyvoice_tts", "qwen_tts", "moss_sts")
RATE = 16000


def build(name: str, env: dict[str, str] | None = None):
    return importlib.import_module(PROCESSES[name]).build(load_config(env=env or {}))


@contextlib.asynccontextmanager
async def serving(name: str, parts):
    """``parts``' servicers on a loopback port, registered and intercepted as services/common/server.py does."""
    server = grpc.aio.server(interceptors=[ParseRequests(name)])
    add_servicers(server, name, parts.servicers)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(0)


def rpcs(parts):
    """(servicer, method descriptor) for every RPC of every gRPC service the process serves, from the contract."""
    for servicer in parts.servicers:
        for method in descriptor_pool.Default().FindServiceByName(servicer.full_name).methods:
            yield servicer, method


def failing_inside(method):
    """A handler of ``method``'s kind that reads its request (a stream's first message) and then fails."""

    async def read(request):
        return await anext(aiter(request)) if method.client_streaming else request

    if method.server_streaming:

        async def stream(request, context):
            await read(request)
            raise RuntimeError("broken inside")
            yield

        return stream

    async def unary(request, context):
        await read(request)
        raise RuntimeError("broken inside")

    return unary


async def call(channel, method, request):
    path = f"/{method.containing_service.full_name}/{method.name}"
    kind = {
        (False, False): channel.unary_unary,
        (False, True): channel.unary_stream,
        (True, False): channel.stream_unary,
        (True, True): channel.stream_stream,
    }[method.client_streaming, method.server_streaming]
    stub = kind(path, request_serializer=type(request).SerializeToString, response_deserializer=lambda b: b)
    argument = iter([request]) if method.client_streaming else request
    result = stub(argument, timeout=60)
    if method.server_streaming:
        return [item async for item in result]
    return await result


def requests_counted(service: str, method: str, code: str) -> float:
    labels = {"service": service, "method": method, "code": code}
    return REGISTRY.get_sample_value("voicefleet_requests_total", labels) or 0.0


@pytest.mark.parametrize("name", list(PROCESSES))
async def test_every_rpc_of_every_process_goes_through_the_wrapper(name):
    parts = build(name)
    methods = list(rpcs(parts))
    assert methods, f"{name} serves no RPC"
    for servicer, method in methods:
        assert inspect.iscoroutinefunction(getattr(type(servicer.implementation), method.name)) or (
            inspect.isasyncgenfunction(getattr(type(servicer.implementation), method.name))
        ), f"{name}: {method.full_name} is not implemented"
        # The handler fails inside; only the wrapper turns that into INTERNAL naming the RPC and the request id.
        setattr(servicer.implementation, method.name, failing_inside(method))
    stream = io.StringIO()
    handler = log_handler(name, stream)
    logging.getLogger("voicefleet").addHandler(handler)
    try:
        async with serving(name, parts) as channel:
            for _servicer, method in methods:
                before = requests_counted(name, method.name, "INTERNAL")
                request = message_factory.GetMessageClass(method.input_type)(request_id=f"id-{method.name}")
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await call(channel, method, request)
                assert raised.value.code() == grpc.StatusCode.INTERNAL, method.full_name
                details = raised.value.details()
                assert f"{name}.{method.name}" in details and f"request_id=id-{method.name}" in details, details
                assert requests_counted(name, method.name, "INTERNAL") == before + 1, method.full_name
    finally:
        logging.getLogger("voicefleet").removeHandler(handler)
    log = stream.getvalue()
    for _servicer, method in methods:
        assert f"request_id=id-{method.name}: {name}.{method.name} failed" in log, log


async def test_a_request_without_an_id_gets_one_made_and_echoed():
    parts = build("qwen_tts")
    await parts.start()
    try:
        async with serving("qwen_tts", parts) as channel:
            stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
            sent = await stub.ListVoices(synthesizer_pb2.ListVoicesRequest(request_id="mine"), timeout=10)
            made = await stub.ListVoices(synthesizer_pb2.ListVoicesRequest(), timeout=10)
    finally:
        await parts.stop()
    assert sent.request_id == "mine"
    assert len(made.request_id) == 16


@pytest.mark.parametrize("name", TTS_SERVICES)
async def test_first_chunk_ms_takes_effect_on_every_tts_service(name):
    """The first chunk is cut to at most first_chunk_ms: both sizes are below every engine's first piece (espeak's is
    one ~60 ms callback), so each shows as the first chunk's length."""
    first_chunks = {}
    for first_chunk_ms in (10, 25):
        parts = build(name, {f"VOICEFLEET_{name.upper()}__CHUNKING__FIRST_CHUNK_MS": str(first_chunk_ms)})
        await parts.start()
        try:
            async with serving(name, parts) as channel:
                stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
                request = synthesizer_pb2.SynthesizeRequest(
                    request_id="first-chunk",
                    text="Hello there, this sentence is long enough to fill several chunks of audio.",
                    config=synthesizer_pb2.SynthesisConfig(
                        output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=RATE, channels=1)
                    ),
                )
                replies = [r async for r in stub.Synthesize(request, timeout=60)]
        finally:
            await parts.stop()
        assert len(replies) > 2 and {r.request_id for r in replies} == {"first-chunk"}
        first_chunks[first_chunk_ms] = len(replies[0].audio.data) // audio.BYTES_PER_SAMPLE
    assert first_chunks == {10: RATE * 10 // 1000, 25: RATE * 25 // 1000}
