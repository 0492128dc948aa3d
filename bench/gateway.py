"""Gateway: the time it adds to first audio (HTTP speech vs direct gRPC, same run) and 50 concurrent WebSockets.

Fleet: cosyvoice_tts (piper) + asr + brain + moss_sts (cascade) + router + gateway on loopback, CPU engines.

First audio: the same sentence, alternately through the gateway's POST /v1/audio/speech (pcm, streamed; time to the
first body bytes) and straight to the router's Synthesize over gRPC (time to the first chunk), TTFA_RUNS each.
The difference of the two is noisy (each is ~100 ms of synthesis on a busy CPU); the gateway's own figure is its
histogram ``voicefleet_gateway_added_seconds``: request received to first audio written, less the router's time to its
first chunk (speech), and a reply chunk received from the router to written to the socket (conversation), read from
the gateway's /metrics (percentiles interpolated in the buckets).

Sessions: SESSIONS WebSockets at once, each a config then 40 ms frames at the pace of real time for SESSION_SECONDS
(like an open microphone); TALKERS of them say a question first and wait for the reply. An error is any error or
turn_error event, or a close that is not 1000 (ours, at the end).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time

import aiohttp
import grpc

from bench.harness import UNCACHED_TTS, Row, bucket_quantile, buckets, scrape
from services.cli.fleet import LocalFleet
from voice.v1 import audio_pb2, synthesizer_pb2, synthesizer_pb2_grpc

TEXT = "Hello, thanks for calling. Your order shipped this morning."
QUESTION = "Please tell me a short story about a friendly dog."
TTFA_RUNS = 30
SESSIONS = 50
TALKERS = 2
SESSION_SECONDS = 30
FRAME_MS = 40
RATE = 16_000


async def _http_first_audio(session: aiohttp.ClientSession, url: str) -> float:
    body = {"input": TEXT, "response_format": "pcm", "sample_rate": RATE}
    t0 = time.perf_counter()
    async with session.post(f"{url}/v1/audio/speech", json=body) as reply:
        reply.raise_for_status()
        await reply.content.readany()
        first = time.perf_counter() - t0
        await reply.read()
    return first


async def _grpc_first_audio(stub) -> float:
    config = synthesizer_pb2.SynthesisConfig(
        output_format=audio_pb2.AudioFormat(encoding=audio_pb2.AUDIO_ENCODING_LINEAR_PCM_S16LE, sample_rate_hz=RATE)
    )
    t0 = time.perf_counter()
    call = stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text=TEXT, config=config), timeout=60)
    first = None
    async for _ in call:
        if first is None:
            first = time.perf_counter() - t0
    return first


async def _first_audio(fleet: LocalFleet, url: str) -> tuple[list[float], list[float]]:
    via_gateway, direct = [], []
    async with aiohttp.ClientSession() as session, grpc.aio.insecure_channel(fleet.config.router.address) as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        await _http_first_audio(session, url)
        await _grpc_first_audio(stub)  # warm both paths
        for _ in range(TTFA_RUNS):
            via_gateway.append(await _http_first_audio(session, url))
            direct.append(await _grpc_first_audio(stub))
    return via_gateway, direct


async def _question(url: str) -> bytes:
    async with aiohttp.ClientSession() as session:
        body = {"input": QUESTION, "response_format": "pcm", "sample_rate": RATE}
        async with session.post(f"{url}/v1/audio/speech", json=body) as reply:
            return await reply.read()


async def _session(session: aiohttp.ClientSession, url: str, speech: bytes, results: dict) -> None:
    frame = RATE * FRAME_MS // 1000 * 2
    async with session.ws_connect(f"{url}/v1/conversation", max_msg_size=0) as ws:
        await ws.send_json({"type": "config", "sample_rate": RATE, "system_prompt": "Answer in one short sentence."})
        audio = speech + bytes(frame * (SESSION_SECONDS * 1000 // FRAME_MS))
        start = time.monotonic()

        async def send():
            for n, i in enumerate(range(0, len(audio), frame)):
                await asyncio.sleep(max(0.0, start + n * FRAME_MS / 1000 - time.monotonic()))
                await ws.send_bytes(audio[i : i + frame])
            await ws.close()

        sender = asyncio.create_task(send())
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                event = json.loads(message.data)
                if event["type"] in ("error", "turn_error"):
                    results["errors"].append(event)
                elif event["type"] == "turn_complete":
                    results["turns"] += 1
                elif event["type"] == "ready":
                    results["ready"] += 1
            elif message.type == aiohttp.WSMsgType.BINARY:
                results["reply_bytes"] += len(message.data)
        await sender
        results["frames"] += len(audio) // frame
        if ws.close_code != 1000:
            results["errors"].append({"close": ws.close_code})


async def _sessions(url: str) -> dict:
    speech = await _question(url)
    results = {"errors": [], "turns": 0, "ready": 0, "reply_bytes": 0, "frames": 0}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.monotonic()
        await asyncio.gather(
            *(_session(session, url, speech if i < TALKERS else b"", results) for i in range(SESSIONS)),
            return_exceptions=False,
        )
        results["wall_seconds"] = time.monotonic() - t0
    return results


def run():
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(
            tmp,
            services=("cosyvoice_tts", "asr", "brain", "moss_sts", "router", "gateway"),
            moss_sts={"max_concurrent_sessions": SESSIONS, "default_max_tokens": 32},
            gateway={"max_sessions": SESSIONS + 4},
            cosyvoice_tts=UNCACHED_TTS,
        )
        try:
            url = f"http://{fleet.config.gateway.address}"
            port = fleet.config.gateway.metrics_port
            speech_before = buckets(scrape(port), "voicefleet_gateway_added_seconds", endpoint="speech")
            via_gateway, direct = asyncio.run(_first_audio(fleet, url))
            speech_after = buckets(scrape(port), "voicefleet_gateway_added_seconds", endpoint="speech")
            talk_before = buckets(scrape(port), "voicefleet_gateway_added_seconds", endpoint="conversation")
            sessions = asyncio.run(_sessions(url))
            talk_after = buckets(scrape(port), "voicefleet_gateway_added_seconds", endpoint="conversation")
        finally:
            fleet.stop()

    speech_p50, n_speech = bucket_quantile(speech_before, speech_after, 0.50)
    speech_p95, _ = bucket_quantile(speech_before, speech_after, 0.95)
    talk_p50, n_chunks = bucket_quantile(talk_before, talk_after, 0.50)
    talk_p95, _ = bucket_quantile(talk_before, talk_after, 0.95)
    rows = [
        Row("speech first audio via gateway HTTP (pcm)", "s", via_gateway),
        Row("speech first audio direct gRPC Synthesize (router)", "s", direct),
        Row(
            "gateway HTTP - direct gRPC, medians",
            "s",
            [statistics.median(via_gateway) - statistics.median(direct)],
            note="same run, alternating; includes HTTP client + server vs gRPC client",
        ),
        Row("gateway added to first audio p50 (its histogram, speech)", "s", [speech_p50], note=f"n={n_speech}"),
        Row(
            "gateway added to first audio p95 (its histogram, speech)",
            "s",
            [speech_p95],
            note=f"n={n_speech}; goal <= 5 ms",
        ),
        Row("gateway relay per reply chunk p50 (conversation)", "s", [talk_p50], note=f"n={n_chunks}"),
        Row("gateway relay per reply chunk p95 (conversation)", "s", [talk_p95], note=f"n={n_chunks}"),
        Row(
            f"{SESSIONS} concurrent WebSocket sessions: errors",
            "count",
            [len(sessions["errors"])],
            note=f"{SESSION_SECONDS} s of 40 ms frames each; {TALKERS} talking",
        ),
        Row(f"{SESSIONS} concurrent WebSocket sessions: ready", "count", [sessions["ready"]]),
        Row(f"{SESSIONS} concurrent WebSocket sessions: turns completed", "count", [sessions["turns"]]),
    ]
    extra = {
        "sessions": {k: v for k, v in sessions.items() if k != "errors"},
        "session_errors": sessions["errors"][:10],
        "ttfa_runs": TTFA_RUNS,
    }
    return rows, extra
