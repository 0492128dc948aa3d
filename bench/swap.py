"""Model swaps on this machine's CPU: each engine's offload / reload, against the copy bound (bytes / memcpy bandwidth).

What a revoke and the grant after it cost, per engine, measured through the engine's own ``offload()`` /
``reload()`` (issue 16; docs/leases.md). On a GPU the bound is bytes / host-to-device bandwidth and the goal is
reload <= 1.5x it; here there is no card, so the bound is this CPU's memcpy bandwidth (measured in the same run):

* Whisper (asr's GPU engine, CTranslate2) with ``device: cpu``: unload_model / load_model, in the fleet's venv.
  On a CPU device CTranslate2 cannot keep a host copy (host memory is the device's), so reload reads model.bin from
  disk again: the ratio says how far that is from a copy, not what a GPU's to_cpu path costs.
* The torch engines' one helper (services/residency/torch_offload.py, behind qwen-tts, MOSS-Speech and CosyVoice3) on
  a 256 MiB stack of linear layers, in the moss_sts GPU stack's venv when `make check-gpu-stacks` has built it
  (torch is not in the CPU fleet's venv); skipped with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.harness import Row

ROOT = Path(__file__).resolve().parent.parent
CYCLES = 8
TORCH_VENV = ROOT / "build" / "gpu-stacks" / "venvs" / "moss_sts" / "bin" / "python"


def memcpy_seconds(nbytes: int, runs: int = 5) -> float:
    """Median time to copy ``nbytes`` between two already-touched host buffers (the copy bound)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    dst[:] = 0
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        samples.append(time.perf_counter() - t0)
    return sorted(samples)[len(samples) // 2]


async def _whisper(model_dir: Path) -> tuple[list[float], list[float]]:
    from services.common.config.asr import AsrGpuConfig, AsrServiceConfig
    from services.engines.asr.gpu_engine import GpuAsrEngine

    config = AsrServiceConfig(
        port=1,
        engine="gpu",
        gpu=AsrGpuConfig(model_dir=str(model_dir), device="cpu", compute_type="int8", num_workers=1, beam_size=1),
    )
    engine = GpuAsrEngine("bench_swap", config)
    await engine.start()
    outs, ins = [], []
    try:
        for _ in range(CYCLES):
            t0 = time.perf_counter()
            await engine.offload()
            outs.append(time.perf_counter() - t0)
            assert not engine.final.model.model.model_is_loaded
            t0 = time.perf_counter()
            await engine.reload()
            ins.append(time.perf_counter() - t0)
    finally:
        await engine.close()
    return outs, ins


def _torch_helper() -> dict | str:
    if not TORCH_VENV.exists():
        return (
            f"skipped: no torch here ({TORCH_VENV.relative_to(ROOT)} missing; `make check-gpu-stacks STACKS=moss_sts`)"
        )
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'gen' / 'python'}"}
    result = subprocess.run(
        [str(TORCH_VENV), "-m", "bench.swap_torch", str(CYCLES)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        return f"FAILED: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.returncode}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def _table_row(nbytes: int, outs: list[float], ins: list[float], bound_s: float) -> dict:
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {
        "MiB": f"{nbytes / 2**20:.1f}",
        "offload median": f"{median(outs) * 1000:.1f} ms",
        "reload median": f"{median(ins) * 1000:.1f} ms",
        "copy bound (bytes / memcpy)": f"{bound_s * 1000:.1f} ms",
        "reload / bound": f"{median(ins) / bound_s:.1f}x",
    }


def run():
    from services.engines.asr.models import base_model_dir, tiny_en_dir

    rows, table = [], {}
    for label, model_dir in (("whisper tiny.en", tiny_en_dir()), ("whisper base", base_model_dir())):
        nbytes = (Path(model_dir) / "model.bin").stat().st_size
        outs, ins = asyncio.run(_whisper(Path(model_dir)))
        rows.append(Row(f"{label} (CTranslate2, CPU) offload", "s", outs))
        rows.append(Row(f"{label} (CTranslate2, CPU) reload (read from disk)", "s", ins))
        table[f"{label} (CTranslate2 unload_model / load_model)"] = _table_row(
            nbytes, outs, ins, memcpy_seconds(nbytes)
        )
    torch_result = _torch_helper()
    if isinstance(torch_result, dict):
        nbytes = torch_result["bytes"]
        rows.append(Row("torch helper (256 MiB of linear layers, CPU) offload", "s", torch_result["out"]))
        rows.append(Row("torch helper (256 MiB of linear layers, CPU) reload", "s", torch_result["in"]))
        table[f"torch_offload.HostOffload (torch {torch_result['torch']})"] = _table_row(
            nbytes, torch_result["out"], torch_result["in"], memcpy_seconds(nbytes)
        )
    else:
        table["torch_offload.HostOffload"] = {"MiB": torch_result}
    return rows, {"swap_table": table, "cycles": CYCLES}


if __name__ == "__main__":
    rows, extra = run()
    print(json.dumps(extra, indent=1))
    sys.exit(0)
