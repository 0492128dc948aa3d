"""The brain's llama.cpp runs on any x86-64-v3 CPU, whatever CPU built it.

A llama-cpp-python built with ggml's default -march=native on one host died with SIGSEGV in llama_decode on a CPU
with a different instruction set (issue: AVX-512/AMX Intel host vs AMD EPYC). scripts/build-brain-wheel.sh spells
the flags out; this test disassembles every native library of the installed llama_cpp package and fails on an
instruction outside x86-64-v3 (AVX-512 registers, opmasks or EVEX-only instructions, AVX-VNNI, AMX), so a native
build cannot slip back in on any build host.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from services.brain.server import REQUIRED_CPU_FLAGS, missing_cpu_flags

# Operands and mnemonics that exist only beyond x86-64-v3, as a GNU grep -E pattern (Python's re takes ~40 s on the
# 1.3 million lines objdump prints for llama.cpp; grep takes about a second).
BEYOND_V3 = (
    r"%zmm[0-9]+"  # AVX-512 512-bit registers
    r"|%[xy]mm(1[6-9]|2[0-9]|3[01])\b"  # AVX-512VL: registers 16-31
    r"|%k[1-7]\b"  # AVX-512 opmask registers
    r"|\bvpternlog[dq]\b|\bvpermt2|\bvpcompress|\bvpexpand"  # EVEX-only instructions
    r"|\bvpdpbusds?\b|\bvpdpwssds?\b"  # VNNI (AVX-VNNI or AVX512-VNNI)
    r"|\bldtilecfg\b|\btileloadd|\btdpb|\btilestored\b"  # AMX
)


def beyond_v3(listing: str) -> list[str]:
    """The lines of an objdump listing that use an instruction or register beyond x86-64-v3."""
    found = subprocess.run(["grep", "-E", BEYOND_V3], input=listing, capture_output=True, text=True)
    assert found.returncode in (0, 1), found.stderr
    return found.stdout.splitlines()


def disassemble(path: Path) -> str:
    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils, installed with the C compiler that builds llama.cpp) is needed for this check"
    return subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True, check=True
    ).stdout


def native_libraries() -> list[Path]:
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.submodule_search_locations, "llama-cpp-python is not installed (make install)"
    root = Path(next(iter(spec.submodule_search_locations)))
    unique = {}  # the wheel holds libX.so, libX.so.0 and libX.so.0.N.M as copies: check each library once
    for p in sorted(root.rglob("*.so*")):
        if p.is_file():
            unique.setdefault(hashlib.sha256(p.read_bytes()).hexdigest(), p)
    return sorted(unique.values())


def test_llama_cpp_libraries_use_no_instruction_beyond_x86_64_v3():
    libraries = native_libraries()
    names = {p.name.split(".so")[0] for p in libraries}
    assert {"libggml-cpu", "libllama"} <= names, f"llama.cpp's libraries not found: {names}"
    offenders = {}
    for lib in libraries:
        hits = beyond_v3(disassemble(lib))
        if hits:
            offenders[lib.name] = (len(hits), [h.strip() for h in hits[:3]])
    assert not offenders, f"instructions beyond x86-64-v3 (a native build?): {offenders}"


def test_the_disassembly_check_catches_a_native_build(tmp_path):
    """The check is not vacuous: the same loop compiled by this machine's compiler for x86-64-v3 passes it, and
    compiled for an AVX-512 CPU (what -march=native gives on such a host) is caught."""
    source = tmp_path / "saxpy.c"
    source.write_text(
        "void saxpy(float *y, const float *x, float a, int n) { for (int i = 0; i < n; i++) y[i] += a * x[i]; }\n"
    )
    found = {}
    for arch in ("x86-64-v3", "x86-64-v4"):
        obj = tmp_path / f"{arch}.o"
        subprocess.run(
            ["cc", "-O3", f"-march={arch}", "-mprefer-vector-width=512", "-c", str(source), "-o", str(obj)], check=True
        )
        found[arch] = bool(beyond_v3(disassemble(obj)))
    assert found == {"x86-64-v3": False, "x86-64-v4": True}, found


def test_the_disassembly_pattern_flags_avx512_amx_and_vnni():
    """The pattern flags AVX-512 / AMX / VNNI lines as objdump prints them, and not AVX2 / FMA / F16C / BMI2."""
    for line in (
        "vmovups (%rax),%zmm0",
        "vaddps %ymm17,%ymm1,%ymm2",
        "kmovw %k1,%eax",
        "vpternlogd $0xff,%ymm0,%ymm0,%ymm0",
        "{vex} vpdpbusd %ymm1,%ymm2,%ymm3",
        "tdpbssd %tmm0,%tmm1,%tmm2",
    ):
        assert beyond_v3(line) == [line], line
    for line in (
        "vfmadd231ps %ymm1,%ymm2,%ymm3",
        "vcvtph2ps %xmm0,%ymm1",
        "shlx %rax,%rbx,%rcx",
        "vmovdqu %ymm15,(%rdi)",
    ):
        assert beyond_v3(line) == [], line


def test_brain_refuses_a_cpu_without_avx2_with_a_clear_reason():
    old_cpu = "processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx\n"
    assert missing_cpu_flags(old_cpu) == ["avx2", "fma", "f16c", "bmi2"]
    v3_cpu = "flags\t\t: fpu sse2 " + " ".join(REQUIRED_CPU_FLAGS) + " avx512f\n"
    assert missing_cpu_flags(v3_cpu) == []


def test_this_machine_can_run_the_brain():
    if missing_cpu_flags():
        pytest.fail(f"this CPU lacks {missing_cpu_flags()}: the brain's x86-64-v3 build cannot run here")
