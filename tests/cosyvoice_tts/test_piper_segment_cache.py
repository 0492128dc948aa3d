"""Piper's segment cache on the real engine (services/engines/piper_engine.py, docs/scheduling.md#segment-cache): a
stream whose first segment was said before with the same rate and seed gets that audio without synthesizing it, and
the audio is exactly what synthesis gives; its continuations are synthesized as always."""

from __future__ import annotations

import pytest

from services.common.config.base import ChunkingConfig, SchedulingConfig
from services.common.engines import BufferPolicy, SynthesisOptions, TextEvent
from services.engines.piper_engine import PiperTtsEngine

# CPU work with no clock in it: `make test` runs it in its background lane (scripts/test-lanes.sh).
pytestmark = pytest.mark.background

TEXT = "I'm sorry, I can't check that. Shall I try again?"


class Recorded:
    """An engine whose synthesized segments are recorded (the ones the cache served are not)."""

    def __init__(self, cache_mb: int):
        self.engine = PiperTtsEngine("test", ChunkingConfig(), SchedulingConfig(segment_cache_mb=cache_mb))
        self.synthesized: list[str] = []

    async def start(self) -> None:
        await self.engine.start()
        synthesize = self.engine._synthesize_segment

        def recorded(segment, *args):
            self.synthesized.append(segment)
            return synthesize(segment, *args)

        self.engine._synthesize_segment = recorded

    async def say(self, text: str, seed: int) -> list[bytes]:
        return [p.pcm async for p in self.engine.synthesize(text, SynthesisOptions(voice="joe", seed=seed))]

    async def stream(self, text: str, seed: int) -> list[bytes]:
        """``text`` streamed word by word (the cascade's reply path, cut by the reply's first-segment rule)."""

        async def words():
            for i, word in enumerate(text.split(" ")):
                yield TextEvent(text=(" " if i else "") + word)
            yield TextEvent(end=True)

        options = SynthesisOptions(voice="joe", seed=seed)
        return [p.pcm async for p in self.engine.synthesize_text_stream(words(), options, BufferPolicy())]


@pytest.fixture(scope="module")
async def engines():
    cached, uncached = Recorded(cache_mb=8), Recorded(cache_mb=0)
    await cached.start()
    await uncached.start()
    yield cached, uncached
    await cached.engine.close()
    await uncached.engine.close()


async def test_a_first_segment_said_before_is_reused_exactly_and_continuations_are_synthesized(engines):
    cached, uncached = engines
    cached.synthesized.clear()
    first = await cached.say(TEXT, seed=3)
    again = await cached.say(TEXT, seed=3)
    fresh = await uncached.say(TEXT, seed=3)
    held = cached.engine._first_segments.held_bytes
    other_seed = await cached.say(TEXT, seed=4)
    segments = uncached.synthesized[-len(fresh) :]  # the text's segments, as synthesis without the cache ran them
    assert len(segments) >= 2 and "".join(segments).replace(" ", "") == TEXT.replace(" ", "")
    # The second time only the continuations ran; the third (another seed) all of it again.
    assert cached.synthesized == segments + segments[1:] + segments
    assert again == first == fresh, "the reused first segment is not the audio synthesis gives"
    assert other_seed[0] != first[0], "another seed must not get the cached rendition"
    assert cached.engine._first_segments.held_bytes == held + len(other_seed[0])


async def test_a_text_stream_opening_with_a_segment_said_before_gets_it_from_the_cache(engines):
    cached, _ = engines
    cached.synthesized.clear()
    first = await cached.stream(TEXT, seed=5)
    ran_first = list(cached.synthesized)
    again = await cached.stream(TEXT, seed=5)
    assert len(first) >= 2 and len(ran_first) == len(first)
    assert cached.synthesized[len(ran_first) :] == ran_first[1:], "the second stream's opening was synthesized again"
    assert again == first
