"""TTS time to first audio: piper in-process vs through router -> cosyvoice_tts over gRPC (loopback)."""

from __future__ import annotations

import asyncio
import tempfile
import time

import grpc

from bench.harness import UNCACHED_SCHEDULING, UNCACHED_TTS, Row
from services.cli.fleet import LocalFleet
from services.common.config.base import ChunkingConfig
from services.common.engines import SynthesisOptions
from services.engines.piper_engine import PiperTtsEngine
from voice.v1 import synthesizer_pb2, synthesizer_pb2_grpc

TEXT = "Hello, thanks for calling. Your order shipped this morning and should arrive on Tuesday."
RUNS = 30


async def _in_process(runs: int) -> tuple[list[float], list[float]]:
    engine = PiperTtsEngine("bench", ChunkingConfig(), UNCACHED_SCHEDULING)
    await engine.start()
    ttfa, rtf = [], []
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            first = None
            samples = 0
            async for piece in engine.synthesize(TEXT, SynthesisOptions(voice="joe")):
                first = first or time.perf_counter() - t0
                samples += len(piece.pcm) // 2
            ttfa.append(first)
            rtf.append((time.perf_counter() - t0) / (samples / engine.native_sample_rate))
    finally:
        await engine.close()
    return ttfa, rtf


def _through(address: str, runs: int) -> tuple[list[float], list[float]]:
    ttfa, rtf = [], []
    with grpc.insecure_channel(address) as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        list(stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text="Warm up."), timeout=30))
        for _ in range(runs):
            t0 = time.perf_counter()
            first = None
            samples = 0
            rate = 1
            for reply in stub.Synthesize(synthesizer_pb2.SynthesizeRequest(text=TEXT), timeout=30):
                first = first or time.perf_counter() - t0
                samples += len(reply.audio.data) // 2
                rate = reply.audio.format.sample_rate_hz
            ttfa.append(first)
            rtf.append((time.perf_counter() - t0) / (samples / rate))
    return ttfa, rtf


def run():
    local_ttfa, local_rtf = asyncio.run(_in_process(RUNS))
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(tmp, cosyvoice_tts=UNCACHED_TTS)
        try:
            direct_ttfa, _ = _through(fleet.config.cosyvoice_tts.address, RUNS)
            router_ttfa, router_rtf = _through(fleet.config.router.address, RUNS)
        finally:
            fleet.stop()
    rows = [
        Row("TTFA piper in-process (engine first piece)", "s", local_ttfa),
        Row("TTFA cosyvoice_tts direct (gRPC, loopback)", "s", direct_ttfa),
        Row("TTFA via router -> cosyvoice_tts", "s", router_ttfa),
        Row("RTF piper in-process", "x", local_rtf),
        Row("RTF via router (wall / audio)", "x", router_rtf),
    ]
    med = {r.name: r.summary()["median"] for r in rows}
    p95 = {r.name: r.summary()["p95"] for r in rows}
    extra = {
        "text": TEXT,
        "ratio_router_vs_in_process_median": round(med[rows[2].name] / med[rows[0].name], 3),
        "ratio_router_vs_in_process_p95": round(p95[rows[2].name] / p95[rows[0].name], 3),
        "router_added_median_ms": round((med[rows[2].name] - med[rows[1].name]) * 1000, 2),
    }
    return rows, extra
