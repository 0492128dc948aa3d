#!/usr/bin/env bash
# Build llama-cpp-python (the CPU brain's server) as a wheel that runs on any x86-64-v3 CPU (AVX2 + FMA + F16C:
# Intel Haswell and later, AMD Zen and later), whatever CPU builds it.
#
# Why: pip builds llama-cpp-python from source with ggml's default GGML_NATIVE=ON (-march=native). A wheel built on
# an AVX-512/AMX Intel host died with SIGSEGV in llama_decode on an AMD host and the other way round, and pip's wheel
# cache hands that native build to every later venv on the machine. So the flags are spelled out here, the build
# never reads or writes pip's cache (--no-cache-dir), and the wheel lands in a folder named after its flags.
# tests/brain/test_brain_portable.py disassembles the built libraries and fails on any AVX-512 or AMX instruction.
#
# Usage: scripts/build-brain-wheel.sh PYTHON OUT_DIR   (prints the wheel's path; reuses one already built there)
set -euo pipefail
python=${1:?usage: build-brain-wheel.sh PYTHON OUT_DIR}
out=${2:?usage: build-brain-wheel.sh PYTHON OUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^llama-cpp-python==\([0-9.]*\).*/\1/p' "$here/services/brain/requirements-cpu.txt")
[ -n "$version" ] || { echo "build-brain-wheel: no llama-cpp-python==X pin in services/brain/requirements-cpu.txt" >&2; exit 2; }

# x86-64-v3, spelled out; everything wider (AVX-512*, AVX-VNNI, AMX) stays at ggml's default OFF.
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON \
-DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
mkdir -p "$out"
existing=$(ls "$out"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$existing" ]; then
  echo "$existing"
  exit 0
fi
echo "build-brain-wheel: building llama-cpp-python $version for x86-64-v3 (a few minutes on 2 cores)" >&2
"$python" -m pip wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-python -w "$out" \
  "llama-cpp-python==$version" >&2
ls "$out"/llama_cpp_python-"$version"-*.whl
