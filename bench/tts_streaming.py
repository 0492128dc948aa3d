"""TTS streaming: TTFA, RTF, cancel -> engine stop, streaming-text first audio vs first sentence end, concurrency.

Engine here: piper (cosyvoice_tts CPU). The qwen_tts espeak engine is benchmarked by its own module.
  * TTFA P50/P95 and RTF: Synthesize via the router (loopback gRPC), one stream at a time.
  * cancel -> last byte: in process; the caller closes the stream at a random point after its first audio and
    the engine's last step finishes (voicefleet_tts_cancel_to_engine_stop_seconds, read per cancel). A client sees
    no byte after its cancel; this is how long the engine keeps the CPU busy.
  * streaming text: StreamingSynthesize via the router, fed like an LLM (one word every WORD_MS); first audio
    measured from the moment the delta that ends the first sentence was sent.
  * concurrency: N simultaneous Synthesize streams via the router; a stream's RTF = its wall time / its audio.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import threading
import time

import grpc

from bench.harness import UNCACHED_SCHEDULING, UNCACHED_TTS, Row
from services.cli.fleet import LocalFleet
from services.common import metrics
from services.common.config.base import ChunkingConfig
from services.common.engines import SynthesisOptions
from services.engines.piper_engine import PiperTtsEngine
from voice.v1 import synthesizer_pb2 as pb
from voice.v1 import synthesizer_pb2_grpc

TEXT = "Hello, thanks for calling. Your order shipped this morning and should arrive on Tuesday."
ANSWER = (
    "Sure, I can help with that. The first train leaves at nine in the morning, and the last one at ten at night."
    " Tickets are cheaper before seven."
)
LONG = " ".join(f"This is sentence number {i} of a long announcement." for i in range(1, 21))
RUNS = 20
WORD_MS = 60
CONCURRENCY = (1, 2, 3, 4, 6)


def _synthesize(stub, text) -> tuple[float, float]:
    t0 = time.perf_counter()
    first, samples, rate = None, 0, 1
    for reply in stub.Synthesize(pb.SynthesizeRequest(text=text), timeout=120):
        first = first or time.perf_counter() - t0
        samples += len(reply.audio.data) // 2
        rate = reply.audio.format.sample_rate_hz
    return first, (time.perf_counter() - t0) / (samples / rate)


def _streaming_text(stub) -> float:
    words = ANSWER.split(" ")
    end_of_first = next(i for i, w in enumerate(words) if w.endswith("."))
    sent: dict[str, float] = {}

    def requests():
        yield pb.StreamingSynthesizeRequest(config=pb.StreamingSynthesisConfig())
        for i, w in enumerate(words):
            if i:
                time.sleep(WORD_MS / 1000)
            yield pb.StreamingSynthesizeRequest(text_delta=(" " if i else "") + w)
            if i == end_of_first:
                sent["sentence_end"] = time.perf_counter()
        yield pb.StreamingSynthesizeRequest(end_of_text=True)

    first = None
    for _ in stub.StreamingSynthesize(requests(), timeout=120):
        first = first or time.perf_counter()
    return first - sent["sentence_end"]


def _concurrent(address: str, n: int) -> list[float]:
    rtfs: list[float] = []
    barrier = threading.Barrier(n)

    def one():
        with grpc.insecure_channel(address) as channel:
            stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
            barrier.wait()
            rtfs.append(_synthesize(stub, TEXT)[1])

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rtfs


async def _cancel_to_stop(runs: int) -> list[float]:
    engine = PiperTtsEngine("bench", ChunkingConfig(), UNCACHED_SCHEDULING)
    await engine.start()
    hist = metrics.TTS_CANCEL_TO_STOP.labels("bench", "piper")
    rng = random.Random(7)
    samples = []
    try:
        for _ in range(runs):
            before_sum, before_count = hist._sum.get(), sum(b.get() for b in hist._buckets)
            first = asyncio.Event()

            async def consume(first: asyncio.Event) -> None:
                # Pull continuously, like the servicer does while gRPC sends: the next step runs meanwhile.
                async for _ in engine.synthesize(LONG, SynthesisOptions(voice="joe")):
                    first.set()

            task = asyncio.create_task(consume(first))
            await first.wait()
            await asyncio.sleep(rng.uniform(0, 0.3))  # cancel lands mid-step (usually) or between steps
            task.cancel()
            for _ in range(2000):  # the engine observes the metric when its last step ends (<= 10 s)
                if sum(b.get() for b in hist._buckets) != before_count:
                    break
                await asyncio.sleep(0.005)  # noqa: ASYNC110 - polling a prometheus metric, no event to await
            samples.append(hist._sum.get() - before_sum)
            await asyncio.sleep(0.3)
    finally:
        await engine.close()
    return samples


def run():
    cancel = asyncio.run(_cancel_to_stop(RUNS))
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(tmp, cosyvoice_tts=UNCACHED_TTS)
        try:
            address = fleet.config.router.address
            with grpc.insecure_channel(address) as channel:
                stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
                _synthesize(stub, "Warm up.")
                ttfa, rtf = zip(*(_synthesize(stub, TEXT) for _ in range(RUNS)), strict=True)
                streaming = [_streaming_text(stub) for _ in range(RUNS // 2)]
            concurrent = {n: _concurrent(address, n) for n in CONCURRENCY}
        finally:
            fleet.stop()
    rows = [
        Row("piper TTFA via router (Synthesize)", "s", list(ttfa)),
        Row("piper RTF via router (wall / audio)", "x", list(rtf)),
        Row("piper cancel -> engine stop (in process)", "s", cancel, "random cancel point 0-300 ms after 1st audio"),
        Row(
            "piper streaming text: first audio after first sentence end",
            "s",
            streaming,
            f"router, LLM-like feed: one word / {WORD_MS} ms",
        ),
    ]
    for n, rtfs in concurrent.items():
        rows.append(Row(f"piper {n} concurrent streams: per-stream RTF", "x", rtfs))
    ok = [n for n, rtfs in concurrent.items() if max(rtfs) < 1.0]
    extra = {
        "text": TEXT,
        "max_concurrent_streams_all_rtf_below_1": max(ok) if ok else 0,
        "note": "2-core machine shared with other test runs while measuring; cosyvoice_tts max_concurrent_syntheses=4",
    }
    return rows, extra
