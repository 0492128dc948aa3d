"""Piper's segment cache on the real engine (services/engines/piper_engine.py, docs/scheduling.md#segment-cache): a
stream whose first segment was said before with the same rate and seed gets that audio without synthesizing it, and
the audio is exactly what synthesis gives; its continuations are synthesized as always."""

from __future__ import annotations

from services.common.config.base import ChunkingConfig, SchedulingConfig
from services.common.engines import BufferPolicy, SynthesisOptions, TextEvent
from services.engines.piper_engine import PiperTtsEngine

TEXT = "I'm sorry, I can't check that. Shall I try again?"


async def started(cache_mb: int) -> tuple[PiperTtsEngine, list[str]]:
    """An engine whose synthesized segments are recorded (the ones the cache served are not)."""
    engine = PiperTtsEngine("test", ChunkingConfig(), SchedulingConfig(segment_cache_mb=cache_mb))
    await engine.start()
    synthesized: list[str] = []
    synthesize = engine._synthesize_segment

    def recorded(segment, *args):
        synthesized.append(segment)
        return synthesize(segment, *args)

    engine._synthesize_segment = recorded
    return engine, synthesized


async def say(engine: PiperTtsEngine, text: str, seed: int) -> list[bytes]:
    return [p.pcm async for p in engine.synthesize(text, SynthesisOptions(voice="joe", seed=seed))]


async def test_a_first_segment_said_before_is_reused_exactly_and_continuations_are_synthesized():
    engine, synthesized = await started(cache_mb=8)
    fresh, fresh_synthesized = await started(cache_mb=0)
    try:
        first = await say(engine, TEXT, seed=3)
        again = await say(engine, TEXT, seed=3)
        uncached = await say(fresh, TEXT, seed=3)
        other_seed = await say(engine, TEXT, seed=4)
    finally:
        await engine.close()
        await fresh.close()
    segments = fresh_synthesized  # the text's segments, as synthesis without the cache ran them
    assert len(segments) >= 2 and "".join(segments).replace(" ", "") == TEXT.replace(" ", "")
    # The second time only the continuations ran; the third (another seed) all of it again.
    assert synthesized == segments + segments[1:] + segments
    assert again == first == uncached, "the reused first segment is not the audio synthesis gives"
    assert other_seed[0] != first[0], "another seed must not get the cached rendition"
    assert engine._first_segments.held_bytes == len(first[0]) + len(other_seed[0])


async def test_a_text_stream_opening_with_a_segment_said_before_gets_it_from_the_cache():
    """The cascade's reply path: text streamed word by word, cut by the reply's first-segment rule."""
    engine, synthesized = await started(cache_mb=8)

    async def words():
        for i, word in enumerate(TEXT.split(" ")):
            yield TextEvent(text=(" " if i else "") + word)
        yield TextEvent(end=True)

    async def stream() -> list[bytes]:
        options = SynthesisOptions(voice="joe", seed=0)
        return [p.pcm async for p in engine.synthesize_text_stream(words(), options, BufferPolicy())]

    try:
        first = await stream()
        ran_first = list(synthesized)
        again = await stream()
    finally:
        await engine.close()
    assert len(first) >= 2 and len(ran_first) == len(first)
    assert synthesized[len(ran_first) :] == ran_first[1:], "the second stream's opening was synthesized again"
    assert again == first
