"""The turn-taking set's "Can you tell me how long it takes to | drive ..." (800 ms pause) into the asr CPU engine in
process, semantic endpointing, fed in 100 ms pieces every 100 ms (real time), after 0 or 0.3 s of silence: every
judgement and final. ``argv[1]``: PAD_BEFORE in seconds (default: the engine's 0.2); env EARLY: early_silence_ms (default 96)."""

import asyncio
import os
import sys

import services.engines.asr.pipeline as pipeline
from bench.evaluation import cpu_engine, stream_through
from bench.turn_set import paused_line
from services.common.engines import SEMANTIC_MODE, Endpointing, RecognitionOptions

LINE = "Can you tell me how long it takes to | drive from Boston to New York in the evening?"


async def run(engine, pcm: bytes, lead: float) -> list:
    pcm = bytes(2 * int(16000 * lead)) + pcm + bytes(2 * 16000 * 2)
    endpointing = Endpointing(mode=SEMANTIC_MODE, early_silence_ms=int(os.environ.get("EARLY", "96")))
    out = []

    def keep(event) -> None:
        if event.turn is not None:
            out.append(("turn", event.offset_ms, event.turn))
        elif event.result is not None and event.result.is_final:
            out.append(("final", event.result.transcript))

    await stream_through(engine, RecognitionOptions(language="en-US", endpointing=endpointing), pcm, keep, 0.1)
    return out


async def main() -> None:
    if len(sys.argv) > 1:
        pipeline.PAD_BEFORE = int(float(sys.argv[1]) * 16000)
    engine = await cpu_engine()
    line = paused_line(LINE, 800)
    for lead in (0.0, 0.3):
        print(f"lead {lead} s, PAD_BEFORE {pipeline.PAD_BEFORE / 16000} s, early {os.environ.get('EARLY', '96')} ms")
        for item in await run(engine, line.pcm, lead):
            print("  ", item)
    await engine.close()


asyncio.run(main())
