"""How much of the pause whisper tiny.en needs to keep the weak "to" of "... it takes to | drive ...": the asr CPU
engine's final decode (in process) on the words before the pause, from 0.2 s before the speech to the end of "to"
(the turn set's alignment) plus 64 ... 300 ms of the pause, after 0.0, 0.3 and 0.5 s of silence."""

import asyncio

import numpy as np

from bench.evaluation import cpu_engine
from bench.turn_set import paused_line

LINE = "Can you tell me how long it takes to | drive from Boston to New York in the evening?"


async def main() -> None:
    engine = await cpu_engine()
    line = paused_line(LINE, 800)
    for lead_ms in (0, 300, 500):
        pcm = np.frombuffer(bytes(32 * lead_ms) + line.pcm, dtype="<i2").astype(np.float32) / 32768.0
        start = (lead_ms + line.speech_start_ms) * 16 - 3200
        end = (lead_ms + line.pause_at_ms) * 16
        for tail_ms in (64, 96, 128, 160, 200, 300):
            audio = pcm[max(0, start) : end + tail_ms * 16]
            if start < 0:
                audio = np.concatenate([np.zeros(-start, np.float32), audio])
            final = engine.final.recognize(audio, "en", ())
            print(
                f"lead {lead_ms} ms, {tail_ms} ms of the pause: {final.text!r}, the beam's others {final.alternatives}"
            )
    await engine.close()


asyncio.run(main())
