"""``POST /v1/realtime/calls``: the OpenAI Realtime API over WebRTC (OpenAI's browser flow), on aiortc
(docs/gateway.md#webrtc-post-v1realtimecalls).

The body is the browser's SDP offer (``application/sdp``, or OpenAI's multipart form with ``sdp`` and ``session``);
the answer is ours (201, ``application/sdp``, ``Location: /v1/realtime/calls/{call_id}``). Then, peer to peer:

- the microphone track comes up (Opus, 48 kHz): decoded by aiortc, mixed to mono, resampled to the fleet's 16 kHz and
  fed to the session like ``input_audio_buffer.append`` audio (``RealtimeConnection.feed_input``);
- the reply goes down on our audio track (``ReplyTrack``): the Converse reply audio (24 kHz) resampled to 48 kHz, cut
  into 20 ms frames at the pace of playback, encoded to Opus by aiortc;
- the events are the WebSocket route's JSON events, as text messages on the ``oai-events`` data channel.

``WebRTCTransport`` is the adapter the shared ``RealtimeConnection`` runs on (realtime.py's ``WebSocketTransport`` is
the other). The Converse stream's config is fixed when it opens, so the microphone's audio is held (not dropped) until
the client has had its say: the data channel open and either the client's first event handled (its session.update)
or ``SETTLE_S`` passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import logging
import time
import uuid
from collections import deque

import numpy as np
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.sdp import SessionDescription
from av import AudioFrame

from services.common import audio
from services.common.config.gateway import IceServer
from services.common.metrics import GATEWAY_BYTES
from services.gateway.realtime_config import FLEET_INPUT_RATE, FLEET_OUTPUT_RATE, RealtimeError
from services.gateway.session import ClientGone

log = logging.getLogger("voicefleet.gateway")

RTC_RATE = 48_000  # Opus's clock; the reply track's frames are at this rate
FRAME_S = 0.020  # 20 ms per frame, as aiortc packetizes audio
FRAME_SAMPLES = int(RTC_RATE * FRAME_S)
EVENTS_CHANNEL = "oai-events"
CONNECT_TIMEOUT_S = 30.0  # the data channel must open this long after the answer, or the call is closed
SETTLE_S = 1.0  # after the data channel opens: the longest wait for the client's first event before audio is taken
HOLD_MAX_S = 30.0  # microphone audio held before the stream opens, at most
FEED_S = 0.04  # microphone audio goes to the session in pieces of this much (two frames)
BUFFERED_MAX_BYTES = 1 << 20  # the data channel's send buffer: past this the writer waits (the session's queue bounds)
BUFFERED_LOW_BYTES = 1 << 18  # ... until it is down to this


class CallError(Exception):
    """A bad request to /v1/realtime/calls: 400 naming ``param``."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param, self.message = param, message


def check_offer(sdp: str) -> None:
    """CallError naming ``sdp`` unless it is an offer this route can answer: an audio section with Opus (the
    microphone) and a data channel section (oai-events), each with ICE credentials."""
    if not sdp.strip():
        raise CallError("sdp", "sdp: required, the SDP offer (the body with Content-Type: application/sdp)")
    if not sdp.lstrip().startswith("v=0"):
        raise CallError("sdp", "sdp: not an SDP offer (it must start with 'v=0'): send pc.localDescription.sdp")
    try:
        parsed = SessionDescription.parse(sdp)
    except (ValueError, IndexError, KeyError, TypeError) as e:
        raise CallError("sdp", f"sdp: could not be parsed: {str(e)[:120]}") from None
    kinds = [m.kind for m in parsed.media]
    audio_sections = [m for m in parsed.media if m.kind == "audio"]
    if not audio_sections:
        raise CallError(
            "sdp",
            f"sdp: the offer has no audio section (it has {kinds or 'none'}): add the microphone track (addTrack or"
            " addTransceiver('audio')) before createOffer",
        )
    if not any(c.mimeType.lower() == "audio/opus" for m in audio_sections for c in m.rtp.codecs):
        raise CallError("sdp", "sdp: the offer's audio section has no Opus codec: this route speaks Opus both ways")
    if "application" not in kinds:
        raise CallError(
            "sdp",
            f"sdp: the offer has no data channel section: create the '{EVENTS_CHANNEL}' data channel before"
            " createOffer (the events travel on it)",
        )
    for m in parsed.media:
        ice = m.ice
        if ice is None or not ice.usernameFragment or not ice.password:
            raise CallError("sdp", f"sdp: the {m.kind} section has no ICE credentials (a=ice-ufrag, a=ice-pwd)")
        if not m.dtls or not m.dtls.fingerprints:
            raise CallError("sdp", f"sdp: the {m.kind} section has no DTLS fingerprint (a=fingerprint)")


def ice_server(server: IceServer) -> RTCIceServer:
    """A configured STUN/TURN server as aiortc's RTCIceServer (a TURN server with its long-term credential)."""
    credential = server.credential.get_secret_value()
    return RTCIceServer(urls=list(server.urls), username=server.username or None, credential=credential or None)


def peer_connection(ice_servers: list[IceServer]) -> RTCPeerConnection:
    """A peer connection with the configured STUN/TURN servers (gateway.webrtc_ice_servers; none by default: host
    candidates only, as aiortc would otherwise ask a public STUN server). With a TURN server, the answer also carries
    the relay's address (a relay candidate); every call holds its own allocation on the relay while it lasts."""
    return RTCPeerConnection(RTCConfiguration(iceServers=[ice_server(s) for s in ice_servers]))


class ReplyTrack(MediaStreamTrack):
    """The reply audio track: queued reply audio (48 kHz s16le mono, per response) out as 20 ms frames at the pace of
    playback (aiortc's sender asks for the next frame as soon as it sent one, so ``recv`` waits for the frame's
    time). Silence when nothing is queued. Tells the transport when a response's audio starts playing and when a
    finished one has played out."""

    kind = "audio"

    def __init__(self, started, stopped):
        super().__init__()
        self.segments: deque[list] = deque()  # [response id, bytearray]
        self.playing: str | None = None  # the response whose audio is playing
        self.finished: set[str] = set()  # responses whose audio is all queued
        self.on_started, self.on_stopped = started, stopped
        self._start: float | None = None
        self._pts = 0

    def push(self, response_id: str, pcm48: bytes) -> None:
        if self.segments and self.segments[-1][0] == response_id:
            self.segments[-1][1].extend(pcm48)
        else:
            self.segments.append([response_id, bytearray(pcm48)])

    def end(self, response_id: str) -> None:
        self.finished.add(response_id)

    def clear(self) -> str | None:
        """Drop everything queued; the response whose audio was playing or queued, if any."""
        dropped = self.playing or (self.segments[0][0] if self.segments else None)
        self.segments.clear()
        self.playing = None
        return dropped

    def _take(self) -> bytes:
        want = FRAME_SAMPLES * 2
        out = bytearray()
        while self.segments and len(out) < want:
            response_id, data = self.segments[0]
            if response_id != self.playing:
                if self.playing is not None:
                    self.on_stopped(self.playing)
                self.playing = response_id
                self.on_started(response_id)
            n = min(want - len(out), len(data))
            out += data[:n]
            del data[:n]
            if not data:
                self.segments.popleft()
        if not self.segments and self.playing is not None and self.playing in self.finished:
            self.finished.discard(self.playing)
            self.on_stopped(self.playing)
            self.playing = None
        return bytes(out) + bytes(want - len(out))

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._pts += FRAME_SAMPLES
            await asyncio.sleep(max(0.0, self._start + self._pts / RTC_RATE - time.monotonic()))
        frame = AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(self._take())
        frame.pts = self._pts
        frame.sample_rate = RTC_RATE
        frame.time_base = fractions.Fraction(1, RTC_RATE)
        return frame


def mono_s16(frame: AudioFrame) -> np.ndarray:
    """An audio frame as int16 mono (channels averaged), whatever its sample layout."""
    x = frame.to_ndarray()
    channels = len(frame.layout.channels)
    if frame.format.is_planar:
        x = x.reshape(channels, -1).mean(axis=0)
    else:
        x = x.reshape(-1, channels).mean(axis=1)
    if frame.format.name.startswith(("flt", "dbl")):
        x = x * 32768.0
    return np.clip(np.rint(x), -32768, 32767).astype(np.int16)


class WebRTCTransport:
    """One WebRTC call as the Realtime connection's transport: client events from the oai-events data channel, server
    events to it, input audio from the microphone track, reply audio to ``ReplyTrack``."""

    route = "realtime_webrtc"
    media = True

    def __init__(self, pc: RTCPeerConnection, call_id: str):
        self.pc = pc
        self.call_id = call_id
        self.connection = None  # the RealtimeConnection, set by attach()
        self.track = ReplyTrack(self._started, self._stopped)
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.channel = None
        self.opened = asyncio.Event()
        self.released = asyncio.Event()  # microphone audio may go to the session
        self.drained = asyncio.Event()  # the data channel's send buffer is below BUFFERED_LOW_BYTES
        self.drained.set()
        self.lost = asyncio.Event()  # the call is over (the client left, the connection failed, a hang-up)
        self.received = 0  # client events handed to the connection
        self.out_resampler = audio.StreamResampler(FLEET_OUTPUT_RATE, RTC_RATE)
        self.out_response: str | None = None
        self.tasks: list[asyncio.Task] = []
        self.overflowed = False
        pc.on("datachannel", self._on_datachannel)
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", self._on_state)

    def attach(self, connection) -> None:
        self.connection = connection
        self.tasks.append(asyncio.create_task(self._watch(), name="rtc-watch"))

    async def answer(self, offer_sdp: str) -> str:
        """The SDP answer to ``offer_sdp`` (ICE candidates gathered, included)."""
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        self.pc.addTrack(self.track)
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return self.pc.localDescription.sdp

    # --- peer connection events ------------------------------------------------------------------------------------
    def _on_datachannel(self, channel) -> None:
        if channel.label != EVENTS_CHANNEL or self.channel is not None:
            log.info("realtime call %s: data channel %r ignored", self.call_id, channel.label)
            return
        self.channel = channel
        channel.bufferedAmountLowThreshold = BUFFERED_LOW_BYTES
        channel.on("bufferedamountlow", self.drained.set)
        channel.on("message", self.inbox.put_nowait)
        channel.on("close", self._lost)
        if channel.readyState == "open":
            self.opened.set()
        else:
            channel.on("open", self.opened.set)

    def _on_track(self, track) -> None:
        if track.kind == "audio":
            self.tasks.append(asyncio.create_task(self._read_track(track), name="rtc-microphone"))

    async def _on_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self._lost()

    def hang_up(self) -> None:
        """End the call (POST .../hangup, the gateway shutting down): the session ends as if the client left."""
        self._lost()

    def _lost(self) -> None:
        if not self.lost.is_set():
            self.lost.set()
            self.inbox.put_nowait(None)

    async def _watch(self) -> None:
        """The call is closed if its data channel does not open in time; then the microphone is let through once the
        client had its chance to configure the session."""
        try:
            await asyncio.wait_for(self.opened.wait(), CONNECT_TIMEOUT_S)
        except TimeoutError:
            log.info("realtime call %s: no data channel within %.0f s; closed", self.call_id, CONNECT_TIMEOUT_S)
            self._lost()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.released.wait(), SETTLE_S)
        self.released.set()

    # --- the transport -----------------------------------------------------------------------------------------
    async def receive(self) -> str:
        if self.received:
            self.released.set()  # the client's first event was handled: its session settings are in
        message = await self.inbox.get()
        if message is None:
            raise ClientGone
        self.received += 1
        if not isinstance(message, str):
            raise RealtimeError(
                f"binary messages are not part of the protocol: send JSON events as text on '{EVENTS_CHANNEL}'",
                None,
                "invalid_event",
            )
        return message

    async def send(self, text: str) -> bool:
        await self._until(self.opened)
        if self.channel is not None and self.channel.bufferedAmount > BUFFERED_MAX_BYTES:
            self.drained.clear()  # a client that does not read: wait for its buffer to drain (the session's queue fills)
            await self._until(self.drained)
        if self.lost.is_set() or self.channel is None or self.channel.readyState != "open":
            return False
        self.channel.send(text)
        return True

    async def _until(self, event: asyncio.Event) -> None:
        """Until ``event`` is set or the call is lost."""
        if event.is_set():
            return
        waiters = [asyncio.create_task(event.wait()), asyncio.create_task(self.lost.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def close(self, code: int, reason: str) -> None:
        self.track.stop()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.channel is not None and self.channel.readyState == "open":
            self.channel.close()
        await self.pc.close()
        log.info("realtime call %s closed (%d %s)", self.call_id, code, reason)

    # --- audio -----------------------------------------------------------------------------------------------------
    def play(self, response_id: str, pcm24: bytes) -> None:
        """Reply audio at the fleet's output rate for ``response_id``: onto the track."""
        if response_id != self.out_response:
            self.out_resampler = audio.StreamResampler(FLEET_OUTPUT_RATE, RTC_RATE)
            self.out_response = response_id
        self.track.push(response_id, self.out_resampler.feed(pcm24))

    def play_end(self, response_id: str) -> None:
        if response_id == self.out_response:
            self.track.push(response_id, self.out_resampler.feed(b"", last=True))
            self.out_response = None
        self.track.end(response_id)

    def clear(self) -> str | None:
        self.out_response = None
        return self.track.clear()

    def _started(self, response_id: str) -> None:
        if self.connection is not None:
            self.connection.playout_started(response_id)

    def _stopped(self, response_id: str) -> None:
        if self.connection is not None:
            self.connection.playout_stopped(response_id)

    async def _read_track(self, track) -> None:
        """The microphone: each frame to mono 16 kHz, fed in FEED_S pieces (held until released)."""
        resampler, rate = None, 0
        pending = bytearray()
        held = bytearray()
        piece = int(FLEET_INPUT_RATE * FEED_S) * 2
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            if frame.sample_rate != rate:
                rate = frame.sample_rate
                resampler = audio.LiveResampler(rate, FLEET_INPUT_RATE)  # nothing held back (its docstring)
            x = mono_s16(frame)
            GATEWAY_BYTES.labels("in", self.route).inc(x.nbytes)
            pending += resampler.feed(x.tobytes())
            if len(pending) < piece:
                continue
            pcm, pending = bytes(pending), bytearray()
            if not self.released.is_set():
                held += pcm
                del held[: max(0, len(held) - int(HOLD_MAX_S * FLEET_INPUT_RATE) * 2)]
                continue
            if held:
                pcm, held = bytes(held) + pcm, bytearray()
            await self._feed(pcm)

    async def _feed(self, pcm: bytes) -> None:
        try:
            await self.connection.feed_input(pcm)
            self.overflowed = False
        except RealtimeError as e:  # turn_detection null and the held buffer is full: said once, audio dropped
            if not self.overflowed:
                self.overflowed = True
                self.connection.error(e, None)


def new_call_id() -> str:
    return f"rtc_{uuid.uuid4().hex[:24]}"


def session_field(text: str) -> dict:
    """The multipart ``session`` field: a JSON session object, as in session.update."""
    try:
        session = json.loads(text)
    except ValueError as e:
        raise CallError("session", f"session: not JSON ({e})") from None
    if not isinstance(session, dict):
        raise CallError("session", "session: must be a JSON object (the session of a session.update)")
    return session
