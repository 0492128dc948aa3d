"""Fuzz: mutated and random bytes sent to every RPC of every process (router and each model service) as raw gRPC
messages. What a user checks: no UNKNOWN or INTERNAL status; a message that does not parse is INVALID_ARGUMENT naming
its type; every service is still SERVING afterwards; a stream running meanwhile is unaffected; no traceback in any
log, and the malformed-message log lines are rate-limited.

RPCs are discovered from each server's reflection (so a new RPC is fuzzed without editing this file). Seeded random
(FUZZ_SEED), a fixed number of cases per RPC, a short deadline per call: bounded and reproducible.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from google.protobuf import descriptor as pb_descriptor
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.conftest import start_fleet
from voice.v1 import (  # noqa: F401 - registers every voice.v1 type in the default descriptor pool
    conversation_pb2,
    fleet_pb2,
    gpu_pb2,
    recognizer_pb2,
    routing_pb2,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)

pytestmark = pytest.mark.timeout(600)

FUZZ_SEED = 20261123
CASES_PER_RPC = 8
CALL_TIMEOUT_S = 4.0
MEMBERS = ("cosyvoice_tts", "qwen_tts", "asr", "moss_sts", "router")
FORBIDDEN = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = start_fleet(tmp_path_factory.mktemp("fuzz"), services=MEMBERS)
    yield running
    running.fleet.stop()


# --- messages ------------------------------------------------------------------------------------------------------
def sample(descriptor: pb_descriptor.Descriptor, rng: random.Random, depth: int = 0):
    """A message of this type with plausible values in its fields (the first member of each oneof), so mutations
    start from real structure: strings, numbers, nested messages, audio bytes."""
    cls = message_factory.GetMessageClass(descriptor)
    message = cls()
    for field in descriptor.fields:
        oneof = field.containing_oneof
        if oneof is not None and field.name != oneof.fields[0].name:
            continue
        repeated = field.is_repeated
        if field.type == pb_descriptor.FieldDescriptor.TYPE_MESSAGE:
            if depth > 3 or field.message_type.GetOptions().map_entry:
                continue
            value = sample(field.message_type, rng, depth + 1)
            if repeated:
                getattr(message, field.name).append(value)
            else:
                getattr(message, field.name).CopyFrom(value)
            continue
        value = {
            pb_descriptor.FieldDescriptor.TYPE_STRING: "hello world",
            pb_descriptor.FieldDescriptor.TYPE_BYTES: bytes(640),
            pb_descriptor.FieldDescriptor.TYPE_BOOL: True,
            pb_descriptor.FieldDescriptor.TYPE_ENUM: 1,
            pb_descriptor.FieldDescriptor.TYPE_FLOAT: 1.0,
            pb_descriptor.FieldDescriptor.TYPE_DOUBLE: 1.0,
        }.get(field.type, 16000 if "rate" in field.name else rng.choice((1, 2, 100)))
        if field.type == pb_descriptor.FieldDescriptor.TYPE_ENUM:
            value = field.enum_type.values[min(1, len(field.enum_type.values) - 1)].number
        if repeated:
            getattr(message, field.name).append(value)
        else:
            setattr(message, field.name, value)
    return message


def mutate(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        if op == 0 and data:  # flip a bit
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and data:  # a random byte
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 2 and data:  # truncate
            del data[rng.randrange(len(data)) :]
        elif op == 3:  # insert bytes
            i = rng.randrange(len(data) + 1)
            data[i:i] = rng.randbytes(rng.randint(1, 6))
        else:  # a length or tag byte set to its maximum
            if data:
                data[rng.randrange(len(data))] = 0xFF
    return bytes(data)


def not_parsing(rng: random.Random, parses) -> bytes:
    """Random bytes that do not parse as the type (random protobuf often does parse: unknown fields are kept)."""
    while True:
        data = rng.randbytes(rng.randint(1, 48))
        if not parses(data):
            return data


def cases(descriptor, rng: random.Random) -> list[bytes]:
    cls = message_factory.GetMessageClass(descriptor)

    def parses(data: bytes) -> bool:
        try:
            cls.FromString(data)
            return True
        except Exception:  # noqa: BLE001 - DecodeError, as the server sees it
            return False

    seed = sample(descriptor, rng).SerializeToString()
    out = [not_parsing(rng, parses) for _ in range(CASES_PER_RPC // 2)]
    out += [mutate(seed, rng) for _ in range(CASES_PER_RPC - len(out))]
    return out


# --- calls ---------------------------------------------------------------------------------------------------------
def rpcs(address: str) -> list[pb_descriptor.MethodDescriptor]:
    """Every method of every service the server at ``address`` lists through reflection."""
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = next(iter(stub.ServerReflectionInfo(iter([request]), timeout=10)))
    pool = descriptor_pool.Default()
    return [m for s in reply.list_services_response.service for m in pool.FindServiceByName(s.name).methods]


def call(channel: grpc.Channel, method, messages: list[bytes]) -> tuple[grpc.StatusCode, str]:
    path = f"/{method.containing_service.full_name}/{method.name}"
    try:
        if method.client_streaming:
            if method.server_streaming:
                for _ in channel.stream_stream(path)(iter(messages), timeout=CALL_TIMEOUT_S):
                    pass
            else:
                channel.stream_unary(path)(iter(messages), timeout=CALL_TIMEOUT_S)
        elif method.server_streaming:
            for _ in channel.unary_stream(path)(messages[0], timeout=CALL_TIMEOUT_S):
                pass
        else:
            channel.unary_unary(path)(messages[0], timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def parses(method, data: bytes) -> bool:
    try:
        message_factory.GetMessageClass(method.input_type).FromString(data)
        return True
    except Exception:  # noqa: BLE001
        return False


def test_fuzzed_messages_get_clear_statuses_and_every_service_stays_up(fleet):
    rng = random.Random(FUZZ_SEED)
    logs = {name: fleet.fleet.members[name].log_path for name in MEMBERS}
    log_start = {name: path.stat().st_size for name, path in logs.items()}

    # A stream that runs while the fuzzing goes on: it must finish with its audio.
    long_text = " ".join(f"This is sentence number {i} of a steady announcement." for i in range(1, 9))
    steady: dict = {}

    def speak_through_it():
        with fleet.channel("router") as channel:
            stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
            request = synthesizer_pb2.SynthesizeRequest(text=long_text)
            try:
                steady["bytes"] = sum(len(r.audio.data) for r in stub.Synthesize(request, timeout=240))
            except grpc.RpcError as e:
                steady["error"] = f"{e.code().name}: {e.details()}"

    speaker = threading.Thread(target=speak_through_it)
    speaker.start()

    plan = []  # (member, method, messages, the first message that does not parse or None)
    for name in MEMBERS:
        for method in rpcs(fleet.address(name)):
            for data in cases(method.input_type, rng):
                messages = [data]
                if method.client_streaming and rng.random() < 0.5:
                    # after a well-formed first message (config), so the stream is under way when it breaks
                    messages = [sample(method.input_type, rng).SerializeToString(), data]
                bad = next((i for i, m in enumerate(messages) if not parses(method, m)), None)
                plan.append((name, method, messages, bad))
    assert {m.containing_service.full_name for _, m, _, _ in plan} >= {
        "voice.v1.Synthesizer",
        "voice.v1.Recognizer",
        "voice.v1.Conversation",
        "voice.v1.Fleet",
        "voice.v1.GpuLeases",
        "voice.v1.ModelControl",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }

    channels = {name: fleet.channel(name) for name in MEMBERS}
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda p: call(channels[p[0]], p[1], p[2]), plan))
    finally:
        for channel in channels.values():
            channel.close()
    elapsed = time.monotonic() - started

    problems = []
    malformed = {name: 0 for name in MEMBERS}
    for (name, method, messages, bad), (code, details) in zip(plan, results, strict=True):
        where = f"{name} {method.full_name} {[m.hex() for m in messages]}"
        if code in FORBIDDEN:
            problems.append(f"{where}: {code.name} {details}")
        if bad is not None:
            malformed[name] += 1
        if bad == 0:  # every handler reads the first message first
            expected = f"request is not a valid {method.input_type.full_name}: "
            if code != grpc.StatusCode.INVALID_ARGUMENT or not details.startswith(expected):
                problems.append(f"{where}: {code.name} {details!r}, expected INVALID_ARGUMENT {expected!r}...")
    assert not problems, f"{len(problems)} of {len(plan)} calls:\n" + "\n".join(problems[:20])
    assert sum(malformed.values()) >= len(plan) // 2

    speaker.join(timeout=240)
    assert steady.get("bytes", 0) > 0, f"the concurrent stream did not finish with audio: {steady}"

    for name in MEMBERS:
        with fleet.channel(name) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            names = ("", "voice.v1.Synthesizer", "voice.v1.Recognizer") if name == "router" else ("",)
            for service in names:
                status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
                assert status == health_pb2.HealthCheckResponse.SERVING, f"{name} {service!r} after the fuzzing"
        with logs[name].open(errors="replace") as f:
            f.seek(log_start[name])
            text = f.read()
        assert "Traceback" not in text, f"{name} logged a traceback:\n{text[text.index('Traceback') - 400 :][:3000]}"
        lines = [line for line in text.splitlines() if "request is not a valid" in line]
        assert lines, f"{name} got {malformed[name]} malformed messages and logged none"
        # one line per 10 s at most (the first at once): far fewer lines than malformed messages
        assert len(lines) <= 2 + elapsed / 10, f"{name}: {len(lines)} lines for {malformed[name]} malformed messages"
        assert len(lines) < malformed[name]
