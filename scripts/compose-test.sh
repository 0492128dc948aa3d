#!/usr/bin/env bash
# `make compose-test`: the CPU stack in containers, end to end, on a host with Debian's packages and PyPI but no
# image registry (or with one). Steps, each timed:
#   1. Docker Engine + docker-compose v1 + mmdebstrap + prometheus from Debian's archive when missing (root only);
#      dockerd started in the background when `docker info` fails (its log: build/dockerd.log).
#   2. base image voicefleet-base:bookworm and voicefleet/prometheus-debian:2.42 (scripts/build-base-image.sh);
#   3. the wheelhouse build/wheels/<service> (scripts/build-wheelhouse.sh; the brain's portable llama.cpp wheel);
#   4. every CPU image (scripts/build-images.sh, classic builder, --no-index);
#   5. tests/deploy/test_compose_stack.py: up, healthy, speak/transcribe/converse, moss_sts crash + failover + restart, down.
# Usage: scripts/compose-test.sh PYTHON
# Exit 3: this machine cannot run containers (not root and no Docker daemon answers, or dockerd does not start):
# .ci/run then says so loudly instead of failing. Any other failure is a failure.
set -euo pipefail
python=${1:?usage: compose-test.sh PYTHON}
cd "$(dirname "$0")/.."
mkdir -p build
t_all=$SECONDS
step() { echo "compose-test: $1 in $(($SECONDS - $2)) s (load $(cut -d' ' -f1-3 /proc/loadavg))"; }

t=$SECONDS
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || missing+=(docker-compose)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v prometheus >/dev/null || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "compose-test: install ${missing[*]} (Debian packages) first" >&2; exit 3; }
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || { echo "compose-test: no Docker daemon answers; start one (dockerd)" >&2; exit 3; }
  nohup dockerd >build/dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "compose-test: dockerd did not start; see build/dockerd.log" >&2; exit 3; }
fi
step "container tools ready (Docker $(docker version -f '{{.Server.Version}}'))" $t

t=$SECONDS
scripts/build-base-image.sh voicefleet-base:bookworm
scripts/build-base-image.sh voicefleet/prometheus-debian:2.42 prometheus,wget,ca-certificates
step "base images" $t

t=$SECONDS
nice -n 10 scripts/build-wheelhouse.sh "$python"
step "wheelhouse" $t

t=$SECONDS
VOICEFLEET_BASE_IMAGE=voicefleet-base:bookworm nice -n 10 scripts/build-images.sh
step "images" $t

t=$SECONDS
"$python" -m pytest -m compose -o addopts="" -s -q tests/deploy/test_compose_stack.py
step "stack test" $t
echo "compose-test: all done in $(($SECONDS - t_all)) s"
