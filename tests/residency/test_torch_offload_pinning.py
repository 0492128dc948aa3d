"""services/residency/torch_offload.py's page-locked host memory, counted without a card: the weights of a model go
into ONE flat buffer (a slice per tensor, each on a boundary any dtype can be viewed from), locked as a whole, and
unlocked when they go back. Pinning itself needs CUDA (cudaHostRegister), so it is injected here: the stand-in
pinner below is a test double at that library boundary; the card's run is `make gpu-smoke`."""

from __future__ import annotations

import ctypes

from services.residency.torch_offload import ALIGN, PinnedArena, flat_layout


class StandInHostRegister:
    """Test double for cudaHostRegister/cudaHostUnregister (no CUDA here): keeps the locked ranges."""

    def __init__(self) -> None:
        self.locked: dict[int, int] = {}
        self.most = 0

    def pin(self, ptr: int, size: int) -> None:
        assert ptr not in self.locked, "a range locked twice"
        self.locked[ptr] = size
        self.most = max(self.most, sum(self.locked.values()))

    def unpin(self, ptr: int) -> None:
        del self.locked[ptr]


class HostBytes:
    """A plain host allocation with a data pointer, as the uint8 tensor torch_offload allocates on a card's host."""

    def __init__(self, size: int) -> None:
        self.raw = (ctypes.c_uint8 * max(size, 1))()

    def data_ptr(self) -> int:
        return ctypes.addressof(self.raw)


# A small transformer's tensors, in bytes: odd sizes (a bias of 3 float16s), a 0-element buffer, big matrices.
MODEL = [4096 * 4096 * 2, 4096 * 2, 6, 0, 151936 * 896 * 2, 896 * 4 * 2, 1, 8]


def test_the_flat_layout_puts_every_tensor_on_its_own_aligned_slice():
    offsets, size = flat_layout(MODEL)
    assert all(o % ALIGN == 0 for o in offsets)
    ends = [o + n for o, n in zip(offsets, MODEL, strict=True)]
    assert all(end <= nxt for end, nxt in zip(ends, offsets[1:], strict=False)), "slices overlap"
    assert ends[-1] <= size
    assert sum(MODEL) <= size < sum(MODEL) + ALIGN * len(MODEL)


def test_page_locked_bytes_are_the_models_once_and_none_after_reload():
    """Offload after offload, the locked bytes stay one model's (plus alignment), never a cache of old blocks."""
    pinner = StandInHostRegister()
    arena = PinnedArena(pinner=pinner, alloc=HostBytes)
    _, size = flat_layout(MODEL)
    for _ in range(3):  # offload, reload, three times
        arena.open(size)
        assert arena.pinned_bytes == size == sum(pinner.locked.values())
        assert list(pinner.locked) == [arena.buffer.data_ptr()]  # one range: the whole model
        arena.close()
        assert arena.pinned_bytes == 0 and pinner.locked == {}
    assert pinner.most == size
    assert size - sum(MODEL) < ALIGN * len(MODEL)


def test_reopening_without_a_reload_unlocks_the_old_buffer_first():
    pinner = StandInHostRegister()
    arena = PinnedArena(pinner=pinner, alloc=HostBytes)
    arena.open(1 << 20)
    arena.open(2 << 20)
    assert sum(pinner.locked.values()) == 2 << 20 == arena.pinned_bytes


def test_the_closed_buffer_is_unlocked_at_once_and_then_freed():
    """close() unlocks before it returns (pinned_bytes 0 is true) and hands the host buffer to a thread that frees it
    (on an H200 host, giving 4 GiB back to the OS took 0.23 s: off the reload's path). Freed means freed: no
    reference to the buffer survives."""
    import gc
    import weakref

    from tests.conftest import wait_until

    pinner = StandInHostRegister()
    arena = PinnedArena(pinner=pinner, alloc=HostBytes)
    buffer = weakref.ref(arena.open(1 << 20))
    arena.close()
    assert pinner.locked == {} and arena.pinned_bytes == 0 and arena.buffer is None
    assert wait_until(lambda: gc.collect() is not None and buffer() is None), "the host buffer was never freed"
