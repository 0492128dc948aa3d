#!/usr/bin/env bash
# Build the images' base from Debian packages, for machines that reach Debian's archive but no image registry:
# a minimal bookworm (python3.11 + venv) made by mmdebstrap, imported into Docker and tagged, so the Dockerfiles'
# `FROM ${BASE_IMAGE}` needs no pull. Users with a registry skip this: the Dockerfiles default to python:3.11-slim.
#
# Usage: scripts/build-base-image.sh [TAG [PACKAGES]]   (default voicefleet-base:bookworm with
#        python3,python3-venv,ca-certificates; reuses the tag if it exists). `make compose-test` also makes
#        voicefleet/prometheus-debian from Debian's prometheus package this way (no registry for prom/prometheus).
set -euo pipefail
tag=${1:-voicefleet-base:bookworm}
# python3-venv brings ensurepip (pip), which the Dockerfiles use to make /opt/venv.
packages=${2:-python3,python3-venv,ca-certificates}
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "build-base-image: $tag exists" >&2
  exit 0
fi
command -v mmdebstrap >/dev/null || { echo "build-base-image: needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mmdebstrap --quiet --variant=minbase --include="$packages" \
  --aptopt='Acquire::Retries "3"' bookworm "$tmp/base.tar" http://deb.debian.org/debian </dev/null
docker import --change 'ENV LANG=C.UTF-8' "$tmp/base.tar" "$tag" >/dev/null
echo "build-base-image: $tag ($(du -h "$tmp/base.tar" | cut -f1) rootfs)" >&2
