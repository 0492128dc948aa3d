"""What the first-segment rule (services/common/text.py FirstSegment) buys: first audio in process, piper joe voice
(the cosyvoice_tts CPU engine), before (clause marks only: chunking.first_segment_words 0) and after (the default).

(a) Synthesize: a 70-character first sentence with no clause mark, request -> first audio piece.
(b) The cascade's reply: reply text fed as the brain writes it (a word per BRAIN_WORD_S, services/conversation/cascade
    REPLY_BUFFERING), first delta -> first audio piece; a short reply and a long one.

Run: ``python -m bench.first_segment`` (prints medians and p95 of RUNS, alternating before/after per run).
"""

from __future__ import annotations

import asyncio
import statistics
import time

from bench.harness import UNCACHED_SCHEDULING
from services.common.config.base import ChunkingConfig
from services.common.engines import SynthesisOptions, TextEvent
from services.conversation.cascade import REPLY_BUFFERING
from services.engines.piper_engine import PiperTtsEngine

SYNTHESIZE_TEXT = "The weather service expects heavy rain over the northern hills tonight. Please stay safe."
REPLIES = {
    "short reply": "The capital of France is Paris.",
    "long reply": "I would recommend reading the little book about the brave dragon who learned to fly at night.",
}
BRAIN_WORD_S = 0.015  # SmolLM2-135M on 2 cores writes ~130 tokens/s: about a word per 15 ms with its spaces
RUNS = 10


async def _synthesize_first(engine: PiperTtsEngine) -> float:
    t0 = time.perf_counter()
    async for _ in engine.synthesize(SYNTHESIZE_TEXT, SynthesisOptions(voice="joe")):
        return time.perf_counter() - t0
    raise RuntimeError("no audio")


async def _reply_first(engine: PiperTtsEngine, text: str) -> float:
    async def deltas():
        for i, word in enumerate(text.split(" ")):
            yield TextEvent(text=(" " if i else "") + word)
            await asyncio.sleep(BRAIN_WORD_S)
        yield TextEvent(end=True)

    t0 = time.perf_counter()
    stream = engine.synthesize_text_stream(deltas(), SynthesisOptions(voice="joe"), REPLY_BUFFERING)
    try:
        async for _ in stream:
            return time.perf_counter() - t0
    finally:
        await stream.aclose()
    raise RuntimeError("no audio")


def _row(name: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"{name:<40} median {statistics.median(ms):6.0f} ms  p95 {p95:6.0f} ms  (n={len(ms)})"


async def main() -> None:
    engines = {
        "before (clause marks only)": PiperTtsEngine(
            "bench", ChunkingConfig(first_segment_words=0), UNCACHED_SCHEDULING
        ),
        "after (first_segment_words 5)": PiperTtsEngine("bench", ChunkingConfig(), UNCACHED_SCHEDULING),
    }
    for engine in engines.values():
        await engine.start()
    results: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(RUNS):
            for label, engine in engines.items():  # alternating, so load on the machine hits both alike
                results.setdefault(("Synthesize 70-char sentence, no comma", label), []).append(
                    await _synthesize_first(engine)
                )
                for name, text in REPLIES.items():
                    results.setdefault((f"cascade {name}", label), []).append(await _reply_first(engine, text))
    finally:
        for engine in engines.values():
            await engine.close()
    for (case, label), values in results.items():
        print(_row(f"{case} | {label}", values))


if __name__ == "__main__":
    asyncio.run(main())
