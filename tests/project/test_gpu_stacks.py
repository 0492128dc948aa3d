"""The GPU images' requirements resolve, checked on a CPU machine (issue: GPU stacks that build).

``scripts/gpu_stacks.py resolve`` runs pip's resolver (``pip install --dry-run --report``, nothing installed) on
every GPU requirements file against PyPI, in a throwaway venv with a pinned pip, all stacks in parallel; a
ResolutionImpossible (two pins that cannot hold together, e.g. numpy 2.4 beside vllm 0.11's numba) fails here,
on CI, not at the first `docker build` on a GPU host. Installing and importing the stacks is `make
check-gpu-stacks` (several GB per stack: not for CI).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_stacks", ROOT / "scripts" / "gpu_stacks.py")
gpu_stacks = importlib.util.module_from_spec(spec)
sys.modules["gpu_stacks"] = gpu_stacks
spec.loader.exec_module(gpu_stacks)


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
        if match:
            out[match[1].lower()] = match[2]
    return out


def test_every_gpu_requirements_file_belongs_to_a_stack():
    files = {str(p.relative_to(ROOT)) for p in ROOT.glob("services/*/requirements-gpu*.txt")}
    files |= {str(p.relative_to(ROOT)) for p in ROOT.glob("services/*/requirements-vllm*.txt")}
    covered = {f for s in gpu_stacks.STACKS for f in s.requirements}
    assert files and files <= covered, f"not resolved by any stack: {sorted(files - covered)}"


def test_cosyvoice_keeps_the_shared_runtime_pins_except_its_numpy():
    """cosyvoice_tts's GPU file lists the shared runtime's pins itself (vllm 0.11 needs numpy < 2.3)."""
    common = pins(ROOT / "services/common/requirements.txt")
    cosyvoice = pins(ROOT / "services/cosyvoice_tts/requirements-gpu.txt")
    drift = {k: (v, cosyvoice.get(k)) for k, v in common.items() if k != "numpy" and cosyvoice.get(k) != v}
    assert not drift, f"shared runtime pin -> cosyvoice GPU pin: {drift}"
    assert cosyvoice["numpy"] != common["numpy"], "numpy is overridden on purpose; else use -r ../common"


def test_the_gpu_compose_memory_plan_fits_the_cards_docs_leases_names():
    """docs/leases.md: on 24 GB (22 grantable) MOSS-Speech is resident alone and the other three together; on
    48 GB (46) all four at once. Each engine caps its allocator at exactly these bytes."""
    import yaml

    from services.common.config import load_config

    override = yaml.safe_load((ROOT / "deploy" / "compose.gpu.yaml").read_text())
    plans = []
    for svc in ("moss_sts", "cosyvoice_tts", "qwen_tts", "asr"):  # every service carries the same plan
        env = {k: str(v) for k, v in override["services"][svc]["environment"].items()}
        assert env.pop(f"VOICEFLEET_{svc.upper()}__ENGINE") == "gpu"
        plans.append(env)
    assert all(plan == plans[0] for plan in plans)
    holders = load_config(ROOT / "deploy" / "voicefleet.yaml", env=plans[0]).residency.services
    gb = {name: h.declared_gb for name, h in holders.items()}
    assert set(gb) == {"moss_sts", "cosyvoice_tts", "qwen_tts", "asr"}
    capacity = override["services"]["router"]["environment"]["VOICEFLEET_ROUTER__LEASES__CAPACITY_GB"]
    card_24 = float(re.fullmatch(r"\$\{VOICEFLEET_CARD_GB:-([0-9.]+)\}", capacity)[1])
    assert gb["moss_sts"] <= card_24 < gb["moss_sts"] + min(gb["asr"], gb["qwen_tts"], gb["cosyvoice_tts"])
    assert gb["asr"] + gb["cosyvoice_tts"] + gb["qwen_tts"] <= card_24
    assert sum(gb.values()) <= 46


@pytest.mark.registry  # about a minute of pip against PyPI: `make gpu-resolve`, which .ci/run runs after `make test`
@pytest.mark.timeout(1800)
@pytest.mark.skipif(sys.version_info[:2] != gpu_stacks.GPU_PYTHON, reason="the GPU images run Python 3.11")
def test_every_gpu_stack_resolves_against_pypi():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_stacks.py"), "resolve"], capture_output=True, text=True
    )
    print(proc.stdout)  # the per-stack table (seconds, packages, torch) in -rA / CI logs
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if " resolved " in ln]
    assert len(lines) == len(gpu_stacks.STACKS)
