"""qwen_tts (espeak-ng CPU engine): TTFA in process / direct / via router, RTF, cancel -> engine stop, streaming-text
first audio, and how many concurrent streams stay faster than real time."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import threading
import time

import grpc

from bench.harness import Row, scrape, total
from services.cli.fleet import LocalFleet
from services.common.config.base import ChunkingConfig, EspeakConfig
from services.common.engines import SynthesisOptions
from services.engines.espeak import Espeak
from services.engines.espeak_engine import EspeakTtsEngine
from voice.v1 import synthesizer_pb2 as pb
from voice.v1 import synthesizer_pb2_grpc

TEXT = "Hello, thanks for calling. Your order shipped this morning and should arrive on Tuesday."
LONG = " ".join(f"This is sentence number {i} of a long announcement." for i in range(1, 31))
VOICE = "en-US"
RUNS = 30
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128)


def _config(text: str = TEXT) -> pb.SynthesizeRequest:
    return pb.SynthesizeRequest(text=text, config=pb.SynthesisConfig(voice=VOICE))


async def _in_process(runs: int) -> dict[str, list[float]]:
    engine = EspeakTtsEngine("bench", ChunkingConfig(), EspeakConfig())
    await engine.start()
    out = {"ttfa": [], "rtf": [], "cancel": []}
    for _ in range(runs):
        t0 = time.perf_counter()
        first, samples = None, 0
        async for piece in engine.synthesize(TEXT, SynthesisOptions(voice=VOICE)):
            first = first or time.perf_counter() - t0
            samples += len(piece.pcm) // 2
        out["ttfa"].append(first)
        out["rtf"].append((time.perf_counter() - t0) / (samples / engine.native_sample_rate))
    # Cancel -> espeak stopped: close after the first piece of a 90 s text, then wait until the espeak thread is idle.
    for _ in range(runs):
        agen = engine.synthesize(LONG, SynthesisOptions(voice=VOICE))
        await agen.__anext__()
        t0 = time.perf_counter()
        await agen.aclose()
        await asyncio.get_running_loop().run_in_executor(Espeak.thread, lambda: None)  # runs after the aborted job
        out["cancel"].append(time.perf_counter() - t0)
    await engine.close()
    return out


def _through(address: str, runs: int) -> tuple[list[float], list[float]]:
    ttfa, rtf = [], []
    with grpc.insecure_channel(address) as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        list(stub.Synthesize(_config("Warm up."), timeout=30))
        for _ in range(runs):
            t0 = time.perf_counter()
            first, samples, rate = None, 0, 1
            for reply in stub.Synthesize(_config(), timeout=30):
                first = first or time.perf_counter() - t0
                samples += len(reply.audio.data) // 2
                rate = reply.audio.format.sample_rate_hz
            ttfa.append(first)
            rtf.append((time.perf_counter() - t0) / (samples / rate))
    return ttfa, rtf


def _histogram_sum_count(port: int, name: str, **labels) -> tuple[float, float]:
    samples = scrape(port)
    return total(samples, f"{name}_sum", **labels), total(samples, f"{name}_count", **labels)


def _cancel_via_router(fleet: LocalFleet, runs: int) -> list[float]:
    """Client cancels after the first chunk; the engine's own cancel->stop time for that stream (exact per run:
    the difference of the histogram's sum before and after)."""
    port = fleet.config.qwen_tts.metrics_port
    name = "voicefleet_tts_cancel_to_engine_stop_seconds"
    values = []
    with grpc.insecure_channel(fleet.config.router.address) as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        for _ in range(runs):
            s0, c0 = _histogram_sum_count(port, name, service="qwen_tts", engine="espeak")
            call = stub.Synthesize(_config(LONG), timeout=30)
            next(call)
            call.cancel()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                s1, c1 = _histogram_sum_count(port, name, service="qwen_tts", engine="espeak")
                if c1 > c0:
                    values.append((s1 - s0) / (c1 - c0))
                    break
                time.sleep(0.02)
    return values


def _streaming_text(address: str, runs: int) -> list[float]:
    """StreamingSynthesize fed word by word (10 ms apart): first audio minus the moment the first sentence's end
    was sent (negative: audio began before the first sentence was complete)."""
    words = TEXT.split(" ")
    first_end = next(i for i, w in enumerate(words) if w.endswith((".", "!", "?")))
    out = []
    with grpc.insecure_channel(address) as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        for _ in range(runs):
            sent_end = {}

            def requests(sent_end=sent_end):
                yield pb.StreamingSynthesizeRequest(
                    config=pb.StreamingSynthesisConfig(synthesis=pb.SynthesisConfig(voice=VOICE))
                )
                for i, w in enumerate(words):
                    yield pb.StreamingSynthesizeRequest(text_delta=(" " if i else "") + w)
                    if i == first_end:
                        sent_end["t"] = time.perf_counter()
                    time.sleep(0.01)
                yield pb.StreamingSynthesizeRequest(end_of_text=True)

            first = None
            for _reply in stub.StreamingSynthesize(requests(), timeout=30):
                first = first or time.perf_counter()
            out.append(first - sent_end["t"])
    return out


def _concurrent(address: str, n: int) -> tuple[list[float], dict[str, int]]:
    """n streams at once, each reading as fast as it can: RTF of each served stream (wall / audio), and the streams
    that were not served, by status code (a refused stream is a failure of that level, never left out quietly)."""
    rtfs: list[float] = []
    failed: dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(n)

    def one():
        with grpc.insecure_channel(address) as channel:
            stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
            start.wait()
            t0 = time.perf_counter()
            samples, rate = 0, 1
            try:
                for reply in stub.Synthesize(_config(LONG), timeout=120):
                    samples += len(reply.audio.data) // 2
                    rate = reply.audio.format.sample_rate_hz
            except grpc.RpcError as e:
                with lock:
                    failed[e.code().name] = failed.get(e.code().name, 0) + 1
                return
            with lock:
                if samples:
                    rtfs.append((time.perf_counter() - t0) / (samples / rate))
                else:
                    failed["NO_AUDIO"] = failed.get("NO_AUDIO", 0) + 1

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rtfs, failed


def run():
    local = asyncio.run(_in_process(RUNS))
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(tmp, services=("qwen_tts", "router"))
        try:
            direct_ttfa, direct_rtf = _through(fleet.config.qwen_tts.address, RUNS)
            router_ttfa, router_rtf = _through(fleet.config.router.address, RUNS)
            cancel_router = _cancel_via_router(fleet, RUNS)
            streaming = _streaming_text(fleet.config.router.address, 10)
            concurrency, not_served = {}, {}
            for n in CONCURRENCY:
                rtfs, failed = _concurrent(fleet.config.router.address, n)
                concurrency[n] = rtfs
                if failed:
                    not_served[n] = failed
                if failed or not rtfs or max(rtfs) >= 1.0:
                    break  # past this level callers are refused or fall behind real time
        finally:
            fleet.stop()
    ok = [n for n, rtfs in concurrency.items() if n not in not_served and rtfs and max(rtfs) < 1.0]
    top = max(ok) if ok else 0
    rows = [
        Row("TTFA espeak in-process (engine first piece)", "s", local["ttfa"]),
        Row("TTFA qwen_tts direct (gRPC, loopback)", "s", direct_ttfa),
        Row("TTFA via router -> qwen_tts", "s", router_ttfa),
        Row("RTF espeak in-process", "x", local["rtf"]),
        Row("RTF qwen_tts direct (wall / audio)", "x", direct_rtf),
        Row("RTF via router (wall / audio)", "x", router_rtf),
        Row("cancel -> espeak stopped, in-process", "s", local["cancel"]),
        Row("cancel -> engine stopped, client via router", "s", cancel_router, "engine's own histogram, per run"),
        Row("StreamingSynthesize word by word: first audio - first sentence end sent", "s", streaming),
        *[Row(f"RTF per stream, {n} concurrent via router (90 s text)", "x", r) for n, r in concurrency.items() if r],
    ]
    extra = {
        "text": TEXT,
        "voice": VOICE,
        "max_concurrent_streams_all_rtf_below_1": top,
        "concurrency_tested": list(concurrency),
        "streams_not_served": {str(n): failed for n, failed in not_served.items()},
        "median_rtf_at_max": round(statistics.median(concurrency[top]), 4) if top else None,
        "note": "qwen_tts.max_concurrent_syntheses (16) streams are admitted, scheduling.workers (one per core) synthesize at once and the rest wait in line (queue wait counted); past capacity a stream is refused, counted in streams_not_served",
    }
    with contextlib.suppress(Exception):
        extra["espeak"] = Espeak._instance.version if Espeak._instance else ""
    return rows, extra
