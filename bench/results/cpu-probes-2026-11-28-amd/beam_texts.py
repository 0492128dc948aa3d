"""Whether the text check may read every text of the beam: the asr CPU engine's final decode (in process) on the
turn-taking set's 18 complete lines (cut 96 and 128 ms after their last word) and on its paused lines (cut as far
after the words before the pause), each decode's five texts; for each, the first whose last word vetoes the turn
(None: no text does). A complete line with a rank is a finished sentence the veto would hold open."""

import asyncio

import numpy as np

from bench.conversation import TURN_SET_SEED
from bench.evaluation import cpu_engine
from bench.turn_set import Counts, build
from services.common.turn_text import TextCheck


async def main() -> None:
    engine = await cpu_engine()
    check = TextCheck()
    turn_set = build(TURN_SET_SEED, Counts(6, 4, 6, 6, 2))
    cuts = [(line, line.speech_end_ms) for line in turn_set.lines.values() if line.kind == "complete"]
    cuts += [(line, line.pause_at_ms) for line in turn_set.lines.values() if line.kind == "paused"]
    for line, end_ms in cuts:
        pcm = np.frombuffer(line.pcm, dtype="<i2").astype(np.float32) / 32768.0
        start = line.speech_start_ms * 16 - 3200
        for tail_ms in (96, 128):
            audio = pcm[max(0, start) : (end_ms + tail_ms) * 16]
            if start < 0:
                audio = np.concatenate([np.zeros(-start, np.float32), audio])
            final = engine.final.recognize(audio, "en", ())
            texts = (final.text, *final.alternatives)
            rank = next((i for i, text in enumerate(texts) if check.veto(text)), None)
            print(
                f"{line.kind:8} +{tail_ms} ms: veto rank {rank}; {texts[0]!r}" + (f" ({texts[rank]!r})" if rank else "")
            )
    await engine.close()


asyncio.run(main())
