"""The segment cache's bookkeeping (services/common/segment_cache.py): what it says it holds is what it holds."""

from __future__ import annotations

from services.common import metrics
from services.common.segment_cache import SegmentCache


def counted(service: str, outcome: str) -> float:
    return metrics.TTS_SEGMENT_CACHE.labels(service, "piper", outcome)._value.get()


def held_gauge(service: str) -> float:
    return metrics.TTS_SEGMENT_CACHE_BYTES.labels(service, "piper")._value.get()


def test_the_least_recently_used_segment_goes_first_and_the_bytes_held_are_the_entries():
    cache = SegmentCache("cache-lru", "piper", max_bytes=300)
    cache.put(("a", 1.0, 0), b"a" * 100)
    cache.put(("b", 1.0, 0), b"b" * 100)
    cache.put(("c", 1.0, 0), b"c" * 100)
    assert cache.get(("a", 1.0, 0)) == (b"a" * 100, ())  # "a" is now the most recently used
    cache.put(("d", 1.0, 0), b"d" * 100)  # over 300 bytes: "b" goes
    assert cache.get(("b", 1.0, 0)) is None
    assert [cache.get((k, 1.0, 0))[0] for k in "acd"] == [b"a" * 100, b"c" * 100, b"d" * 100]
    assert len(cache) == 3 and cache.held_bytes == 300 == held_gauge("cache-lru")
    assert (counted("cache-lru", "hit"), counted("cache-lru", "miss")) == (4, 1)


def test_rate_and_seed_are_part_of_the_key():
    cache = SegmentCache("cache-key", "piper", max_bytes=1000)
    cache.put(("Sure,", 1.0, 7), b"x" * 10, ((5, 4),))
    assert cache.get(("Sure,", 1.0, 8)) is None
    assert cache.get(("Sure,", 1.25, 7)) is None
    assert cache.get(("Sure,", 1.0, 7)) == (b"x" * 10, ((5, 4),))  # the audio with its word ends


def test_audio_larger_than_the_cache_is_not_kept_and_evicts_nothing():
    cache = SegmentCache("cache-big", "piper", max_bytes=100)
    cache.put(("small", 1.0, 0), b"s" * 60)
    cache.put(("big", 1.0, 0), b"b" * 101)
    assert cache.get(("big", 1.0, 0)) is None
    assert cache.get(("small", 1.0, 0)) == (b"s" * 60, ()) and cache.held_bytes == 60


def test_size_zero_is_off():
    cache = SegmentCache("cache-off", "piper", max_bytes=0)
    cache.put(("Hello,", 1.0, 0), b"h" * 10)
    assert cache.get(("Hello,", 1.0, 0)) is None
    assert len(cache) == 0 and cache.held_bytes == 0
    assert counted("cache-off", "miss") == 0  # off: nothing looked up, nothing counted
