"""``/v1/realtime``: one OpenAI Realtime WebSocket (the GA protocol as the official SDKs speak it) <-> one Converse
stream on the router (docs/gateway.md#the-openai-realtime-websocket).

A converter, not a second dialogue: the Converse stream does the listening, endpointing, barge-in, replying and
context; this module turns client events into Converse requests and Converse events into Realtime server events.

- The Converse stream opens at the first audio (or response.create), with the session's settings then
  (realtime_config.RealtimeSession.converse_config); the settings it carries are fixed from there on.
- Audio: the client's format (pcm 24 kHz, pcmu / pcma 8 kHz) is decoded and resampled to 16 kHz for the stream;
  reply audio comes at 24 kHz and is converted to the output format per response.
- While the client sends no audio the gateway feeds the stream silence at the pace of a live microphone, so the
  stream's own idle timeout only ends it when the client is gone, and its endpointer sees time pass.
- turn_detection null: appended audio is held here; input_audio_buffer.commit makes it a user item, response.create
  feeds it and ends the turn (ACTION_END_OF_TURN). With VAD it is fed as it comes and the stream ends turns itself.
- One Converse turn = one user item + one response; its events map as listed in realtime_config.SERVER_EVENTS.
- The transport is a thin adapter: ``WebSocketTransport`` here (events as JSON text messages, audio as base64 in
  them), ``webrtc.WebRTCTransport`` for ``POST /v1/realtime/calls`` (events on the ``oai-events`` data channel, audio
  on the media tracks). The connection handles the events the same way for both; a transport with ``media`` set takes
  the input audio from its track (``feed_input``) and plays the reply audio (``play``) instead of the audio events.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc
from aiohttp import WSMsgType, web

from services.common import audio
from services.common.config.gateway import GatewayConfig
from services.common.convert.sts import PROTO_TOOL_MODES, tool_to_proto
from services.common.engines import Tool
from services.common.metrics import GATEWAY_ADDED, GATEWAY_BYTES, GATEWAY_MESSAGES, GATEWAY_REFUSALS
from services.gateway import protocol
from services.gateway.realtime_config import (
    CLIENT_EVENTS,
    FLEET_INPUT_RATE,
    FLEET_OUTPUT_RATE,
    FORMAT_RATES,
    MANUAL_HANGOVER_MS,
    REFUSED,
    RealtimeError,
    RealtimeSession,
    apply_update,
    engine_tool_choice,
    output_modalities,
    recognition_endpointing,
)
from services.gateway.session import ClientGone as _ClientGone
from services.gateway.session import router_took, still_open
from voice.v1 import (
    audio_pb2,
    conversation_pb2,
    conversation_pb2_grpc,
    recognizer_pb2,
    recognizer_pb2_grpc,
    synthesizer_pb2,
    synthesizer_pb2_grpc,
)

log = logging.getLogger("voicefleet.gateway")

KEEPALIVE_GAP_S = 0.3  # client audio missing this long: the gateway feeds silence (an idle microphone)
KEEPALIVE_MAX_S = 1.0  # at most this much silence per write
MAX_HELD_S = 120.0  # turn_detection null: most audio held uncommitted or unanswered
MIN_COMMIT_MS = 100  # a commit of less audio is an error, as in the protocol
ANSWER_WAIT_S = 20.0  # response.create fed a turn: the stream's commit of it must come within this (+ its audio)
MAX_ITEMS = 200  # items kept for conversation.item.retrieve / truncate
CANCEL_REASONS = {"barge_in": "turn_detected", "client": "client_cancelled"}
# What a transcription session (intent=transcription, or session.type transcription) has no use for.
CONVERSATION_ONLY = (
    "response.create",
    "response.cancel",
    "conversation.item.create",
    "conversation.item.truncate",
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


class WebSocketTransport:
    """The Realtime WebSocket (``GET /v1/realtime``): client events are its text messages, server events are sent as
    text messages, audio rides base64 in the events."""

    route = "realtime"
    media = False

    def __init__(self, ws: web.WebSocketResponse):
        self.ws = ws

    async def receive(self) -> str:
        """The next client event's text; ClientGone when the client is gone."""
        # No idle timeout on messages: a push-to-talk client may say nothing for minutes. A client that is gone stops
        # answering the socket's pings (aiohttp's heartbeat, every gateway.idle_timeout_seconds) and is closed.
        message = still_open(self.ws, await self.ws.receive())
        if message.type != WSMsgType.TEXT:
            raise RealtimeError(
                "binary messages are not part of the protocol: send JSON events (audio as base64 in"
                " input_audio_buffer.append)",
                None,
                "invalid_event",
            )
        return message.data

    async def send(self, text: str) -> bool:
        """False when the client is gone."""
        try:
            await self.ws.send_str(text)
            return True
        except ConnectionResetError:
            return False

    async def close(self, code: int, reason: str) -> None:
        if not self.ws.closed:
            await self.ws.close(code=code, message=protocol.close_reason(reason).encode())


@dataclass
class Decoder:
    """Client audio (its format) -> s16le at the fleet's input rate, seamless across appends, each append's audio
    out with it (audio.LiveResampler: the recognizer hears the caller's speech end when it comes)."""

    kind: str
    resampler: audio.LiveResampler = field(init=False)

    def __post_init__(self):
        self.resampler = audio.LiveResampler(FORMAT_RATES[self.kind], FLEET_INPUT_RATE)

    def decode(self, data: bytes) -> bytes:
        if self.kind == "audio/pcmu":
            pcm = audio.ulaw_decode(data)
        elif self.kind == "audio/pcma":
            pcm = audio.alaw_decode(data)
        else:
            pcm = data
        return self.resampler.feed(pcm)


@dataclass
class Encoder:
    """Reply audio at the fleet's output rate -> the client's format, seamless within one response."""

    kind: str
    resampler: audio.StreamResampler = field(init=False)

    def __post_init__(self):
        self.resampler = audio.StreamResampler(FLEET_OUTPUT_RATE, FORMAT_RATES[self.kind])

    def encode(self, pcm: bytes, last: bool = False) -> bytes:
        pcm = self.resampler.feed(pcm, last=last)
        if self.kind == "audio/pcmu":
            return audio.ulaw_encode(pcm)
        if self.kind == "audio/pcma":
            return audio.alaw_encode(pcm)
        return pcm


@dataclass
class UserTurn:
    """The user's side of one Converse turn."""

    item_id: str
    held: bool = False  # its audio was committed by the client (turn_detection null): item already added
    started: bool = False
    committed: bool = False
    text: bool = False  # a user text item spoken into the stream: no transcription events, its item is as sent
    finals: list = field(default_factory=list)
    start_ms: int = 0
    end_ms: int = 0
    audio_ms: int = 0


@dataclass
class Response:
    """One response: the assistant's side of one Converse turn."""

    id: str
    modalities: list
    metadata: dict | None = None
    turn: int | None = None  # the Converse turn it answers (None until the stream commits it)
    item_id: str = ""
    started: bool = False
    text: list = field(default_factory=list)
    audio_ms: float = 0.0
    cancel_reason: str = ""
    encoder: Encoder | None = None
    deadline: float | None = None  # response.create fed a turn: its commit must come before this (monotonic)
    end_turn_at: float | None = None  # ... and ACTION_END_OF_TURN goes at its first transcript, or at this time
    truncated_ms: int | None = None  # conversation.item.truncate on it while in progress
    calls: list = field(default_factory=list)  # its function_call items, once their arguments are done
    agent_turn: bool = False  # response.create with no user input (or the idle timeout): ACTION_RESPOND
    first_audio_at: float | None = None  # monotonic: when its first audio went out (its playback's start)


class RealtimeConnection:
    """One Realtime session (a WebSocket, or a WebRTC call) <-> one Converse stream. Tasks: the transport's reader
    (client events, in order), the router's reader (Converse events -> server events), the writer (a bounded queue ->
    the transport) and the keeper (silence while the client sends no audio; the response watchdog)."""

    def __init__(
        self,
        section: GatewayConfig,
        channel: grpc.aio.Channel,
        metadata: tuple,
        transport,
        model: str,
        voices: Callable[[], Awaitable[list[str]]],
        intent: str = "",
        settings: RealtimeSession | None = None,  # the first settings (a client secret's session); None: defaults
    ):
        self.section = section
        self.channel = channel
        self.metadata = metadata
        self.transport = transport  # WebSocketTransport, webrtc.WebRTCTransport (None in converter-only tests)
        self.route = getattr(transport, "route", "realtime")  # the metrics' endpoint label
        self.media = bool(getattr(transport, "media", False))  # audio on media tracks, not in events
        self.voices = voices
        self.settings = settings or RealtimeSession(model=model or "gpt-realtime", session_id=new_id("sess"))
        if intent == "transcription":
            self.settings.kind = "transcription"
        self.heard: list[str] = []  # transcription sessions: items whose utterance the recognizer is still decoding
        self.outbound: asyncio.Queue = asyncio.Queue(section.send_queue_messages)
        self.close_code, self.close_reason = 1000, ""
        self.done = asyncio.Event()
        self.call = None
        self.write_lock = asyncio.Lock()
        self.fed_until = 0.0  # monotonic time up to which the stream has audio, at real-time pace
        self.decoder = Decoder(self.settings.input_format)
        self.buffer = bytearray()  # turn_detection null: appended audio not yet committed (fleet rate)
        # Committed, not yet answered: (item id, audio at the fleet rate, whether it is a user text item's speech).
        self.held: list[tuple[str, bytes, bool]] = []
        self.items: OrderedDict[str, dict] = OrderedDict()
        self.last_item_id: str | None = None
        self.turns: dict[int, UserTurn] = {}
        self.response: Response | None = None
        self.next_params: dict | None = None  # response.create's params for the response the stream's commit makes
        self.answered: set[int] = set()
        self.pending_items: list[tuple[str, bool]] = []  # fed at response.create, their Converse turn not shown yet
        self.drop_fed_turn = False  # that fed turn's response was cancelled or failed first: its reply is interrupted
        self.item_audio_ms: dict[str, float] = {}
        # The last reply that ended whole (item id, Converse turn): the one a client that played it from its buffer
        # may truncate after the fact; and truncates sent for it, by turn, until the stream says what it kept.
        self.last_reply: tuple[str, int] | None = None
        self.truncating: dict[int, tuple[str, int]] = {}
        self.feeding = False  # response.create is writing held audio to the stream
        # The stream's function calls by call id: {"turn", "item", "index", "state": waiting / answered / cancelled,
        # "reason"}; and the output a function_call_output item gave, sent to the stream at the next response.create
        # (the Realtime client asks for the reply to an output with response.create; the stream's turn waits for it).
        self.calls: OrderedDict[str, dict] = OrderedDict()
        self.output_ready: tuple[str, str] | None = None
        # server_vad.idle_timeout_ms: since when (monotonic) the line is quiet after the last reply's audio played;
        # None while a response runs, the user speaks, or before any reply.
        self.idle_since: float | None = None
        self.input_ms = 0.0  # audio written to the stream (the caller's and the keeper's silence): its clock
        self.tasks: list[asyncio.Task] = []

    # --- life ------------------------------------------------------------------------------------------------------
    async def run(self) -> int:
        writer = asyncio.create_task(self._write_socket(), name="rt-writer")
        reader = asyncio.create_task(self._read_socket(), name="rt-socket")
        self.tasks += [writer, reader]
        self.emit("session.created", session=self.settings.as_event())
        try:
            waiter = asyncio.create_task(self.done.wait())
            await asyncio.wait([reader, writer, waiter], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            for task in (reader, writer):
                if task.done() and not task.cancelled() and task.exception() is not None:
                    log.error("realtime session: %s failed", task.get_name(), exc_info=task.exception())
                    self.fail(1011, "internal error (the gateway's log has it)")
            if not writer.done():  # let the writer send what is queued (an error event) before closing
                await asyncio.wait([asyncio.create_task(self.outbound.put(None)), writer], timeout=2)
        finally:
            if self.call is not None:
                self.call.cancel()
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.close_code == protocol.SLOW_CLIENT:
            GATEWAY_REFUSALS.labels("slow_client").inc()
        await self.transport.close(self.close_code, self.close_reason)
        return self.close_code

    def fail(self, code: int, reason: str) -> None:
        if self.close_code == 1000:
            self.close_code, self.close_reason = code, reason
        self.done.set()

    # --- out -------------------------------------------------------------------------------------------------------
    def emit(self, kind: str, **fields) -> dict:
        event = {"type": kind, "event_id": new_id("event"), **fields}
        try:
            self.outbound.put_nowait((event, time.perf_counter()))
        except asyncio.QueueFull:
            self.fail(protocol.SLOW_CLIENT, f"client too slow: {self.outbound.maxsize} events unsent")
        return event

    def error(self, e: RealtimeError, client_event_id: str | None) -> None:
        GATEWAY_REFUSALS.labels("bad_input").inc()
        self.emit(
            "error",
            error={"type": e.kind, "code": e.code, "message": e.message, "param": e.param, "event_id": client_event_id},
        )

    async def _write_socket(self) -> None:
        while (entry := await self.outbound.get()) is not None:
            event, queued = entry
            if not await self.transport.send(json.dumps(event)):
                return
            if event["type"] == "response.output_audio.delta":
                GATEWAY_ADDED.labels(self.route).observe(time.perf_counter() - queued)
                GATEWAY_MESSAGES.labels("out", "audio").inc()
            else:
                GATEWAY_MESSAGES.labels("out", "event").inc()

    # --- in --------------------------------------------------------------------------------------------------------
    async def _read_socket(self) -> None:
        try:
            while not self.done.is_set():
                event_id = None
                try:
                    event = _parse(await self.transport.receive())
                    event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
                    await self.handle(event)
                except RealtimeError as e:
                    self.error(e, event_id)
        except _ClientGone:
            if self.call is not None:
                with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                    await self.call.done_writing()
            self.done.set()

    async def handle(self, event: dict) -> None:
        kind = event["type"]
        handler = self.HANDLERS.get(kind)
        if handler is None:
            if CLIENT_EVENTS.get(kind, (None,))[0] == REFUSED:
                raise RealtimeError(
                    f"'{kind}' is not served by this fleet: {CLIENT_EVENTS[kind][1]}.", "type", "unsupported"
                )
            raise RealtimeError(
                f"Invalid value: {kind[:40]!r} is not a client event of the Realtime protocol.", "type", "invalid_event"
            )
        if self.transcribing and kind in CONVERSATION_ONLY:
            raise RealtimeError(
                f"'{kind}' is not part of a transcription session: it transcribes the input audio and never answers",
                "type",
                "unsupported",
            )
        GATEWAY_MESSAGES.labels("in", "audio" if kind == "input_audio_buffer.append" else "control").inc()
        await handler(self, event)

    @property
    def transcribing(self) -> bool:
        return self.settings.kind == "transcription"

    # --- session.update --------------------------------------------------------------------------------------------
    async def on_session_update(self, event: dict) -> None:
        _fields(event, ("session",))
        if "session" not in event:
            raise RealtimeError("Missing required parameter: 'session'.", "session", "missing_required_parameter")
        session = event["session"]
        a = session.get("audio") if isinstance(session, dict) else None
        out = a.get("output") if isinstance(a, dict) else None
        # The fleet's voices, to check a voice against (None: the router could not say; the stream's config will).
        voices = (await self.voices()) or None if isinstance(out, dict) and out.get("voice") else None
        new = apply_update(self.settings, session, self.call is not None, voices, self.section.max_text_chars)
        if new.input_format != self.settings.input_format:
            self.decoder = Decoder(new.input_format)
        self.settings = new
        self.emit("session.updated", session=new.as_event())

    # --- input audio -----------------------------------------------------------------------------------------------
    async def on_append(self, event: dict) -> None:
        _fields(event, ("audio",))
        if self.media:
            raise RealtimeError(
                "over WebRTC the microphone track carries the input audio: input_audio_buffer.append is for WebSocket"
                " sessions",
                "type",
                "unsupported",
            )
        data = event.get("audio")
        if not isinstance(data, str):
            raise RealtimeError(
                "Missing required parameter: 'audio' (base64 audio).", "audio", "missing_required_parameter"
            )
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise RealtimeError("Invalid value for 'audio': not base64.", "audio") from None
        if self.settings.input_format == "audio/pcm" and len(raw) % audio.BYTES_PER_SAMPLE:
            raise RealtimeError(
                f"Invalid value for 'audio': {len(raw)} bytes is not a whole number of 16-bit samples (audio/pcm).",
                "audio",
            )
        GATEWAY_BYTES.labels("in", self.route).inc(len(raw))
        await self.feed_input(self.decoder.decode(raw))

    async def feed_input(self, pcm: bytes) -> None:
        """User audio at the fleet's input rate, from input_audio_buffer.append or a WebRTC microphone track: streamed
        to the stream (VAD) or held until commit (turn_detection null); RealtimeError when the held buffer is full."""
        if self.settings.vad or not self.transcribing:  # a manual transcription is one recognition per commit
            await self._ensure_call()
        if self.settings.vad:
            await self._write_audio(pcm)
            return
        held = len(self.buffer) + sum(len(a) for _, a, _ in self.held)
        if (held + len(pcm)) / 2 / FLEET_INPUT_RATE > MAX_HELD_S:
            raise RealtimeError(
                f"the input audio buffer holds {MAX_HELD_S:g} s already: commit (and response.create) or clear it",
                "audio",
                "input_audio_buffer_full",
            )
        self.buffer += pcm

    async def on_commit(self, event: dict) -> None:
        _fields(event, ())
        if self.settings.vad and self.transcribing:
            raise RealtimeError(
                "with turn detection on, the recognizer ends each utterance itself; use turn_detection null to commit",
                None,
                "unsupported",
            )
        if self.settings.vad:
            turn = self._open_turn()
            if turn is None:
                raise RealtimeError(
                    "nothing to commit: no speech heard since the last turn", None, "input_audio_buffer_commit_empty"
                )
            await self._control(conversation_pb2.ConversationControl.ACTION_END_OF_TURN)
            return
        if not self.transcribing:
            self._one_turn_held()
        self.decoder = Decoder(self.settings.input_format)  # the next buffer starts afresh
        ms = len(self.buffer) * 1000 // 2 // FLEET_INPUT_RATE
        if ms < MIN_COMMIT_MS:
            raise RealtimeError(
                f"buffer too small: {ms} ms of audio; a commit needs at least {MIN_COMMIT_MS} ms",
                None,
                "input_audio_buffer_commit_empty",
            )
        item_id = new_id("item")
        if self.transcribing:
            pcm = bytes(self.buffer)
            self.tasks.append(asyncio.create_task(self._transcribe_once(item_id, pcm), name="rt-transcribe"))
        else:
            self.held.append((item_id, bytes(self.buffer), False))
        self.buffer.clear()
        previous = self.last_item_id
        self.emit("input_audio_buffer.committed", item_id=item_id, previous_item_id=previous)
        item = self._user_item(item_id, None, "completed")
        self.emit("conversation.item.added", item=item, previous_item_id=previous)

    async def on_clear(self, event: dict) -> None:
        _fields(event, ())
        if self.settings.vad:
            raise RealtimeError(
                "with turn detection on, appended audio goes to the recognizer as it comes and cannot be taken back;"
                " use turn_detection null to hold audio until commit",
                None,
                "unsupported",
            )
        self.buffer.clear()
        self.decoder = Decoder(self.settings.input_format)
        self.emit("input_audio_buffer.cleared")

    # --- responses -------------------------------------------------------------------------------------------------
    async def on_response_create(self, event: dict) -> None:
        _fields(event, ("response",))
        params = _response_params(event.get("response"), self.settings)
        if self.response is not None:
            raise RealtimeError(
                f"conversation already has an active response in progress: {self.response.id}; wait for response.done"
                " or send response.cancel",
                None,
                "conversation_already_has_active_response",
            )
        if self.output_ready is not None:  # the reply to a function's output: the stream's turn goes on from it
            call_id, output = self.output_ready
            self.output_ready = None
            call = self.calls[call_id]
            call["state"] = "answered"
            await self._ensure_call()
            response = self._new_response(params)
            response.turn = call["turn"]
            answer = conversation_pb2.FunctionCallOutput(call_id=call_id, output=output)
            await self._write(conversation_pb2.ConverseRequest(function_call_output=answer))
            return
        waiting = [c for c, call in self.calls.items() if call["state"] == "waiting"]
        if waiting:
            raise RealtimeError(
                f"function call {waiting[0]} waits for its output: send a conversation.item.create with a"
                " function_call_output item for it first",
                None,
                "function_call_output_missing",
            )
        if self.held:
            await self._ensure_call()
            response = self._new_response(params)
            # Before the audio goes: the stream's first event of this turn may come while it is still being written.
            held, self.held = self.held, []
            self.pending_items = [(item_id, text) for item_id, _, text in held]
            self.drop_fed_turn = False
            fed_s = sum(len(pcm) for _, pcm, _ in held) / 2 / FLEET_INPUT_RATE
            # The turn ends (ACTION_END_OF_TURN) once the stream has heard its speech (its first transcript): sent
            # now, it could reach the dialogue before the recognizer has heard the burst of audio, and do nothing.
            now = time.monotonic()
            response.end_turn_at = now + fed_s + 3.0
            response.deadline = now + ANSWER_WAIT_S + fed_s
            self.feeding = True
            try:
                for _, pcm, _ in held:
                    await self._write_audio(pcm)
            finally:
                self.feeding = False
            heard = [t for t in self.turns.values() if t.held and t.started and not t.committed]
            if heard and response.end_turn_at is not None:  # heard while it was still being written: end it now
                response.end_turn_at = None
                await self._control(conversation_pb2.ConversationControl.ACTION_END_OF_TURN)
            return
        if self.settings.vad and self._open_turn() is not None:
            self.next_params = params
            await self._control(conversation_pb2.ConversationControl.ACTION_END_OF_TURN)
            return
        await self._respond(params)

    async def _respond(self, params: dict) -> None:
        """A response with no new user input: the agent speaks from the conversation as it is (a greeting first, a
        prompt after a silence), by the stream's ACTION_RESPOND. Its commit must come within ANSWER_WAIT_S."""
        await self._ensure_call()
        response = self._new_response(params)
        response.agent_turn = True
        response.deadline = time.monotonic() + ANSWER_WAIT_S
        await self._control(conversation_pb2.ConversationControl.ACTION_RESPOND)

    async def _idle_timeout(self, now: float) -> None:
        """server_vad.idle_timeout_ms passed with the line quiet: the silence is committed as an empty user item
        and the agent speaks (OpenAI's input_audio_buffer.timeout_triggered)."""
        item_id = new_id("item")
        end_ms = round(self.input_ms)
        start_ms = max(0, end_ms - round((now - self.idle_since) * 1000))
        self.idle_since = None
        previous = self.last_item_id
        self.emit("input_audio_buffer.timeout_triggered", audio_start_ms=start_ms, audio_end_ms=end_ms, item_id=item_id)
        self.emit("input_audio_buffer.committed", item_id=item_id, previous_item_id=previous)
        self.emit(
            "conversation.item.added", item=self._user_item(item_id, None, "completed"), previous_item_id=previous
        )
        self.emit("conversation.item.done", item=self._user_item(item_id, "", "completed"), previous_item_id=None)
        await self._respond({})

    async def on_response_cancel(self, event: dict) -> None:
        _fields(event, ("response_id",))
        response = self.response
        wanted = event.get("response_id")
        if response is None or (wanted is not None and wanted != response.id):
            raise RealtimeError(
                "Cancellation failed: no active response found" + (f" with id {wanted!r}" if wanted else ""),
                "response_id" if wanted else None,
                "response_cancel_not_active",
            )
        response.cancel_reason = "client_cancelled"
        if response.turn is None:
            # Fed but not yet committed by the stream: end it here; the stream's turn is interrupted when it comes.
            self.drop_fed_turn = True
            self._finish(response, "cancelled", "", interrupted=True)
            return
        await self._control(conversation_pb2.ConversationControl.ACTION_INTERRUPT)

    # --- items -----------------------------------------------------------------------------------------------------
    async def on_item_create(self, event: dict) -> None:
        _fields(event, ("item", "previous_item_id"))
        previous = event.get("previous_item_id")
        if previous is not None and previous != self.last_item_id:
            raise RealtimeError(
                "items are added at the end of the conversation only (previous_item_id: the last item, or absent)",
                "previous_item_id",
                "unsupported",
            )
        item = event.get("item")
        if not isinstance(item, dict):
            raise RealtimeError("Missing required parameter: 'item'.", "item", "missing_required_parameter")
        if item.get("type") == "function_call_output":
            self._function_output(item)
            return
        for name in item:
            if name not in ("id", "type", "object", "role", "content", "status"):
                raise RealtimeError(f"Unknown parameter: 'item.{name}'.", f"item.{name}", "unknown_parameter")
        if item.get("type", "message") != "message":
            raise RealtimeError(
                f"'item.type' {str(item.get('type'))[:40]!r} is not served: user messages and function_call_output"
                " items are (the agent's own function_call items come from the stream).",
                "item.type",
                "unsupported",
            )
        role = item.get("role")
        if role != "user":
            raise RealtimeError(
                f"'item.role' {str(role)[:20]!r} is not served: the fleet's context takes user turns only (system"
                " text: session.instructions; assistant text cannot be put into the dialogue's context)",
                "item.role",
                "unsupported",
            )
        item_id = item.get("id") or new_id("item")
        if not isinstance(item_id, str) or len(item_id) > 64 or item_id in self.items:
            raise RealtimeError("Invalid value for 'item.id': a new id of up to 64 characters.", "item.id")
        content = item.get("content")
        if not isinstance(content, list) or not content:
            raise RealtimeError(
                "Invalid value for 'item.content': a list of input_text or input_audio parts.", "item.content"
            )
        texts, pcm = [], bytearray()
        for i, part in enumerate(content):
            where = f"item.content[{i}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "input_text" and isinstance(part.get("text"), str):
                texts.append(part["text"].strip())
            elif kind == "input_audio" and isinstance(part.get("audio"), str):
                try:
                    raw = base64.b64decode(part["audio"], validate=True)
                except (binascii.Error, ValueError):
                    raise RealtimeError(f"Invalid value for '{where}.audio': not base64.", f"{where}.audio") from None
                pcm += Decoder(self.settings.input_format).decode(raw)
            else:
                raise RealtimeError(
                    f"Invalid value for '{where}': input_text with a text, or input_audio with base64 audio"
                    " (input_image is not served).",
                    f"{where}.type",
                )
        if texts and pcm:
            raise RealtimeError("one item is text or audio, not both", "item.content", "unsupported")
        text = " ".join(t for t in texts if t)
        if texts and not text:
            raise RealtimeError("Invalid value for 'item.content': the text is empty.", "item.content")
        if len(text) > self.section.max_text_chars:
            raise RealtimeError(f"the text is longer than {self.section.max_text_chars} characters", "item.content")
        if pcm and len(pcm) * 1000 // 2 // FLEET_INPUT_RATE < MIN_COMMIT_MS:
            raise RealtimeError(f"the audio is shorter than {MIN_COMMIT_MS} ms", "item.content")
        self._one_turn_held()
        if text:
            pcm = bytearray(await self._speak(text))
        await self._ensure_call()
        self.held.append((item_id, bytes(pcm), bool(text)))
        parts = [{"type": "input_text", "text": text}] if text else [{"type": "input_audio", "transcript": None}]
        out = {"id": item_id, "object": "realtime.item", "type": "message", "role": "user", "status": "completed"}
        out["content"] = parts
        previous = self.last_item_id
        self._keep_item(out)
        self.emit("conversation.item.added", item=out, previous_item_id=previous)
        if text:
            self.emit("conversation.item.done", item=out, previous_item_id=previous)

    def _function_output(self, item: dict) -> None:
        """A function_call_output item: the output of the stream's call ``item.call_id``, kept for response.create."""
        for name in item:
            if name not in ("id", "type", "object", "call_id", "output", "status"):
                raise RealtimeError(f"Unknown parameter: 'item.{name}'.", f"item.{name}", "unknown_parameter")
        call_id, output = item.get("call_id"), item.get("output")
        call = self.calls.get(call_id) if isinstance(call_id, str) else None
        if call is None:
            raise RealtimeError(
                f"Invalid value for 'item.call_id': {str(call_id)[:64]!r} is not a call the assistant made.",
                "item.call_id",
            )
        if call["state"] != "waiting" or (self.output_ready is not None and self.output_ready[0] == call_id):
            why = f"was cancelled ({call['reason']})" if call["state"] == "cancelled" else "has its output already"
            raise RealtimeError(f"Invalid value for 'item.call_id': call {call_id} {why}.", "item.call_id")
        if not isinstance(output, str):
            raise RealtimeError("Invalid value for 'item.output': a string (the function's result).", "item.output")
        if len(output) > self.section.max_text_chars:
            raise RealtimeError(f"'item.output' is longer than {self.section.max_text_chars} characters", "item.output")
        item_id = item.get("id") or new_id("item")
        if not isinstance(item_id, str) or len(item_id) > 64 or item_id in self.items:
            raise RealtimeError("Invalid value for 'item.id': a new id of up to 64 characters.", "item.id")
        self.output_ready = (call_id, output)
        out = {
            "id": item_id,
            "object": "realtime.item",
            "type": "function_call_output",
            "status": "completed",
            "call_id": call_id,
            "output": output,
        }
        previous = self.last_item_id
        self._keep_item(out)
        self.emit("conversation.item.added", item=out, previous_item_id=previous)
        self.emit("conversation.item.done", item=out, previous_item_id=previous)

    def _one_turn_held(self) -> None:
        """One user item waits for a response at a time: the stream answers one user turn per reply."""
        if self.held:
            raise RealtimeError(
                f"user item {self.held[0][0]} is waiting for response.create: the fleet answers one user turn per"
                " response; send response.create first (or append more audio before one commit)",
                None,
                "user_item_pending",
            )

    async def _speak(self, text: str) -> bytes:
        """A user text item as speech at the fleet's input rate: the Converse contract takes user turns as audio, so
        the route's default voice says it into the stream (the context then keeps what the recognizer heard)."""
        request = synthesizer_pb2.SynthesizeRequest(
            request_id=f"rt-{uuid.uuid4().hex[:12]}",
            text=text,
            config=synthesizer_pb2.SynthesisConfig(
                output_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=FLEET_INPUT_RATE, channels=1)
            ),
        )
        pcm = bytearray()
        try:
            async for chunk in synthesizer_pb2_grpc.SynthesizerStub(self.channel).Synthesize(
                request, timeout=self.section.request_timeout_seconds, metadata=self.metadata
            ):
                pcm += chunk.audio.data
        except grpc.aio.AioRpcError as e:
            raise RealtimeError(
                f"the text could not be spoken into the conversation: {e.code().name}: {e.details()}",
                "item.content",
                e.code().name,
                "server_error",
            ) from None
        # Half a second of silence after it, as a speaker pauses: the recognizer hears the end of the last word.
        return bytes(pcm) + bytes(FLEET_INPUT_RATE)

    async def on_item_retrieve(self, event: dict) -> None:
        _fields(event, ("item_id",))
        item = self.items.get(event.get("item_id"))
        if item is None:
            raise RealtimeError(
                f"Item with item_id {str(event.get('item_id'))[:40]!r} not found", "item_id", "item_not_found"
            )
        self.emit("conversation.item.retrieved", item=item)

    async def on_item_truncate(self, event: dict) -> None:
        _fields(event, ("item_id", "content_index", "audio_end_ms"))
        item_id = event.get("item_id")
        item = self.items.get(item_id)
        if item is None or item.get("role") != "assistant":
            raise RealtimeError(
                f"Item with item_id {str(item_id)[:40]!r} not found among the assistant's items",
                "item_id",
                "item_not_found",
            )
        if event.get("content_index", 0) != 0:
            raise RealtimeError(
                "Invalid value for 'content_index': the assistant's items have one part (0).", "content_index"
            )
        end_ms = event.get("audio_end_ms")
        if not isinstance(end_ms, int) or isinstance(end_ms, bool) or end_ms < 0:
            raise RealtimeError("Invalid value for 'audio_end_ms': a whole number of ms, 0 or more.", "audio_end_ms")
        response = self.response
        if response is not None and response.item_id == item_id:
            if end_ms > response.audio_ms:
                raise RealtimeError(
                    f"audio_end_ms {end_ms} is past the {response.audio_ms:.0f} ms of audio sent for this item",
                    "audio_end_ms",
                )
            response.cancel_reason = "client_cancelled"
            response.truncated_ms = end_ms
            # The client's playback position: the context keeps the text of that much of the reply.
            await self._control(conversation_pb2.ConversationControl.ACTION_INTERRUPT, played_ms=end_ms)
            return  # conversation.item.truncated follows when the stream says what the context kept
        sent_ms = self.item_audio_ms.get(item_id, 0.0)
        if end_ms > sent_ms:
            raise RealtimeError(
                f"audio_end_ms {end_ms} is past the {sent_ms:.0f} ms of audio sent for this item", "audio_end_ms"
            )
        if end_ms >= int(sent_ms):
            self.emit("conversation.item.truncated", item_id=item_id, content_index=0, audio_end_ms=end_ms)
            return
        # A reply that ended whole, played from the client's buffer: the context keeps what was played of it, if it is
        # still the last reply and no other is under way (an interrupt now would cut that one).
        if self.last_reply is None or self.last_reply[0] != item_id or self.response is not None:
            raise RealtimeError(
                "only the last reply can be cut after it ended, and not while another response is in progress: the"
                " context has gone on from this one",
                "item_id",
                "unsupported",
            )
        turn = self.last_reply[1]
        self.truncating[turn] = (item_id, end_ms)
        await self._control(conversation_pb2.ConversationControl.ACTION_INTERRUPT, played_ms=end_ms)

    # --- output audio (WebRTC) -------------------------------------------------------------------------------------
    async def on_output_audio_clear(self, event: dict) -> None:
        _fields(event, ())
        if not self.media:
            raise RealtimeError(
                "'output_audio_buffer.clear' is for WebRTC sessions (POST /v1/realtime/calls), where the server plays"
                " the audio; on the WebSocket the client holds the audio it was sent: stop its playback and send"
                " response.cancel",
                "type",
                "unsupported",
            )
        self._clear_output(always=True)

    def _clear_output(self, always: bool = False) -> None:
        """Drop the reply audio the track still holds; output_audio_buffer.cleared when there was any (or ``always``:
        the client asked)."""
        response_id = self.transport.clear()
        if response_id is not None or always:
            r = self.response
            self.emit("output_audio_buffer.cleared", response_id=response_id or (r.id if r is not None else None))

    def playout_started(self, response_id: str) -> None:
        """The track began playing a response's audio."""
        self.emit("output_audio_buffer.started", response_id=response_id)

    def playout_stopped(self, response_id: str) -> None:
        """The track played all of a finished response's audio."""
        self.emit("output_audio_buffer.stopped", response_id=response_id)

    HANDLERS: dict = {}

    # --- the Converse stream ---------------------------------------------------------------------------------------
    async def _ensure_call(self) -> None:
        if self.call is not None:
            return
        if self.transcribing:
            stub = recognizer_pb2_grpc.RecognizerStub(self.channel)
            self.call = stub.StreamingRecognize(metadata=self.metadata)
            with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                await self.call.write(self._recognition_config(recognition_endpointing(self.settings)))
            await router_took(self.call)
            self.fed_until = time.monotonic()
            self.tasks.append(asyncio.create_task(self._read_router(), name="rt-recognizer"))
            self.tasks.append(asyncio.create_task(self._keep(), name="rt-keeper"))
            return
        config_message = self.settings.converse_config(self.section.max_text_chars)
        request_id, config = protocol.conversation_config(config_message, self.section.max_text_chars)
        self._tools_config(config)
        request_id = f"rt-{uuid.uuid4().hex[:12]}"
        stub = conversation_pb2_grpc.ConversationStub(self.channel)
        self.call = stub.Converse(metadata=self.metadata)
        with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            await self.call.write(conversation_pb2.ConverseRequest(request_id=request_id, config=config))
        await router_took(self.call)
        self.fed_until = time.monotonic()
        self.tasks.append(asyncio.create_task(self._read_router(), name="rt-router"))
        self.tasks.append(asyncio.create_task(self._keep(), name="rt-keeper"))

    def _tools_config(self, config: conversation_pb2.ConversationConfig) -> None:
        """session.tools and tool_choice onto the Converse config (checked at session.update)."""
        for t in self.settings.tools:
            config.tools.append(
                tool_to_proto(Tool(t["name"], t["description"], t["parameters"], json.dumps(t["parameters"])))
            )
        config.tool_filler_ms = 0  # a Realtime app speaks its own filler while its function runs, if it wants one
        choice = engine_tool_choice(self.settings.tool_choice)
        config.tool_choice.CopyFrom(
            conversation_pb2.ToolChoice(mode=PROTO_TOOL_MODES[choice.mode], function_name=choice.function)
        )

    async def _write(self, request) -> bool:
        async with self.write_lock:
            try:
                await self.call.write(request)
                return True
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                return False  # the call is over; the router's reader reports why

    async def _write_audio(self, pcm: bytes) -> None:
        step = FLEET_INPUT_RATE * 2  # 1 s per message
        for start in range(0, len(pcm), step):
            piece = pcm[start : start + step]
            if self.transcribing:
                request = recognizer_pb2.StreamingRecognizeRequest(audio=piece)
            else:
                request = conversation_pb2.ConverseRequest(audio=piece)
            if not await self._write(request):
                return
        now = time.monotonic()
        self.fed_until = max(self.fed_until, now) + len(pcm) / 2 / FLEET_INPUT_RATE
        self.input_ms += len(pcm) * 1000 / 2 / FLEET_INPUT_RATE

    async def _control(self, action, played_ms: int | None = None) -> None:
        control = conversation_pb2.ConversationControl(action=action, played_ms=played_ms)
        await self._write(conversation_pb2.ConverseRequest(control=control))

    async def _keep(self) -> None:
        """Silence while the client sends none (an idle microphone), and the fed turn's watchdog."""
        while True:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            gap = now - self.fed_until
            if gap >= KEEPALIVE_GAP_S:
                samples = int(min(gap, KEEPALIVE_MAX_S) * FLEET_INPUT_RATE)
                await self._write_audio(bytes(samples * 2))
            r = self.response
            if r is not None and r.turn is None and r.end_turn_at is not None and now > r.end_turn_at:
                r.end_turn_at = None
                await self._control(conversation_pb2.ConversationControl.ACTION_END_OF_TURN)
            if r is not None and r.turn is None and r.agent_turn and now > r.deadline:
                self._finish(
                    r,
                    "failed",
                    "",
                    error={
                        "type": "server_error",
                        "code": "no_turn",
                        "message": "the conversation did not start the agent's turn in time; send response.create again",
                    },
                )
            elif r is not None and r.turn is None and r.deadline is not None and now > r.deadline:
                self.drop_fed_turn = True
                self._finish(
                    r,
                    "failed",
                    "",
                    error={
                        "type": "invalid_request_error",
                        "code": "no_speech",
                        "message": "no speech was heard in the committed audio: nothing to answer",
                    },
                )
            idle = self.settings.idle_timeout_s
            if (
                idle is not None
                and self.idle_since is not None
                and now - self.idle_since >= idle
                and self.response is None
                and not self.held
                and self._open_turn() is None
                and self.output_ready is None
                and not any(call["state"] == "waiting" for call in self.calls.values())  # the app runs its function
            ):
                await self._idle_timeout(now)

    async def _read_router(self) -> None:
        try:
            while (response := await self.call.read()) is not grpc.aio.EOF:
                if self.transcribing:
                    self.on_recognition(response)
                else:
                    self.on_converse(response)
            self.fail(1000, "the conversation ended")
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                self.done.set()
                return
            server = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
            kind = "server_error" if e.code() in server or e.code() not in protocol.ROUTER_CLOSE_CODES else ""
            kind = kind or "invalid_request_error"
            self.emit(
                "error",
                error={
                    "type": kind,
                    "code": e.code().name,
                    "message": e.details() or "",
                    "param": None,
                    "event_id": None,
                },
            )
            self.fail(protocol.ROUTER_CLOSE_CODES.get(e.code(), 1011), f"router: {e.code().name}: {e.details()}")

    # --- transcription sessions: Recognizer events -> Realtime events ---------------------------------------------
    def _recognition_config(self, endpointing: dict) -> recognizer_pb2.StreamingRecognizeRequest:
        message = {"type": "config", "sample_rate": FLEET_INPUT_RATE, "endpointing": endpointing}
        _, conversation = protocol.conversation_config(
            message, self.section.max_text_chars
        )  # one endpointing definition
        config = recognizer_pb2.RecognitionConfig(
            input_format=conversation.input_format,
            language=(self.settings.transcription or {}).get("language") or "",
            interim_results=False,
            endpointing=conversation.endpointing,
        )
        return recognizer_pb2.StreamingRecognizeRequest(request_id=f"rt-{uuid.uuid4().hex[:12]}", config=config)

    def on_recognition(self, r: recognizer_pb2.StreamingRecognizeResponse) -> None:
        kind = r.WhichOneof("event")
        if kind == "vad" and r.vad.kind == recognizer_pb2.VadEvent.KIND_SPEECH_START:
            item_id = new_id("item")
            self.heard.append(item_id)
            self.emit("input_audio_buffer.speech_started", audio_start_ms=r.vad.offset_ms, item_id=item_id)
        elif kind == "vad" and r.vad.kind == recognizer_pb2.VadEvent.KIND_SPEECH_END and self.heard:
            item_id = self.heard[-1]
            previous = self.last_item_id
            self.emit("input_audio_buffer.speech_stopped", audio_end_ms=r.vad.offset_ms, item_id=item_id)
            self.emit("input_audio_buffer.committed", item_id=item_id, previous_item_id=previous)
            self.emit(
                "conversation.item.added", item=self._user_item(item_id, None, "completed"), previous_item_id=previous
            )
        elif kind == "result" and r.result.is_final:
            # Finals come in utterance order, each after its speech end: the oldest item still waiting is this one's.
            item_id = self.heard.pop(0) if self.heard else None
            if item_id is None:  # a final with no speech events before it: its item starts here
                item_id, previous = new_id("item"), self.last_item_id
                self.emit("input_audio_buffer.committed", item_id=item_id, previous_item_id=previous)
                item = self._user_item(item_id, None, "completed")
                self.emit("conversation.item.added", item=item, previous_item_id=previous)
            self._transcribed(
                item_id, r.result.transcript.strip(), r.result.utterance_end_ms - r.result.utterance_start_ms
            )

    def _transcribed(self, item_id: str, text: str, ms: int) -> None:
        if text:
            self.emit("conversation.item.input_audio_transcription.delta", item_id=item_id, content_index=0, delta=text)
        self.emit(
            "conversation.item.input_audio_transcription.completed",
            item_id=item_id,
            content_index=0,
            transcript=text,
            usage={"type": "duration", "seconds": round(max(0, ms) / 1000, 3)},
        )
        self.emit("conversation.item.done", item=self._user_item(item_id, text, "completed"), previous_item_id=None)

    async def _transcribe_once(self, item_id: str, pcm: bytes) -> None:
        """turn_detection null: one committed buffer, one recognition (its endpointing at its longest, so the buffer
        is one utterance unless it holds a pause of over 5 s)."""
        first = self._recognition_config({"mode": "silence", "hangover_ms": MANUAL_HANGOVER_MS})

        async def requests():
            yield first
            for start in range(0, len(pcm), FLEET_INPUT_RATE * 2):
                yield recognizer_pb2.StreamingRecognizeRequest(audio=pcm[start : start + FLEET_INPUT_RATE * 2])

        finals = []
        try:
            async for r in recognizer_pb2_grpc.RecognizerStub(self.channel).StreamingRecognize(
                requests(), timeout=self.section.request_timeout_seconds, metadata=self.metadata
            ):
                if r.WhichOneof("event") == "result" and r.result.is_final and r.result.transcript.strip():
                    finals.append(r.result.transcript.strip())
        except grpc.aio.AioRpcError as e:
            error = {"type": "server_error", "code": e.code().name, "message": e.details() or ""}
            self.emit(
                "conversation.item.input_audio_transcription.failed", item_id=item_id, content_index=0, error=error
            )
            return
        self._transcribed(item_id, " ".join(finals), len(pcm) * 1000 // 2 // FLEET_INPUT_RATE)

    # --- Converse events -> Realtime events ------------------------------------------------------------------------
    def on_converse(self, r: conversation_pb2.ConverseResponse) -> None:
        kind = r.WhichOneof("event")
        t = r.turn_index
        if kind == "user_transcript":
            self._on_transcript(t, r.user_transcript)
        elif kind == "state" and r.state.state == conversation_pb2.CONVERSATION_STATE_THINKING:
            self._on_commit(t)
        elif kind == "reply_text":
            response = self._response_of(t)
            if response is not None and r.reply_text.delta:
                self._start_output(response)
                response.text.append(r.reply_text.delta)
                name = "response.output_text.delta" if response.modalities == ["text"] else None
                self.emit(
                    name or "response.output_audio_transcript.delta",
                    **self._part_ids(response),
                    delta=r.reply_text.delta,
                )
        elif kind == "reply_audio":
            response = self._response_of(t)
            if response is None:
                log.warning("realtime: reply audio of turn %d with no response for it (%s)", t, self._where())
            if response is not None and response.modalities == ["audio"] and r.reply_audio.data:
                self._start_output(response)
                if response.first_audio_at is None:
                    response.first_audio_at = time.monotonic()
                pcm = r.reply_audio.data
                response.audio_ms += len(pcm) * 1000 / 2 / FLEET_OUTPUT_RATE
                if self.media:
                    GATEWAY_BYTES.labels("out", self.route).inc(len(pcm))
                    self.transport.play(response.id, pcm)
                else:
                    self._audio_delta(response, response.encoder.encode(pcm))
        elif kind == "interrupted":
            response = self._response_of(t)
            if response is not None and not response.cancel_reason:
                response.cancel_reason = CANCEL_REASONS.get(r.interrupted.reason, "turn_detected")
            truncated = self.truncating.pop(t, None)
            if response is None and truncated is not None:
                self._cut_item(*truncated, r.interrupted.heard_text)
            if self.media:  # what the track still holds would play over the user: dropped at once
                self._clear_output()
        elif kind == "turn_complete":
            c = r.turn_complete
            tm = c.timings
            log.info(
                "realtime turn %d: speech end -> commit %d ms, -> transcript %d ms, transcript -> first text %d ms,"
                " speech end -> first audio %d ms%s",
                t,
                tm.speech_end_to_commit_ms,
                tm.speech_end_to_transcript_ms,
                tm.transcript_to_first_text_ms,
                tm.speech_end_to_first_audio_ms,
                " (preemptive)" if tm.preemptive else "",
            )
            turn = self.turns.get(t)
            if turn is not None and not turn.committed:
                turn.finals = [c.user_text] if c.user_text else turn.finals
                self._on_commit(t)
            response = self._response_of(t)
            if response is not None:
                self._finish(response, "cancelled" if c.interrupted else "completed", c.reply_text, c.interrupted)
            self.answered.add(t)
            self.turns.pop(t, None)
        elif kind == "function_call":
            self._on_function_call(t, r.function_call)
        elif kind == "function_call_cancelled":
            call = self.calls.get(r.function_call_cancelled.call_id)
            if call is not None and call["state"] == "waiting":
                call["state"], call["reason"] = "cancelled", r.function_call_cancelled.reason
            if self.output_ready is not None and self.output_ready[0] == r.function_call_cancelled.call_id:
                self.output_ready = None
        elif kind == "turn_error":
            e = r.turn_error
            error = {"type": "server_error", "code": protocol.code_name(e.code), "message": e.message}
            response = self._response_of(t)
            if response is not None:
                self._finish(response, "failed", "", error=error)
            else:
                self.emit("error", error={**error, "param": None, "event_id": None})
            self.answered.add(t)
            self.turns.pop(t, None)

    def _on_function_call(self, t: int, f: conversation_pb2.FunctionCall) -> None:
        """The stream's function call: a function_call item of the turn's response, its arguments streamed; once
        done, the response is done (the Realtime client answers with a function_call_output item, then
        response.create, and the stream's turn goes on from the output)."""
        response = self._response_of(t)
        if response is None:
            log.warning(
                "realtime: function call %s of turn %d with no response for it (%s)", f.call_id, t, self._where()
            )
            return
        call = self.calls.get(f.call_id)
        if call is None:
            item = {
                "id": new_id("item"),
                "object": "realtime.item",
                "type": "function_call",
                "status": "in_progress",
                "name": f.name,
                "call_id": f.call_id,
                "arguments": "",
            }
            call = {"turn": t, "item": item, "index": int(response.started) + len(response.calls), "state": "waiting"}
            self.calls[f.call_id] = call
            while len(self.calls) > MAX_ITEMS:
                self.calls.popitem(last=False)
            previous = self.last_item_id
            self._keep_item(item)
            self.emit("response.output_item.added", response_id=response.id, output_index=call["index"], item=item)
            self.emit("conversation.item.added", item=item, previous_item_id=previous)
        item, ids = call["item"], {"response_id": response.id, "item_id": call["item"]["id"]}
        if f.arguments_delta:
            item["arguments"] += f.arguments_delta
            self.emit(
                "response.function_call_arguments.delta",
                **ids,
                output_index=call["index"],
                call_id=f.call_id,
                delta=f.arguments_delta,
            )
        if f.done:
            item["arguments"], item["status"] = f.arguments, "completed"
            self.emit(
                "response.function_call_arguments.done",
                **ids,
                output_index=call["index"],
                call_id=f.call_id,
                name=item["name"],
                arguments=f.arguments,
            )
            self.emit("response.output_item.done", response_id=response.id, output_index=call["index"], item=item)
            self.emit("conversation.item.done", item=item, previous_item_id=None)
            response.calls.append(item)
            self._finish(response, "completed", "")

    def _where(self) -> str:
        r = self.response
        return f"response {r.id} for turn {r.turn}" if r is not None else "no response active"

    def _user_item(self, item_id: str, transcript: str | None, status: str) -> dict:
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": status,
            "content": [{"type": "input_audio", "transcript": transcript}],
        }
        self._keep_item(item)
        return item

    def _cut_item(self, item_id: str, end_ms: int, heard: str) -> None:
        """A finished reply cut after the fact: its item holds the text of the audio played (what the context kept)."""
        item = self.items.get(item_id)
        if item is not None:
            item["content"][0]["transcript"] = heard
        self.emit("conversation.item.truncated", item_id=item_id, content_index=0, audio_end_ms=end_ms)

    def _keep_item(self, item: dict) -> None:
        if item["id"] not in self.items:
            self.last_item_id = item["id"]
        self.items[item["id"]] = item
        while len(self.items) > MAX_ITEMS:
            gone, _ = self.items.popitem(last=False)
            self.item_audio_ms.pop(gone, None)

    def _open_turn(self) -> UserTurn | None:
        """The user turn the stream is hearing now (speech heard, not committed), if any."""
        for t in sorted(self.turns):
            turn = self.turns[t]
            if not turn.committed and not turn.held and t not in self.answered:
                return turn
        return None

    def _turn(self, t: int) -> UserTurn:
        turn = self.turns.get(t)
        if turn is None:
            if self.pending_items:
                item_id, text = self.pending_items[0]
                turn = UserTurn(item_id=item_id, held=True, text=text)
                self.pending_items = []
            else:
                turn = UserTurn(item_id=new_id("item"))
            self.turns[t] = turn
        return turn

    def _on_transcript(self, t: int, result) -> None:
        if t in self.answered:
            return
        turn = self._turn(t)
        if turn.committed:
            return
        if not turn.started:
            turn.started = True
            self.idle_since = None
            turn.start_ms = result.utterance_start_ms
            if self.settings.vad and not turn.held:
                self.emit("input_audio_buffer.speech_started", audio_start_ms=turn.start_ms, item_id=turn.item_id)
            r = self.response
            if turn.held and r is not None and r.turn is None and r.end_turn_at is not None and not self.feeding:
                r.end_turn_at = None  # the stream hears the fed turn: end it now
                self.tasks.append(
                    asyncio.create_task(self._control(conversation_pb2.ConversationControl.ACTION_END_OF_TURN))
                )
        if result.is_final and result.transcript.strip():
            text = result.transcript.strip()
            turn.finals.append(text)
            turn.end_ms = max(turn.end_ms, result.utterance_end_ms)
            if self.settings.transcription is not None and not turn.text:
                delta = text if len(turn.finals) == 1 else " " + text
                self.emit(
                    "conversation.item.input_audio_transcription.delta",
                    item_id=turn.item_id,
                    content_index=0,
                    delta=delta,
                )

    def _on_commit(self, t: int) -> None:
        if t in self.answered:
            return
        turn = self._turn(t)
        if turn.committed:
            return
        turn.committed = True
        response = self.response
        if response is not None and response.agent_turn and response.turn is None and not turn.started:
            response.turn = t  # the agent's own turn (ACTION_RESPOND): no user item
            return
        if not turn.held:
            previous = self.last_item_id
            if self.settings.vad:
                if not turn.started:
                    self.emit("input_audio_buffer.speech_started", audio_start_ms=turn.start_ms, item_id=turn.item_id)
                self.emit("input_audio_buffer.speech_stopped", audio_end_ms=turn.end_ms, item_id=turn.item_id)
            self.emit("input_audio_buffer.committed", item_id=turn.item_id, previous_item_id=previous)
            item = self._user_item(turn.item_id, None, "completed")
            self.emit("conversation.item.added", item=item, previous_item_id=previous)
        text = " ".join(turn.finals).strip()
        seconds = max(0.0, (turn.end_ms - turn.start_ms) / 1000)
        if self.settings.transcription is not None and not turn.text:
            self.emit(
                "conversation.item.input_audio_transcription.completed",
                item_id=turn.item_id,
                content_index=0,
                transcript=text,
                usage={"type": "duration", "seconds": round(seconds, 3)},
            )
        if not turn.text:  # a text item was done when it was created
            done = self._user_item(turn.item_id, text, "completed")
            self.emit("conversation.item.done", item=done, previous_item_id=None)
        response = self.response
        if turn.held and self.drop_fed_turn and (response is None or response.turn is not None):
            # The response this fed turn was for ended first (cancelled, or no commit in time): its reply is stopped.
            self.drop_fed_turn = False
            self.answered.add(t)
            self.tasks.append(asyncio.create_task(self._control(conversation_pb2.ConversationControl.ACTION_INTERRUPT)))
            return
        if response is not None and response.turn is None and response.deadline is not None:
            response.turn = t  # the turn response.create fed
            return
        if response is not None:
            # The previous turn's response has not ended yet (its turn_complete is late): it ends here, cancelled.
            self._finish(response, "cancelled", "".join(response.text), interrupted=True)
        params, self.next_params = self.next_params or {}, None
        response = self._new_response(params)
        response.turn = t

    def _new_response(self, params: dict) -> Response:
        modalities = params.get("output_modalities") or list(self.settings.output_modalities)
        response = Response(id=new_id("resp"), modalities=modalities, metadata=params.get("metadata"))
        response.encoder = Encoder(self.settings.output_format)
        self.response = response
        self.idle_since = None
        self.emit("response.created", response=self._response_body(response, "in_progress", []))
        return response

    def _response_of(self, t: int) -> Response | None:
        r = self.response
        return r if r is not None and r.turn == t else None

    def _response_body(self, response: Response, status: str, output: list, details=None) -> dict:
        return {
            "object": "realtime.response",
            "id": response.id,
            "status": status,
            "status_details": details,
            "output": output,
            "conversation_id": None,
            "output_modalities": response.modalities,
            "max_output_tokens": self.settings.max_output_tokens,
            "audio": {"output": {"format": {"type": self.settings.output_format}, "voice": self.settings.voice}},
            "metadata": response.metadata,
            "usage": None,
        }

    def _assistant_item(self, response: Response, status: str, text: str) -> dict:
        if response.modalities == ["text"]:
            content = [{"type": "output_text", "text": text}]
        else:
            content = [{"type": "output_audio", "transcript": text}]
        return {
            "id": response.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def _part_ids(self, response: Response) -> dict:
        return {"response_id": response.id, "item_id": response.item_id, "output_index": 0, "content_index": 0}

    def _part(self, response: Response, text: str) -> dict:
        if response.modalities == ["text"]:
            return {"type": "text", "text": text}
        return {"type": "audio", "transcript": text}

    def _start_output(self, response: Response) -> None:
        if response.started:
            return
        response.started = True
        response.item_id = new_id("item")
        previous = self.last_item_id
        item = self._assistant_item(response, "in_progress", "")
        self._keep_item(item)
        self.emit("response.output_item.added", response_id=response.id, output_index=0, item=item)
        self.emit("conversation.item.added", item=item, previous_item_id=previous)
        self.emit("response.content_part.added", **self._part_ids(response), part=self._part(response, ""))

    def _audio_delta(self, response: Response, data: bytes) -> None:
        if data:
            GATEWAY_BYTES.labels("out", self.route).inc(len(data))
            self.emit("response.output_audio.delta", **self._part_ids(response), delta=base64.b64encode(data).decode())

    def _finish(self, response: Response, status: str, text: str, interrupted: bool = False, error=None) -> None:
        if self.response is not response:
            return
        self.response = None
        # The idle timeout counts from when the caller has heard the reply out (its audio plays at real time).
        played_out = (response.first_audio_at or 0.0) + response.audio_ms / 1000
        self.idle_since = max(time.monotonic(), played_out)
        output = []
        if response.started:
            if response.modalities == ["audio"] and self.media:
                self.transport.play_end(response.id)
            elif response.modalities == ["audio"]:
                self._audio_delta(response, response.encoder.encode(b"", last=True))
            text = text if (interrupted or text) else "".join(response.text)
            ids = self._part_ids(response)
            if response.modalities == ["text"]:
                self.emit("response.output_text.done", **ids, text=text)
            else:
                self.emit("response.output_audio.done", **ids)
                self.emit("response.output_audio_transcript.done", **ids, transcript=text)
            self.emit("response.content_part.done", **ids, part=self._part(response, text))
            item = self._assistant_item(response, "completed" if status == "completed" else "incomplete", text)
            self._keep_item(item)
            self.item_audio_ms[response.item_id] = response.audio_ms
            self.emit("response.output_item.done", response_id=response.id, output_index=0, item=item)
            self.emit("conversation.item.done", item=item, previous_item_id=None)
            output = [item]
            if response.truncated_ms is not None:
                self.emit(
                    "conversation.item.truncated",
                    item_id=response.item_id,
                    content_index=0,
                    audio_end_ms=response.truncated_ms,
                )
        output += response.calls
        # Only a spoken reply that ended whole can be cut after the fact (the dialogue keeps no other that way).
        whole = status == "completed" and response.started and response.modalities == ["audio"]
        self.last_reply = (response.item_id, response.turn) if whole and response.turn is not None else None
        details = None
        if status == "cancelled":
            details = {"type": "cancelled", "reason": response.cancel_reason or "turn_detected"}
        elif status == "failed":
            details = {"type": "failed", "error": error}
        self.emit("response.done", response=self._response_body(response, status, output, details))


def _parse(text: str) -> dict:
    try:
        event = json.loads(text)
    except ValueError as e:
        raise RealtimeError(f"The server could not parse the message as JSON: {e}", None, "invalid_json") from None
    if not isinstance(event, dict):
        raise RealtimeError("each message must be a JSON object with a 'type'", None, "invalid_event")
    if not isinstance(event.get("type"), str):
        raise RealtimeError("Missing required parameter: 'type'.", "type", "missing_required_parameter")
    return event


def _fields(event: dict, known: tuple[str, ...]) -> None:
    for name in event:
        if name not in ("type", "event_id", *known):
            raise RealtimeError(f"Unknown parameter: '{name}'.", name, "unknown_parameter")


RESPONSE_FIELDS = (
    "output_modalities",
    "metadata",
    "conversation",
    "instructions",
    "audio",
    "max_output_tokens",
    "tools",
    "tool_choice",
    "input",
    "prompt",
    "reasoning",
    "parallel_tool_calls",
)


def _response_params(params, settings: RealtimeSession) -> dict:
    """response.create's ``response``: output_modalities and metadata honoured; overrides of what the Converse
    stream fixed per session refused by name (values equal to the session's are fine)."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise RealtimeError("Invalid type for 'response': expected an object.", "response", "invalid_type")
    for name in params:
        if name not in RESPONSE_FIELDS:
            raise RealtimeError(f"Unknown parameter: 'response.{name}'.", f"response.{name}", "unknown_parameter")
    out: dict = {}
    if params.get("output_modalities") is not None:
        out["output_modalities"] = output_modalities(params["output_modalities"], "response.output_modalities")
    if params.get("metadata") is not None:
        if not isinstance(params["metadata"], dict) or len(params["metadata"]) > 16:
            raise RealtimeError("Invalid value for 'response.metadata': up to 16 key-value pairs.", "response.metadata")
        out["metadata"] = params["metadata"]
    same = {
        "conversation": (None, "auto"),
        "instructions": (None, settings.instructions),
        "max_output_tokens": (None, settings.max_output_tokens),
        "tools": (None, []),
        "tool_choice": (None, "auto", "none"),
        "input": (None,),
        "prompt": (None,),
        "reasoning": (None,),
        "parallel_tool_calls": (None, False),
    }
    for name, allowed in same.items():
        if name in params and params[name] not in allowed:
            raise RealtimeError(
                f"'response.{name}' is not served per response: the fleet's conversation takes it once per session"
                " (session.update before any audio) or not at all.",
                f"response.{name}",
                "unsupported",
            )
    if params.get("audio") not in (None, {}):
        raise RealtimeError(
            "'response.audio' is not served per response: set session.audio.output.", "response.audio", "unsupported"
        )
    return out


RealtimeConnection.HANDLERS = {
    "session.update": RealtimeConnection.on_session_update,
    "input_audio_buffer.append": RealtimeConnection.on_append,
    "input_audio_buffer.commit": RealtimeConnection.on_commit,
    "input_audio_buffer.clear": RealtimeConnection.on_clear,
    "response.create": RealtimeConnection.on_response_create,
    "response.cancel": RealtimeConnection.on_response_cancel,
    "conversation.item.create": RealtimeConnection.on_item_create,
    "conversation.item.retrieve": RealtimeConnection.on_item_retrieve,
    "conversation.item.truncate": RealtimeConnection.on_item_truncate,
    "output_audio_buffer.clear": RealtimeConnection.on_output_audio_clear,
}
