"""Weights off the card and back: what a torch GPU engine's ``offload()`` / ``reload()`` do (docs/leases.md).

One helper for every torch engine (qwen-tts, MOSS-Speech, CosyVoice3): it moves a list of ``torch.nn.Module`` and
mappings of loose tensors to host memory and back with torch's own API, and says how many bytes moved and how long
it took.

* offload, CUDA: every tensor of the engine's (parameters, buffers, loose tensors) is copied into ONE flat host
  buffer per model, laid out tensor after tensor (``flat_layout``), page-locked as a whole with
  ``cudaHostRegister`` (so the way back is a DMA copy), then ``torch.cuda.empty_cache()``: the caching allocator
  gives the freed blocks back to the driver, which is what a neighbour granted the card next needs. Not
  ``t.pin_memory()`` tensor by tensor: torch's caching host allocator rounds each block up to a power of two and
  keeps freed blocks for the life of the process, so 1-2x the model's bytes would stay page-locked after the first
  offload (17-34 GiB for MOSS). Page-locked host bytes while offloaded: the model's bytes plus alignment
  (``HostOffload.pinned_bytes``); after reload: none (the buffer is unregistered and freed).
* reload, CUDA: ``module.to(device, non_blocking=True)`` (from the page-locked buffer: asynchronous copies),
  ``torch.cuda.synchronize()`` before the engine serves again, then the buffer is unregistered and dropped.
* CPU (tests, probes): ``.to("cpu")`` would be a no-op, so offload replaces every tensor's storage with a fresh host
  copy and reload with a fresh "device" copy. The storages the engine held before are then referenced by nobody
  (a test proves it with weakrefs to them), exactly as the card's would be after a real move.

Each module goes back to the device it was on at offload (its first tensor's), each loose tensor likewise; a
module spread over several devices (``device_map`` across cards) is refused rather than collapsed onto one.
torch is imported inside the functions: the CPU fleet's venv has none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Moved:
    """One move: ``bytes`` of parameters, buffers and loose tensors, in ``seconds`` (the call's wall time)."""

    direction: str  # "out" (to host) or "in" (back to the device)
    bytes: int
    seconds: float
    device: str  # where the weights were (out) or went (in)
    left_on_card: int | None = None  # out, CUDA: torch.cuda.memory_reserved() after the move (None elsewhere)
    copy_bound_s: float | None = None  # in, CUDA: bytes / measured pinned host-to-device bandwidth (the floor)
    pinned_bytes: int = 0  # out: page-locked host bytes now held for the weights (the flat buffer)
    # CUDA: seconds per phase (out: "pin" = allocate + page-lock the flat buffer, "copy" = device -> host copies;
    # in: "copy" = host -> device copies until synchronized, when the engine could serve, "unpin" = unlock + free)
    phases: dict = field(default_factory=dict)

    def line(self) -> str:
        where = "to host" if self.direction == "out" else f"back to {self.device}"
        text = f"{self.bytes / 2**20:.1f} MiB {where} in {self.seconds:.3f}s"
        if self.left_on_card is not None:
            text += f"; {self.left_on_card / 2**20:.1f} MiB still reserved on {self.device}"
        if self.pinned_bytes:
            text += f"; {self.pinned_bytes / 2**20:.1f} MiB page-locked on the host"
        if self.copy_bound_s:
            text += f"; bytes / H2D = {self.copy_bound_s:.3f}s, {self.seconds / self.copy_bound_s:.2f}x the copy bound"
        return text


ALIGN = 512  # bytes between tensors in the flat buffer: a multiple of every dtype's size


def flat_layout(sizes: Iterable[int], align: int = ALIGN) -> tuple[list[int], int]:
    """Offsets of tensors of ``sizes`` bytes laid one after another in one buffer, each on an ``align`` boundary
    (so a slice of the buffer can be viewed as any dtype), and the buffer's size."""
    offsets, end = [], 0
    for n in sizes:
        offsets.append(end)
        end += -(-n // align) * align
    return offsets, end


class CudaHostRegister:
    """Page-locks a host range that already exists (``cudaHostRegister`` through torch's cudart bindings): exactly
    its bytes, outside torch's caching host allocator, and unlocked again by ``unpin``."""

    def pin(self, ptr: int, size: int) -> None:
        import torch

        err = int(torch.cuda.cudart().cudaHostRegister(ptr, size, 0))
        if err:
            raise RuntimeError(f"cudaHostRegister of {size} bytes failed (cudaError {err})")

    def unpin(self, ptr: int) -> None:
        import torch

        err = int(torch.cuda.cudart().cudaHostUnregister(ptr))
        if err:
            raise RuntimeError(f"cudaHostUnregister failed (cudaError {err})")


def _host_bytes(size: int):
    import torch

    # Pageable; CudaHostRegister locks it. zeros, not empty: the pages are touched by torch's intra-op threads
    # first, so cudaHostRegister only locks pages that exist. Registering untouched pages faults them in one
    # thread: on an H200 host (16 cores, 2026-11-26) 4 GiB took 1.69 s that way, 0.20 s touch + 0.25 s register.
    return torch.zeros(size, dtype=torch.uint8)


def _drop_later(buffer) -> None:
    """Frees a host buffer on a thread of its own: giving GiBs back to the OS (munmap) took 0.23 s per 4 GiB on the
    H200 host, after the copies had landed and the engine could already serve."""
    import threading

    threading.Thread(target=lambda b=[buffer]: b.clear(), name="free-offload-buffer", daemon=True).start()


@dataclass
class PinnedArena:
    """One flat host buffer, page-locked as a whole while it is open. ``pinner`` and ``alloc`` are injectable (the
    tests count what is pinned without a card; on one they are CudaHostRegister and a torch uint8 tensor)."""

    pinner: object = field(default_factory=CudaHostRegister)
    alloc: Callable[[int], object] = _host_bytes
    buffer: object = None
    pinned_bytes: int = 0

    def open(self, size: int):
        self.close()
        buffer = self.alloc(size)
        if size:
            self.pinner.pin(buffer.data_ptr(), size)
        self.buffer, self.pinned_bytes = buffer, size
        return buffer

    def close(self) -> None:
        if self.buffer is not None and self.pinned_bytes:
            self.pinner.unpin(self.buffer.data_ptr())  # unlocked now: pinned_bytes 0 is true on return
            _drop_later(self.buffer)
        self.buffer, self.pinned_bytes = None, 0


_H2D_BYTES_PER_S: dict[str, float] = {}


def host_to_device_bytes_per_s(device: str) -> float:
    """Pinned host -> ``device`` bandwidth, measured once per process on a 64 MiB copy (the floor of a reload)."""
    import torch

    if device not in _H2D_BYTES_PER_S:
        arena = PinnedArena()  # not pin_memory(): the caching host allocator would keep the block
        host = arena.open(64 << 20)  # small: the card is near its lease here
        target = torch.empty_like(host, device=device)
        target.copy_(host, non_blocking=True)  # warm-up
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(4):
            target.copy_(host, non_blocking=True)
        torch.cuda.synchronize(device)
        _H2D_BYTES_PER_S[device] = 4 * host.nbytes / (time.perf_counter() - t0)
        del host, target
        arena.close()
    return _H2D_BYTES_PER_S[device]


def module_tensors(module) -> list:
    """Parameters and buffers of ``module`` (each tensor once)."""
    seen, out = set(), []
    for t in list(module.parameters()) + list(module.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def tensors_bytes(modules: Iterable, maps: Iterable[MutableMapping] = ()) -> int:
    """Sum of ``nbytes`` of the modules' parameters and buffers and of the tensors in ``maps``."""
    total = sum(t.nbytes for m in modules for t in module_tensors(m))
    return total + sum(t.nbytes for _, _, t in _loose(maps))


def device_bytes(modules: Iterable, maps: Iterable[MutableMapping] = (), device: str = "cpu") -> int:
    """What sits on ``device`` now: the CUDA allocator's reserved bytes on a CUDA device (the process's whole
    footprint there: weights, caches, workspace), else the nbytes of the tensors that are on ``device``."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.memory_reserved(dev)) if torch.cuda.is_available() else 0
    total = sum(t.nbytes for m in modules for t in module_tensors(m) if t.device == dev)
    return total + sum(t.nbytes for _, _, t in _loose(maps) if t.device == dev)


def collect_modules(*objects) -> list:
    """The torch modules that hold an engine's weights, from the objects its library hands back: an object that is a
    ``torch.nn.Module`` counts whole; of any other object, its attributes that are modules (one level, as a
    library's wrapper holds its models: a processor's codec, CosyVoice's ``llm``/``flow``/``hift``). A module that
    is inside another listed one is dropped (moved with its parent, counted once)."""
    import torch

    found: list = []
    for obj in objects:
        if obj is None:
            continue
        if isinstance(obj, torch.nn.Module):
            found.append(obj)
        else:
            found += [v for v in vars(obj).values() if isinstance(v, torch.nn.Module)]
    unique = list({id(m): m for m in found}.values())
    inner = {id(sub) for m in unique for sub in m.modules() if sub is not m}
    return [m for m in unique if id(m) not in inner]


def _loose(maps: Iterable[MutableMapping]) -> list:
    """(map, key, tensor) for every tensor value of the maps."""
    import torch

    return [(m, k, v) for m in maps for k, v in list(m.items()) if isinstance(v, torch.Tensor)]


def _home(module) -> str | None:
    devices = {str(t.device) for t in module_tensors(module)}
    if len(devices) > 1:
        raise ValueError(
            f"{type(module).__name__} is spread over {sorted(devices)}; offload moves a module that lives on one device"
        )
    return next(iter(devices), None)


def _is_cuda(device: str) -> bool:
    return device.startswith("cuda")


@dataclass
class HostOffload:
    """Moves one engine's modules and loose tensors to host memory and back; remembers where each came from.

    ``maps``: mappings whose tensor values move too, replaced in place (a voice's conditioning, a speaker table),
    or a function returning them (read at each offload and measurement: a speaker table grows).

    Not thread-safe: the engine calls it from its one model thread (or under its model lock), after in-flight work
    has finished (the residency waits for that before it offloads).
    """

    modules: list = field(default_factory=list)
    maps: list | Callable[[], list] = field(default_factory=list)
    offloaded: bool = False
    last: dict = field(default_factory=dict)  # "out" / "in" -> the last Moved that way (logs, probes)
    _homes: list = field(default_factory=list)
    _tensor_homes: list = field(default_factory=list)  # (map, key, device)
    arena: PinnedArena = field(default_factory=PinnedArena)  # the flat page-locked buffer of the CUDA tensors

    @property
    def pinned_bytes(self) -> int:
        """Page-locked host bytes held for this engine's weights now (0 unless offloaded from a card)."""
        return self.arena.pinned_bytes

    def current_maps(self) -> list:
        return self.maps() if callable(self.maps) else self.maps

    def devices(self) -> set[str]:
        if self.offloaded:
            return {d for d in self._homes if d} | {d for _, _, d in self._tensor_homes}
        return {d for d in map(_home, self.modules) if d} | {str(t.device) for _, _, t in _loose(self.current_maps())}

    def offload(self) -> Moved:
        import torch

        if self.offloaded:
            return Moved("out", 0, 0.0, "")
        t0 = time.monotonic()
        devices = self.devices()
        on_cuda = any(map(_is_cuda, devices))
        if on_cuda:
            torch.cuda.synchronize()  # nothing of the engine's still running on the weights being moved
        self._homes = [_home(m) for m in self.modules]
        moved = 0
        staged = []  # (tensor, None) or (map, key): the CUDA tensors, copied into the flat pinned buffer below
        for module, home in zip(self.modules, self._homes, strict=True):
            if home is None:
                continue
            for t in module_tensors(module):
                if _is_cuda(home):
                    staged.append((t, None))  # counted when staged
                else:
                    t.data = t.data.clone()  # a fresh host copy: the engine's old storage is dropped
                    moved += t.nbytes
        moved += self._maps_to_host(staged)  # in a function of its own: no local keeps an original alive past it
        phases: dict = {}
        moved += self._stage_into_arena(staged, phases)
        left = None
        if on_cuda:
            torch.cuda.empty_cache()  # freed blocks back to the driver: the next lease holder can have them
            left = sum(device_bytes((), (), d) for d in devices if _is_cuda(d))
        self.offloaded = True
        self.last["out"] = Moved(
            "out",
            moved,
            time.monotonic() - t0,
            ",".join(sorted(devices)),
            left,
            pinned_bytes=self.pinned_bytes,
            phases=phases,
        )
        return self.last["out"]

    def _maps_to_host(self, staged: list) -> int:
        """Loose tensors on the host get a fresh host copy; those on a card join ``staged`` (counted later)."""
        moved, self._tensor_homes = 0, []
        for owner, key, value in _loose(self.current_maps()):
            home = str(value.device)
            self._tensor_homes.append((owner, key, home))
            if _is_cuda(home):
                staged.append((owner, key))
            else:
                owner[key] = value.clone()
                moved += value.nbytes
        return moved

    def _stage_into_arena(self, staged: list, phases: dict) -> int:
        """Copies every staged CUDA tensor into one flat buffer, page-locked as a whole, and points the engine at
        the copies: the page-locked bytes are the model's (plus alignment), whatever the number of tensors."""
        import torch

        if not staged:
            return 0
        current = [owner.data if key is None else owner[key] for owner, key in staged]
        offsets, size = flat_layout(t.nbytes for t in current)
        t0 = time.monotonic()
        flat = self.arena.open(size)
        t1 = time.monotonic()
        copies = []
        for t, offset in zip(current, offsets, strict=True):
            host = flat[offset : offset + t.nbytes].view(t.dtype).view(t.shape)
            host.copy_(t, non_blocking=True)
            copies.append(host)
        torch.cuda.synchronize()  # every copy landed before the card's storage is let go
        phases.update(pin=round(t1 - t0, 4), copy=round(time.monotonic() - t1, 4))
        for (owner, key), host in zip(staged, copies, strict=True):
            if key is None:
                owner.data = host
            else:
                owner[key] = host
        del current
        return sum(c.nbytes for c in copies)

    def reload(self) -> Moved:
        import torch

        if not self.offloaded:
            return Moved("in", 0, 0.0, "")
        t0 = time.monotonic()
        devices = self.devices()
        moved = 0
        for module, home in zip(self.modules, self._homes, strict=True):
            if home is None:
                continue
            if _is_cuda(home):
                module.to(home, non_blocking=True)  # from pinned memory: asynchronous copies
            else:
                for t in module_tensors(module):
                    t.data = t.data.clone()  # a fresh "device" copy; the host copy is dropped, as on a card
            moved += sum(t.nbytes for t in module_tensors(module))
        for owner, key, home in self._tensor_homes:
            value = owner[key]
            owner[key] = value.to(home, non_blocking=True) if _is_cuda(home) else value.clone()
            moved += value.nbytes
        self._tensor_homes = []
        phases = {}
        if any(map(_is_cuda, devices)):
            torch.cuda.synchronize()  # every copy done before the engine serves again
            phases["copy"] = round(time.monotonic() - t0, 4)
        t1 = time.monotonic()
        self.arena.close()  # the flat buffer: unlocked and freed (nothing of the engine's points into it now)
        if phases:
            phases["unpin"] = round(time.monotonic() - t1, 4)
        self.offloaded = False
        seconds = time.monotonic() - t0
        cuda = sorted(d for d in devices if _is_cuda(d))
        bound = moved / host_to_device_bytes_per_s(cuda[0]) if cuda else None  # measured after: not in ``seconds``
        self.last["in"] = Moved("in", moved, seconds, ",".join(sorted(devices)), copy_bound_s=bound, phases=phases)
        return self.last["in"]

    def resident_bytes(self) -> int:
        """0 while offloaded; else what the engine holds on its device(s), measured (see ``device_bytes``)."""
        if self.offloaded:
            return 0
        maps = self.current_maps()
        return sum(device_bytes(self.modules, maps, d) for d in self.devices())
