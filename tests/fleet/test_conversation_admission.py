"""A hung-up conversation frees its session place at once (issue 23, item 7).

Callers that hang up (cancel while listening, cancel mid-reply, cancel after a turn, or half-close after a turn) and
call again straight away must never be refused while no more than ``max_concurrent_sessions`` calls are open from
their side. Real fleet on loopback: brain (llama.cpp + SmolLM2) + moss_sts (cascade in a box) + router, at the
default capacity of 4 (the issue's). moss_sts and the router each hold a place per call; the router target checks
both (the router's cancel of its backend call races the new call there).

Before the fix, 2 of 40 calls straight to moss_sts were refused ("serving its capacity of 4 sessions"): the place
was freed only after the hung-up session's cleanup, which the caller's next call overtook. It is a race, so a run
without the fix may pass; with it, no call may ever be refused.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.common import audio
from services.common.errors import ResourceExhausted
from services.common.scheduler import Admission
from tests.conftest import start_fleet
from voice.v1 import audio_pb2, conversation_pb2, conversation_pb2_grpc, synthesizer_pb2, synthesizer_pb2_grpc

RATE = 16_000
FRAME_MS = 40
CAPACITY = 4
ROUNDS = 4
HANG_UPS = ("while_listening", "mid_reply", "after_turn", "half_close_after_turn")
pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = start_fleet(
        tmp_path_factory.mktemp("conversation-admission"),
        services=("asr", "brain", "moss_sts", "router"),
        # Short replies (12 tokens): a call that hangs up after its turn waits for its reply to play out (paced to
        # playback), and what is tested is the hang-up and the redial, not the reply.
        # No refusal for the brain's queue (moss_sts.max_first_words_wait_ms 0): what is tested is the hang-up race
        # at a fixed capacity, with four callers on a machine that serves two in real time.
        moss_sts={
            "max_concurrent_sessions": CAPACITY,
            "max_first_words_wait_ms": 0,
            "idle_timeout_seconds": 5,
            "default_max_tokens": 12,
        },
    )
    yield running
    running.fleet.stop()


@pytest.fixture(scope="module")
def question(fleet) -> bytes:
    """ "What is the capital of France?" said by the fleet's own piper voice."""
    with fleet.channel("moss_sts") as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        config = synthesizer_pb2.SynthesisConfig(
            output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=RATE, channels=1)
        )
        request = synthesizer_pb2.SynthesizeRequest(text="What is the capital of France?", config=config)
        pcm = b"".join(r.audio.data for r in stub.Synthesize(request, timeout=60))
    assert len(pcm) > RATE  # over half a second of speech
    return pcm


async def read_until(call, kind: str):
    """Read events until one of ``kind``; None when the call ended first."""
    while True:
        reply = await call.read()
        if reply is grpc.aio.EOF:
            return None
        if reply.WhichOneof("event") == kind:
            return reply


async def one_call(stub, question: bytes, hang_up: str) -> str:
    """Call, talk like a microphone (silence at the pace of real time around the question), hang up as ``hang_up``
    says; 'ok' or what went wrong."""
    config = conversation_pb2.ConversationConfig(
        input_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=RATE, channels=1), language="en-US"
    )
    call = stub.Converse(timeout=120)
    ask = asyncio.Event()
    mute = (
        asyncio.Event()
    )  # the microphone stops between writes: cancelling a task inside call.write() cancels the call

    async def microphone() -> None:
        await call.write(conversation_pb2.ConverseRequest(config=config))
        frame = bytes(RATE * FRAME_MS // 1000 * 2)
        while not mute.is_set():
            if ask.is_set():
                ask.clear()
                for i in range(0, len(question), 6400):
                    await call.write(conversation_pb2.ConverseRequest(audio=question[i : i + 6400]))
            await call.write(conversation_pb2.ConverseRequest(audio=frame))
            try:
                await asyncio.wait_for(mute.wait(), FRAME_MS / 1000)
            except TimeoutError:
                pass

    sending = asyncio.create_task(microphone())
    try:
        if await read_until(call, "state") is None:
            return f"ended before any state: {await call.code()} {await call.details()}"
        if hang_up != "while_listening":
            ask.set()
            wanted = "reply_audio" if hang_up == "mid_reply" else "turn_complete"
            if await read_until(call, wanted) is None:
                return f"ended before {wanted}: {await call.code()} {await call.details()}"
        if hang_up == "half_close_after_turn":
            mute.set()
            await asyncio.gather(sending, return_exceptions=True)
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass
            code = await call.code()
            return "ok" if code == grpc.StatusCode.OK else f"half-close ended with {code}: {await call.details()}"
        call.cancel()  # the caller hangs up; the next call starts at once, as a redial does
        return "ok"
    except grpc.aio.AioRpcError as e:
        return f"{e.code().name}: {e.details()}"
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)


@pytest.mark.parametrize("target", ["moss_sts", "router"])
async def test_callers_who_hang_up_and_call_again_at_once_are_never_refused(fleet, question, target):
    """CAPACITY callers each make ROUNDS calls back to back, hanging up in every way in turn: never more than
    CAPACITY calls are open from their side, so every call is served (a turn answered where one was asked)."""
    outcomes: list[tuple[int, int, str, str]] = []
    async with grpc.aio.insecure_channel(fleet.address(target)) as channel:
        stub = conversation_pb2_grpc.ConversationStub(channel)

        async def caller(index: int) -> None:
            for r in range(ROUNDS):
                hang_up = HANG_UPS[(r + index) % len(HANG_UPS)]
                outcomes.append((index, r, hang_up, await one_call(stub, question, hang_up)))

        await asyncio.gather(*(caller(i) for i in range(CAPACITY)))
    failed = [o for o in outcomes if o[3] != "ok"]
    assert not failed, f"{len(failed)} of {len(outcomes)} calls were not served: {failed}"
    assert len(outcomes) == CAPACITY * ROUNDS


async def test_a_place_freed_within_the_grace_admits_the_newcomer_and_none_freed_refuses_it():
    """Admission.room: at capacity a newcomer waits up to the grace for a place that is being freed (the hang-up it
    overtook); when no place frees, stream() refuses it as before. release() frees the place before the block ends."""
    admission = Admission("test", 1, 0, field="test.max_concurrent_sessions", unit="sessions")
    with admission.stream() as release:
        asyncio.get_running_loop().call_later(0.05, release)  # the old call's hang-up lands a moment later
        await admission.room(2.0)
        assert admission.active == 0
        with admission.stream():
            assert admission.active == 1
        release()  # idempotent: the block's own end does not free a second place
    assert admission.active == 0
    with admission.stream():
        await admission.room(0.05)  # nothing frees
        with pytest.raises(ResourceExhausted, match="capacity of 1 sessions"):
            with admission.stream():
                pass
