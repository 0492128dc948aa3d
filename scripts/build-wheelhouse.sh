#!/usr/bin/env bash
# Download (or build) every wheel an image installs into build/wheels/<service>/, on the host, so the images
# install with `pip install --no-index --find-links /wheels`: the offline, reproducible build (and the only one
# that works where the host reaches the package index but a container build cannot verify it).
# The brain's llama-cpp-python is never compiled inside an image: scripts/build-brain-wheel.sh builds it once for
# x86-64-v3 into build/wheels/brain-x86-64-v3, and that wheel goes into the brain's wheelhouse.
#
# Usage: scripts/build-wheelhouse.sh PYTHON [SERVICE...]   (default: every CPU image; reruns reuse what is there)
set -euo pipefail
python=${1:?usage: build-wheelhouse.sh PYTHON [SERVICE...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
services=("$@")
[ ${#services[@]} -gt 0 ] || services=(router cosyvoice_tts qwen_tts asr moss_sts brain gateway)

wheel() {  # wheel OUT ARGS...: wheels for ARGS (requirement files/options) into OUT, no cache writes
  "$python" -m pip wheel -q --no-cache-dir --prefer-binary -w "$@" 2> >(grep -v "WARNING: Location 'file:" >&2)
}

# A wheelhouse is reused while the requirement files (and this script) are unchanged.
stamp=$(cat services/*/requirements*.txt scripts/build-brain-wheel.sh "$0" | sha256sum | cut -c1-16)
for s in "${services[@]}"; do
  out=build/wheels/$s
  # The stamp sits beside the folder: a file inside would change every image's COPY and defeat the layer cache.
  if [ "$(cat "$out.complete" 2>/dev/null)" = "$stamp" ]; then
    echo "build-wheelhouse: $out is up to date" >&2
    continue
  fi
  rm -rf "$out" && mkdir -p "$out"
  start=$SECONDS
  case $s in
    router) wheel "$out" -r services/router/requirements.txt ;;
    gateway) wheel "$out" -r services/gateway/requirements.txt ;;
    cosyvoice_tts|qwen_tts) wheel "$out" -r "services/$s/requirements-cpu.txt" ;;
    asr|moss_sts)
      wheel "$out" -r "services/$s/requirements-cpu.txt"
      wheel "$out" --no-deps -r "services/$s/requirements-cpu-nodeps.txt" ;;
    brain)
      brain=$(scripts/build-brain-wheel.sh "$python" build/wheels/brain-x86-64-v3)
      cp "$brain" "$out/"
      # Everything but llama-cpp-python from the index; llama-cpp-python only as the portable wheel above.
      wheel "$out" --find-links "$out" --only-binary llama-cpp-python \
        -r services/common/requirements.txt -r services/brain/requirements-cpu.txt
      wheel "$out" --no-deps -r services/brain/requirements-cpu-nodeps.txt ;;
    *) echo "build-wheelhouse: unknown service $s" >&2; exit 2 ;;
  esac
  echo "$stamp" >"$out.complete"
  echo "build-wheelhouse: $out $(du -sh "$out" | cut -f1) in $((SECONDS - start)) s" >&2
done
