"""Wall time from the speech end fed to each asr event: the turn set's 18 complete lines through the CPU asr engine in
process, at real time, with moss_sts's endpointing defaults; every turn-model run and final decode timed too.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/latency-probes-2026-11-29/asr_wall.py [interim] [THREADS]

THREADS: asr.whisper_threads for the final (default: the shipped setting).
"""

import asyncio
import statistics
import sys
import time

from bench.turn_set import RATE, Counts, build
from services.common.asr_servicer import endpointing_defaults
from services.common.config.asr import AsrServiceConfig
from services.common.config.moss_sts import StsEndpointingConfig
from services.common.engines import RESULT, TURN_ESTIMATE, RecognitionOptions

CHUNK = RATE * 2 // 50
LEAD_S, TAIL_S = 0.5, 2.0
LOG: list[tuple[str, float, float, float]] = []


async def line_run(engine, line, interim: bool):
    endpointing = endpointing_defaults(StsEndpointingConfig())
    options = RecognitionOptions(language="en-US", endpointing=endpointing, interim_results=interim)
    stream = await engine.open_stream(options)
    events = []

    async def consume():
        async for e in stream.events():
            events.append((time.monotonic(), e))

    reader = asyncio.create_task(consume())
    samples = bytes(int(LEAD_S * RATE) * 2) + line.pcm + bytes(int(TAIL_S * RATE) * 2)
    end_byte = int((LEAD_S * 1000 + line.speech_end_ms) * RATE / 1000) * 2
    t0 = time.monotonic()
    t_end = None
    for i in range(0, len(samples), CHUNK):
        await stream.feed(samples[i : i + CHUNK])
        if t_end is None and i + CHUNK >= end_byte:
            t_end = time.monotonic()
        await asyncio.sleep(max(0.0, t0 + (i + CHUNK) / 2 / RATE - time.monotonic()))
    await stream.finish()
    await reader
    await stream.close()
    out = []
    for t, e in events:
        if e.kind == RESULT and e.result.is_final:
            out.append(f"FINAL@{(t - t_end) * 1000:.0f}ms {e.result.transcript!r}")
        elif e.kind == TURN_ESTIMATE:
            out.append(
                f"turn p={e.turn.probability:.2f} c={e.turn.complete} sil={e.turn.silence_ms}"
                f" @{(t - t_end) * 1000:.0f}ms v={e.turn.vetoed_by_word}"
            )
    for kind, a, b, seconds in LOG:
        out.append(f"{kind}[{(a - t_end) * 1000:.0f}..{(b - t_end) * 1000:.0f}ms audio {seconds:.1f}s]")
    LOG.clear()
    finals = [(t - t_end) * 1000 for t, e in events if e.kind == RESULT and e.result.is_final]
    return finals, out


def timed(kind: str, fn):
    def run(*args, **kwargs):
        t0 = time.monotonic()
        result = fn(*args, **kwargs)
        audio = args[-1] if kind == "turn" else args[0]
        LOG.append((kind, t0, time.monotonic(), len(audio) / RATE))
        return result

    return run


async def main():
    import services.engines.asr.turn_model as turn_model
    from services.engines.asr.cpu_engine import CpuAsrEngine

    interim = "interim" in sys.argv[1:]
    threads = [int(a) for a in sys.argv[1:] if a.isdigit()]
    config = AsrServiceConfig(port=1)
    if threads:
        config.whisper_threads = threads[0]
    turn_set = build(23, Counts(6, 4, 6, 6, 2))
    engine = CpuAsrEngine("probe", config)
    await engine.start()
    probability = turn_model.TurnModel.probability
    turn_model.TurnModel.probability = lambda self, audio: timed("turn", probability)(self, audio)
    engine.final.recognize = timed("final", engine.final.recognize)
    latencies = []
    for line_id in turn_set.complete:
        line = turn_set.line(line_id)
        finals, out = await line_run(engine, line, interim)
        if finals:
            latencies.append(finals[-1])
        print(line_id, line.text, "|", "; ".join(out), flush=True)
    s = sorted(latencies)
    print(
        f"interim={interim} whisper_threads={config.whisper_threads} speech end -> last final"
        f" p50 {statistics.median(s):.0f} p95 {s[round(0.95 * (len(s) - 1))]:.0f} n={len(s)}"
    )


asyncio.run(main())
