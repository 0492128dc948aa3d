"""The Realtime route's converter without a fleet: Converse events, as the router sends them, in; the Realtime server
events the client gets, out (services/gateway/realtime.py). Exact sequences and ids, which the fleet tests
(tests/gateway/test_realtime.py) check only in part because a real dialogue's timing varies."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from services.common import audio
from services.common.config.gateway import GatewayConfig
from services.gateway.realtime import RealtimeConnection
from services.gateway.realtime_config import RealtimeError, apply_update
from voice.v1 import audio_pb2, conversation_pb2, recognizer_pb2

pytestmark = pytest.mark.background
THINKING = conversation_pb2.CONVERSATION_STATE_THINKING
SPEAKING = conversation_pb2.CONVERSATION_STATE_SPEAKING
LISTENING = conversation_pb2.CONVERSATION_STATE_LISTENING


async def no_voices() -> list[str]:
    return []


def connection(**session) -> RealtimeConnection:
    c = RealtimeConnection(GatewayConfig(), None, (), None, "gpt-realtime", no_voices)
    if session:
        c.settings = apply_update(c.settings, {"type": "realtime", **session}, False, None, 5000)
    return c


def drain(c: RealtimeConnection) -> list[dict]:
    out = []
    while not c.outbound.empty():
        out.append(c.outbound.get_nowait()[0])
    return out


def state(t: int, s) -> conversation_pb2.ConverseResponse:
    return conversation_pb2.ConverseResponse(turn_index=t, state=conversation_pb2.StateChange(state=s))


def said(t: int, text: str, final: bool) -> conversation_pb2.ConverseResponse:
    result = recognizer_pb2.RecognitionResult(
        transcript=text, is_final=final, utterance_start_ms=1200, utterance_end_ms=2900
    )
    return conversation_pb2.ConverseResponse(turn_index=t, user_transcript=result)


def text(t: int, delta: str) -> conversation_pb2.ConverseResponse:
    return conversation_pb2.ConverseResponse(turn_index=t, reply_text=conversation_pb2.ReplyText(delta=delta))


def sound(t: int, pcm: bytes) -> conversation_pb2.ConverseResponse:
    fmt = audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=24_000, channels=1)
    return conversation_pb2.ConverseResponse(turn_index=t, reply_audio=audio_pb2.AudioChunk(format=fmt, data=pcm))


def complete(t: int, user: str, reply: str, interrupted: bool = False) -> conversation_pb2.ConverseResponse:
    done = conversation_pb2.TurnComplete(user_text=user, reply_text=reply, interrupted=interrupted)
    return conversation_pb2.ConverseResponse(turn_index=t, turn_complete=done)


def tone(seconds: float, rate: int = 24_000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return audio.to_int16(0.3 * np.sin(2 * np.pi * 300 * t)).tobytes()


def feed(c: RealtimeConnection, *events) -> list[dict]:
    for e in events:
        c.on_converse(e)
    return drain(c)


def kinds(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


async def test_a_vad_turn_is_the_ga_event_sequence_with_consistent_ids():
    c = connection(audio={"input": {"transcription": {"model": "whisper-1"}}})
    pcm = tone(0.2)
    events = feed(
        c,
        state(0, LISTENING),
        said(0, "what is", False),
        said(0, "What is the capital of France?", True),
        state(0, THINKING),
        text(0, "Paris"),
        sound(0, pcm[: len(pcm) // 2]),
        state(0, SPEAKING),
        text(0, " it is."),
        sound(0, pcm[len(pcm) // 2 :]),
        complete(0, "What is the capital of France?", "Paris it is."),
        state(0, LISTENING),
    )
    assert kinds(events) == [
        "input_audio_buffer.speech_started",
        "conversation.item.input_audio_transcription.delta",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        "response.output_audio_transcript.delta",
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    by = {}
    for e in events:
        by.setdefault(e["type"], []).append(e)
    user_id = by["input_audio_buffer.committed"][0]["item_id"]
    assert by["input_audio_buffer.speech_started"][0] == {
        **by["input_audio_buffer.speech_started"][0],
        "audio_start_ms": 1200,
        "item_id": user_id,
    }
    assert by["input_audio_buffer.speech_stopped"][0]["audio_end_ms"] == 2900
    completed = by["conversation.item.input_audio_transcription.completed"][0]
    assert completed["item_id"] == user_id and completed["transcript"] == "What is the capital of France?"
    assert by["conversation.item.done"][0]["item"]["content"][0]["transcript"] == completed["transcript"]
    response = by["response.created"][0]["response"]
    assistant = by["response.output_item.added"][0]["item"]
    assert by["conversation.item.added"][1]["previous_item_id"] == user_id
    for e in by["response.output_audio.delta"] + by["response.output_audio_transcript.delta"]:
        assert (e["response_id"], e["item_id"], e["output_index"], e["content_index"]) == (
            response["id"],
            assistant["id"],
            0,
            0,
        )
    sent = b"".join(base64.b64decode(e["delta"]) for e in by["response.output_audio.delta"])
    assert sent == pcm  # audio/pcm at 24 kHz: the stream's reply audio as it came
    assert by["response.output_audio_transcript.done"][0]["transcript"] == "Paris it is."
    done = by["response.done"][0]["response"]
    assert done["status"] == "completed" and done["id"] == response["id"]
    assert (
        done["output"][0]["id"] == assistant["id"] and done["output"][0]["content"][0]["transcript"] == "Paris it is."
    )
    assert c.response is None


async def test_a_barge_in_cancels_the_response_turn_detected_and_opens_the_next_user_item():
    c = connection()
    drain(c)
    feed(c, said(0, "Tell me a story.", True), state(0, THINKING), text(0, "Once upon a time there was a cat."))
    events = feed(
        c,
        sound(0, tone(0.5)),
        said(1, "stop", False),
        conversation_pb2.ConverseResponse(
            turn_index=0, interrupted=conversation_pb2.Interrupted(reason="barge_in", heard_text="Once upon a time")
        ),
        complete(0, "Tell me a story.", "Once upon a time", interrupted=True),
    )
    started = [e for e in events if e["type"] == "input_audio_buffer.speech_started"]
    assert len(started) == 1 and "conversation.item.input_audio_transcription.delta" not in kinds(events)
    done = events[-1]["response"]
    assert done["status"] == "cancelled" and done["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert done["output"][0]["status"] == "incomplete"
    assert [e["transcript"] for e in events if e["type"] == "response.output_audio_transcript.done"] == [
        "Once upon a time"
    ]
    # The interrupting speech is the next turn: its commit makes the next response, on a new item.
    more = feed(c, said(1, "stop please", True), state(1, THINKING))
    assert more[0]["type"] == "input_audio_buffer.speech_stopped"
    assert more[0]["item_id"] == started[0]["item_id"] != done["output"][0]["id"]
    assert kinds(more)[-1] == "response.created" and c.response is not None and c.response.turn == 1


async def test_text_only_responses_carry_text_and_no_audio():
    c = connection(output_modalities=["text"])
    events = feed(c, said(0, "Hi there.", True), state(0, THINKING), text(0, "Hello!"), sound(0, tone(0.3)))
    events += feed(c, complete(0, "Hi there.", "Hello!"))
    assert "response.output_audio.delta" not in kinds(events)
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["Hello!"]
    assert [e["text"] for e in events if e["type"] == "response.output_text.done"] == ["Hello!"]
    part = next(e for e in events if e["type"] == "response.content_part.done")["part"]
    assert part == {"type": "text", "text": "Hello!"}
    done = events[-1]["response"]
    assert done["output_modalities"] == ["text"] and done["output"][0]["content"] == [
        {"type": "output_text", "text": "Hello!"}
    ]


@pytest.mark.parametrize(("kind", "decode"), [("audio/pcmu", audio.ulaw_decode), ("audio/pcma", audio.alaw_decode)])
async def test_g711_output_is_the_reply_at_8_khz(kind, decode):
    c = connection(audio={"output": {"format": {"type": kind}}})
    pcm = tone(1.0)
    events = feed(c, said(0, "Hi.", True), state(0, THINKING), text(0, "Hello."))
    for start in range(0, len(pcm), 4800):
        events += feed(c, sound(0, pcm[start : start + 4800]))
    events += feed(c, complete(0, "Hi.", "Hello."))
    coded = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")
    assert abs(len(coded) - 8000) <= 16  # one byte a sample at 8 kHz: the whole second, the resampler's tail included
    got = np.frombuffer(decode(coded), dtype=np.int16).astype(float)
    want = np.frombuffer(audio.resample(pcm, 24_000, 8_000), dtype=np.int16).astype(float)
    n = min(len(got), len(want)) - 200
    corr = np.corrcoef(got[100:n], want[100:n])[0, 1]
    assert corr > 0.99, corr  # the same tone, G.711-coded


async def test_a_turn_error_fails_the_response_with_the_grpc_code():
    c = connection()
    events = feed(
        c,
        said(0, "Hello?", True),
        state(0, THINKING),
        conversation_pb2.ConverseResponse(
            turn_index=0, turn_error=conversation_pb2.TurnError(code=14, message="brain: unreachable")
        ),
    )
    done = events[-1]
    assert done["type"] == "response.done" and done["response"]["status"] == "failed"
    assert done["response"]["status_details"]["error"]["code"] == "UNAVAILABLE"
    assert c.response is None
    # An error with no response in progress is an error event; the session goes on.
    events = feed(
        c,
        conversation_pb2.ConverseResponse(turn_index=1, turn_error=conversation_pb2.TurnError(code=8, message="long")),
    )
    assert kinds(events) == ["error"] and events[0]["error"]["code"] == "RESOURCE_EXHAUSTED"


async def test_no_transcription_events_unless_the_session_asks_for_them():
    c = connection()
    events = feed(c, said(0, "Hi.", True), state(0, THINKING))
    assert not [k for k in kinds(events) if "transcription" in k]
    done = next(e for e in events if e["type"] == "conversation.item.done")
    assert done["item"]["content"][0]["transcript"] == "Hi."  # the item still says what was heard


async def test_manual_turns_hold_audio_commit_it_once_and_clear_it():
    c = connection(audio={"input": {"turn_detection": None}})
    drain(c)
    c.buffer += bytes(2 * 16 * 50)  # 50 ms at the fleet's 16 kHz
    with pytest.raises(RealtimeError) as caught:
        await c.on_commit({"type": "input_audio_buffer.commit"})
    assert caught.value.code == "input_audio_buffer_commit_empty"
    c.buffer += bytes(2 * 16_000)
    await c.on_commit({"type": "input_audio_buffer.commit"})
    events = drain(c)
    assert kinds(events) == ["input_audio_buffer.committed", "conversation.item.added"]
    assert events[0]["item_id"] == events[1]["item"]["id"] and [h[0] for h in c.held] == [events[0]["item_id"]]
    assert not c.buffer
    c.buffer += bytes(2 * 16_000)
    with pytest.raises(RealtimeError) as caught:
        await c.on_commit({"type": "input_audio_buffer.commit"})
    assert caught.value.code == "user_item_pending"  # one user turn per response
    await c.on_clear({"type": "input_audio_buffer.clear"})
    assert kinds(drain(c)) == ["input_audio_buffer.cleared"] and not c.buffer
    with pytest.raises(RealtimeError) as caught:
        await c.on_commit({"type": "input_audio_buffer.commit", "extra": 1})
    assert caught.value.param == "extra" and caught.value.code == "unknown_parameter"


@pytest.fixture
async def gateway_app():
    """The gateway's HTTP app in process (aiohttp's test server), its router an address where nothing listens."""
    from aiohttp.test_utils import TestClient, TestServer

    from services.cli.fleet import free_port
    from services.common.config import Config
    from services.gateway.app import Gateway

    config = Config()
    section = config.gateway.model_copy(update={"max_sessions": 1, "router": f"127.0.0.1:{free_port()}"})
    async with TestClient(TestServer(Gateway(config.model_copy(update={"gateway": section})).app())) as client:
        yield client


async def test_the_route_refuses_past_max_sessions_and_reports_a_router_it_cannot_reach(gateway_app):
    ws = await gateway_app.ws_connect("/v1/realtime?model=gpt-realtime", protocols=("realtime",))
    assert ws.protocol == "realtime"  # the browser snippet's subprotocol is accepted
    created = await ws.receive_json(timeout=10)
    assert created["type"] == "session.created" and created["session"]["model"] == "gpt-realtime"
    extra = await gateway_app.ws_connect("/v1/realtime")
    refused = await extra.receive_json(timeout=10)
    closed = await extra.receive(timeout=10)
    assert refused["error"]["code"] == "at_capacity" and closed.data == 4029 and "max_sessions" in closed.extra
    # The first audio opens the Converse stream: the router is not there, so an error with the gRPC code, then a close.
    await ws.send_json({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(960)).decode()})
    error = await ws.receive_json(timeout=30)
    closed = await ws.receive(timeout=30)
    assert error["type"] == "error" and error["error"]["code"] == "UNAVAILABLE", error
    assert error["error"]["type"] == "server_error" and closed.data == 4503, (closed.data, closed.extra)


async def test_a_transcription_session_maps_each_utterance_to_an_item():
    c = RealtimeConnection(GatewayConfig(), None, (), None, "", no_voices, intent="transcription")
    assert c.settings.as_event()["type"] == "transcription"
    vad = recognizer_pb2.VadEvent

    def recognized(**event) -> recognizer_pb2.StreamingRecognizeResponse:
        return recognizer_pb2.StreamingRecognizeResponse(**event)

    for e in (
        recognized(vad=vad(kind=vad.KIND_SPEECH_START, offset_ms=300)),
        recognized(vad=vad(kind=vad.KIND_SPEECH_END, offset_ms=2100)),
        recognized(vad=vad(kind=vad.KIND_SPEECH_START, offset_ms=2600)),
        recognized(
            result=recognizer_pb2.RecognitionResult(
                transcript=" Hello there. ", is_final=True, utterance_end_ms=2100, utterance_start_ms=300
            )
        ),
    ):
        c.on_recognition(e)
    events = drain(c)
    assert kinds(events) == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
        "input_audio_buffer.speech_started",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
    ]
    first = events[0]["item_id"]
    assert [e["item_id"] for e in events[1:3]] == [first, first] and events[4]["item_id"] != first
    assert events[5]["item_id"] == events[6]["item_id"] == first and events[6]["transcript"] == "Hello there."
    assert events[6]["usage"] == {"type": "duration", "seconds": 1.8}
    assert events[7]["item"]["content"][0]["transcript"] == "Hello there."
    with pytest.raises(RealtimeError) as caught:
        await c.handle({"type": "response.create"})
    assert caught.value.code == "unsupported"  # a transcription session never answers


class WrittenCall:
    """The Converse call's write side, recorded (the converter's test double for grpc.aio's stream-stream call)."""

    def __init__(self):
        self.requests: list[conversation_pb2.ConverseRequest] = []

    async def write(self, request) -> None:
        self.requests.append(request)


WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def called(t: int, call_id: str, delta: str = "", done: str | None = None) -> conversation_pb2.ConverseResponse:
    call = conversation_pb2.FunctionCall(
        call_id=call_id, name="get_weather", arguments_delta=delta, done=done is not None, arguments=done or ""
    )
    return conversation_pb2.ConverseResponse(turn_index=t, function_call=call)


async def test_a_function_call_is_a_response_of_its_own_and_its_output_goes_on_at_response_create():
    c = connection(tools=[WEATHER_TOOL], tool_choice="auto")
    assert c.settings.as_event()["tools"] == [WEATHER_TOOL]
    c.call = WrittenCall()
    drain(c)
    args = '{"city": "Paris"}'
    events = feed(c, said(0, "What's the weather in Paris?", True), state(0, THINKING))
    events += feed(c, called(0, "call_1", delta=args), called(0, "call_1", done=args))
    assert kinds(events)[-8:] == [
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    by = {e["type"]: e for e in events}
    item = by["response.output_item.done"]["item"]
    assert (item["type"], item["name"], item["call_id"], item["arguments"]) == (
        "function_call",
        "get_weather",
        "call_1",
        args,
    )
    assert by["response.function_call_arguments.done"]["arguments"] == args
    assert by["response.done"]["response"]["output"] == [item] and c.response is None
    with pytest.raises(RealtimeError) as caught:  # the call waits for its output
        await c.on_response_create({"type": "response.create"})
    assert caught.value.code == "function_call_output_missing"
    with pytest.raises(RealtimeError) as caught:
        await c.on_item_create(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": "call_9", "output": "x"},
            }
        )
    assert caught.value.param == "item.call_id"
    output = {"type": "function_call_output", "call_id": "call_1", "output": "18 degrees and sunny"}
    await c.on_item_create({"type": "conversation.item.create", "item": output})
    assert kinds(drain(c)) == ["conversation.item.added", "conversation.item.done"]
    assert not c.call.requests  # sent at response.create, not before
    await c.on_response_create({"type": "response.create"})
    sent = c.call.requests[-1].function_call_output
    assert (sent.call_id, sent.output) == ("call_1", "18 degrees and sunny")
    events = drain(c) + feed(c, text(0, "Here it is: 18 degrees and sunny."), sound(0, tone(0.2)))
    events += feed(c, complete(0, "What's the weather in Paris?", "Here it is: 18 degrees and sunny."))
    assert kinds(events)[0] == "response.created" and kinds(events)[-1] == "response.done"
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["transcript"].endswith("sunny.")


async def test_a_cancelled_call_takes_no_output():
    c = connection(tools=[WEATHER_TOOL])
    c.call = WrittenCall()
    feed(c, said(0, "Weather in Paris?", True), state(0, THINKING), called(0, "call_2", done="{}"))
    cancelled = conversation_pb2.FunctionCallCancelled(call_id="call_2", reason="barge_in")
    feed(c, conversation_pb2.ConverseResponse(turn_index=0, function_call_cancelled=cancelled))
    output = {"type": "function_call_output", "call_id": "call_2", "output": "late"}
    with pytest.raises(RealtimeError) as caught:
        await c.on_item_create({"type": "conversation.item.create", "item": output})
    assert caught.value.param == "item.call_id" and "barge_in" in caught.value.message
