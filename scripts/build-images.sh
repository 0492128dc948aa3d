#!/usr/bin/env bash
# Build every CPU image of deploy/compose.yaml with Docker's classic builder (no BuildKit needed), tagged as compose
# names them (voicefleet/<service>:${VOICEFLEET_TAG:-latest}), from the host-built wheelhouse without the package
# index. Each image gets a build context of only what it copies (its own wheelhouse, not all of build/wheels).
#
# Usage: scripts/build-images.sh [SERVICE...]   env: VOICEFLEET_BASE_IMAGE (default voicefleet-base:bookworm)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${VOICEFLEET_BASE_IMAGE:-voicefleet-base:bookworm}
tag=${VOICEFLEET_TAG:-latest}
services=("$@")
[ ${#services[@]} -gt 0 ] || services=(router cosyvoice_tts qwen_tts asr moss_sts brain gateway)
export DOCKER_BUILDKIT=0
for s in "${services[@]}"; do
  case $s in
    brain) dockerfile=services/brain/Dockerfile target=brain wheels="build/wheels/brain" ;;
    *) dockerfile=services/$s/Dockerfile target=cpu wheels=build/wheels/$s ;;
  esac
  for w in $wheels; do
    [ -f "$w.complete" ] || { echo "build-images: $w missing: run scripts/build-wheelhouse.sh first" >&2; exit 2; }
  done
  start=$SECONDS
  # shellcheck disable=SC2086 # $wheels is a list of paths
  tar -c --exclude=__pycache__ --exclude='*.pyc' gen/python services $wheels \
    | docker build -q -f "$dockerfile" --target "$target" --build-arg BASE_IMAGE="$base" --build-arg PIP_NO_INDEX=1 \
        -t "voicefleet/$s:$tag" - 2> >(grep -v -e DEPRECATED -e 'legacy builder' -e 'BuildKit is currently' -e '^ *environment-variable' -e '^$' >&2) >/dev/null
  echo "build-images: voicefleet/$s:$tag in $((SECONDS - start)) s ($(docker image inspect -f '{{.Size}}' "voicefleet/$s:$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
done
