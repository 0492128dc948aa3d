"""The GPU host a GPU engine needs, checked at start with a message that says what to fix (README "GPU host").

CUDA libraries come from the pip wheels in each image (torch's nvidia-* dependencies, CTranslate2's cuBLAS);
what the host must bring is an NVIDIA driver new enough for the CUDA version those wheels were built for. The
driver's CUDA version is read from libcuda itself (``cuDriverGetVersion``), so the check needs no torch and no NVML.

Memory plan: a GPU engine sizes its allocator from the bytes its lease grants (docs/leases.md): torch engines cap
their process with ``torch.cuda.set_per_process_memory_fraction``, vLLM engines get ``gpu_memory_utilization``.
"""

from __future__ import annotations

import ctypes
import glob
import logging

from services.common.errors import FailedPrecondition

log = logging.getLogger("voicefleet.gpu_host")

# Minimum Linux driver per CUDA major version (NVIDIA's CUDA release notes, "CUDA Toolkit and Corresponding Driver
# Versions" / "minor version compatibility"): any CUDA 12.x build runs on a driver >= 525.60.13, any 13.x build on
# >= 580.65.06. Within a major version a newer toolkit runs on an older driver (minor version compatibility), so
# the check compares major versions.
MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA version the installed driver supports, or None when there is no driver (libcuda)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return version.value // 1000, (version.value % 1000) // 10


def parse_cuda(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    major, _, minor = text.partition(".")
    return int(major), int(minor.split(".")[0] or 0)


def check_cuda_host(where: str, built_for: str | None, driver: tuple[int, int] | None = None) -> None:
    """FailedPrecondition unless a driver that runs CUDA ``built_for`` (e.g. torch.version.cuda) is installed."""
    need = parse_cuda(built_for)
    if need is None:
        raise FailedPrecondition(
            f"{where}: this Python environment's torch has no CUDA build (torch.version.cuda is None); install the"
            " service's GPU image (requirements-gpu.txt), not the CPU fleet's venv"
        )
    have = driver if driver is not None else driver_cuda_version()
    if have is None:
        raise FailedPrecondition(
            f"{where}: no NVIDIA driver is visible (libcuda.so.1 missing): run the container with the NVIDIA"
            " container toolkit (compose: deploy/compose.gpu.yaml) on a host with a driver"
            f" >= {min_driver(need)} for CUDA {need[0]}.{need[1]}"
        )
    if have[0] < need[0]:
        raise FailedPrecondition(
            f"{where}: the wheels in this image are built for CUDA {need[0]}.{need[1]}, but the host driver supports"
            f" only CUDA {have[0]}.{have[1]}; upgrade the NVIDIA driver to >= {min_driver(need)} (README, GPU host)"
        )
    log.info("%s: CUDA %d.%d build on a driver for CUDA %d.%d", where, *need, *have)


def min_driver(cuda: tuple[int, int]) -> str:
    return MIN_DRIVER.get(cuda[0], f"the first driver for CUDA {cuda[0]}.{cuda[1]}")


def memory_fraction(budget_bytes: int, total_bytes: int) -> float:
    """The share of the card an allocator may take for a lease of ``budget_bytes`` (0 < f <= 1)."""
    if budget_bytes <= 0 or total_bytes <= 0:
        raise FailedPrecondition("memory plan: the lease's bytes and the card's memory must be known (> 0)")
    if budget_bytes > total_bytes:
        raise FailedPrecondition(
            f"memory plan: the lease grants {budget_bytes / 2**30:.1f} GiB but the card has"
            f" {total_bytes / 2**30:.1f} GiB; lower residency.services.<service>.declared_gb"
        )
    return budget_bytes / total_bytes


def cap_torch_process(torch, where: str, device: str, budget_bytes: int) -> float:
    """Check the host, then cap this process's CUDA caching allocator at the lease's bytes (OOM beyond it)."""
    check_cuda_host(where, torch.version.cuda)
    if not torch.cuda.is_available():
        raise FailedPrecondition(f"{where}: a CUDA device is needed and none is visible (CUDA_VISIBLE_DEVICES?)")
    index = torch.device(device).index or 0
    # The libraries put their weights on torch.device("cuda"), the current device (CosyVoice's model.py at the pinned
    # commit hard-codes it): make that the lease's card, or "gpu.device: cuda:1" caps card 1 and loads onto card 0.
    torch.cuda.set_device(index)
    total = torch.cuda.get_device_properties(index).total_memory
    fraction = memory_fraction(budget_bytes, total)
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    log.info("%s: allocator capped at %.1f GiB (%.0f%% of the card)", where, budget_bytes / 2**30, 100 * fraction)
    return fraction


def device_total_bytes(index: int = 0) -> int:
    """Total memory of CUDA device ``index`` from the driver API (no CUDA context, no torch), 0 if unknown."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    device, total = ctypes.c_int(0), ctypes.c_size_t(0)
    if libcuda.cuInit(0) or libcuda.cuDeviceGet(ctypes.byref(device), index):
        return 0
    if libcuda.cuDeviceTotalMem_v2(ctypes.byref(total), device):
        return 0
    return int(total.value)


def process_tree(root: int) -> set[int]:
    """``root`` and every process below it (from /proc: a sidecar's engine-core and worker processes)."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo += children.get(pid, [])
    return tree


class _NvmlProcess(ctypes.Structure):  # nvmlProcessInfo_t (v2/v3 layout)
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def gpu_bytes_by_pid() -> dict[int, int] | None:
    """Device memory of every compute process on every card, from NVML (the driver's libnvidia-ml; no CUDA
    context, no package): pid -> bytes, summed over cards. None where NVML cannot answer."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2():
        return None
    try:
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)):
            return None
        used: dict[int, int] = {}
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)):
                return None
            n = ctypes.c_uint(256)
            infos = (_NvmlProcess * n.value)()
            if nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(n), infos):
                return None
            for info in infos[: n.value]:
                if info.usedGpuMemory < (1 << 63):  # NVML_VALUE_NOT_AVAILABLE is ~0
                    used[info.pid] = used.get(info.pid, 0) + int(info.usedGpuMemory)
        return used
    finally:
        nvml.nvmlShutdown()


def process_tree_gpu_bytes(root: int) -> int | None:
    """What ``root`` and its descendants hold on the cards now (NVML), or None where that cannot be read: no NVML,
    or none of the tree's pids among NVML's (a container whose pids NVML does not see)."""
    used = gpu_bytes_by_pid()
    if used is None:
        return None
    mine = process_tree(root) & used.keys()
    return sum(used[p] for p in mine) if mine else None
