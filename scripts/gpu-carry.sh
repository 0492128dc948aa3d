#!/usr/bin/env bash
# What `make gpu-smoke` needs on a lent card whose image has Python 3.12 + torch (CUDA 13) and reaches no registry:
# the packages that image lacks (or holds at another version) as Python 3.12 wheels in .whl/, and CosyVoice @ the
# pinned commit with its Matcha-TTS submodule as source in .gpusrc/CosyVoice. Both folders are git-ignored through
# .git/info/exclude and travel with the device call that names them. On the card:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#   P=$(command -v python3); GPU_STACK_REPO=$PWD/.gpusrc/CosyVoice GPU_SMOKE_TORCH_PYTHON=$P \
#     GPU_SMOKE_QWEN_TTS_PYTHON=$P GPU_SMOKE_COSYVOICE_TTS_PYTHON=$P python3 -m bench.gpu_smoke
# Usage: scripts/gpu-carry.sh COSYVOICE_GIT_DIR MATCHA_TTS_GIT_DIR   (clones or bare mirrors holding the commits)
# The list is what tiny_qwen_tts and tiny_cosyvoice3 import beyond that image (resolved for cp312 manylinux,
# 2026-11-28; ~32 MB). asr (CTranslate2 needs CUDA 12's cuBLAS, ~600 MB) and vLLM (~400 MB) do not fit a call.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 2 ]] || { echo "usage: $0 COSYVOICE_GIT_DIR MATCHA_TTS_GIT_DIR" >&2; exit 2; }
cosyvoice_git=$1 matcha_git=$2
cosyvoice_commit=$(python3 -c 'import sys; sys.path.insert(0, "scripts"); import gpu_stacks; print(gpu_stacks.COSYVOICE[1])')

# sdists only on PyPI: built here (pure Python, any platform)
sdists=(antlr4-python3-runtime==4.9.3 wget==3.2 sox==1.4.1)
wheels=(
  HyperPyYAML==1.2.2 annotated-types==0.8.0 audioread==3.1.0 beautifulsoup4==4.15.0 cffi==2.1.1 conformer==0.3.2
  decorator==5.3.1 diffusers==0.29.0 einx==0.4.3 frozendict==2.5.1 gdown==5.1.0 grpcio==1.85.1
  grpcio-health-checking==1.85.1 huggingface_hub==0.36.2 hydra-core==1.3.2 importlib_metadata==10.2.0 inflect==7.3.1
  lazy-importer==0.1.0 librosa==0.10.2 loguru==0.7.3 more-itertools==11.2.1 omegaconf==2.3.0 platformdirs==4.14.8
  pooch==1.9.0 protobuf==7.36.2 pycparser==3.12 pydantic==2.14.4 pydantic-settings==2.16.3 pydantic_core==2.50.5
  python-dotenv==1.2.4 pytz==2026.6 qwen-tts==0.1.1 rootutils==1.0.7 ruamel.yaml==0.19.1 soundfile==0.12.1
  soupsieve==4.1.3 soxr==1.1.0 tokenizers==0.22.1 transformers==4.57.3 typeguard==4.6.1 typing-inspection==0.4.5
  tzdata==2026.6 x-transformers==2.11.24
)
mkdir -p .git/info
for ignored in /.whl/ /.gpusrc/; do
  grep -qxF "$ignored" .git/info/exclude 2>/dev/null || echo "$ignored" >>.git/info/exclude
done
rm -rf .whl .gpusrc
python3 -m pip wheel -q --no-deps -w .whl "${sdists[@]}"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${wheels[@]}"

mkdir -p .gpusrc/CosyVoice
git --git-dir="$cosyvoice_git" archive "$cosyvoice_commit" cosyvoice | tar -x -C .gpusrc/CosyVoice
matcha_commit=$(git --git-dir="$cosyvoice_git" ls-tree "$cosyvoice_commit" third_party/Matcha-TTS | awk '{print $3}')
mkdir -p .gpusrc/CosyVoice/third_party/Matcha-TTS
git --git-dir="$matcha_git" archive "$matcha_commit" matcha | tar -x -C .gpusrc/CosyVoice/third_party/Matcha-TTS
echo "carry: $(ls .whl | wc -l) wheels ($(du -sh .whl | cut -f1)), CosyVoice ${cosyvoice_commit:0:7} + Matcha-TTS ${matcha_commit:0:7}"
