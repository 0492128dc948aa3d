#!/usr/bin/env bash
# `make k8s-check`: render every kustomization of deploy/k8s with `kubectl kustomize`, validate every object against
# the Kubernetes schemas (kubernetes-validate, strict) and check ports, images, probes, drain and routes against the
# services' own config: tests/deploy/test_k8s.py (which `make test` runs too).
#   kubectl: $KUBECTL, else the one on PATH, else Debian's kubernetes-client installed when root (apt-get);
#            otherwise this fails saying how to install it.
#   kubectl 1.20 (Debian bookworm's kubernetes-client, kustomize v2.0.3): fetched into build/k8s/kubectl-1.20 with
#            `apt-get download` (no root needed once the package lists exist) and passed as $KUBECTL_OLD: the
#            manifests must render the same objects with it. Where it cannot be fetched that comparison is skipped,
#            loudly.
# Usage: scripts/k8s-check.sh [PYTHON] (default .venv/bin/python)
#        scripts/k8s-check.sh --tools   only find/fetch the two kubectls (`make test` does this before pytest)
set -euo pipefail
tools_only=0
if [ "${1:-}" = --tools ]; then tools_only=1; shift; fi
python=${1:-.venv/bin/python}
cd "$(dirname "$0")/.."
root() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }

if [ -z "${KUBECTL:-}" ]; then
  if ! command -v kubectl >/dev/null; then
    if root; then
      echo "k8s-check: installing Debian's kubernetes-client (kubectl) ..."
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null
    else
      echo "k8s-check: kubectl not found and not root: apt-get install kubernetes-client (any kubectl >= 1.20)," \
        "or set KUBECTL=/path/to/kubectl" >&2
      exit 1
    fi
  fi
  KUBECTL=$(command -v kubectl)
fi
export KUBECTL

old=build/k8s/kubectl-1.20
if [ -z "${KUBECTL_OLD:-}" ] && [ ! -x "$old/usr/bin/kubectl" ] && command -v apt-get >/dev/null; then
  tmp=$(mktemp -d)
  if (cd "$tmp" && { apt-get download kubernetes-client >/dev/null 2>&1 \
        || { root && apt-get update -qq && apt-get download kubernetes-client >/dev/null; }; }); then
    deb=$(ls "$tmp"/kubernetes-client_*.deb)
    if [[ $(dpkg-deb -f "$deb" Version) == 1.20.* ]]; then
      mkdir -p "$old" && dpkg -x "$deb" "$old"
    else
      echo "k8s-check: Debian's kubernetes-client is $(dpkg-deb -f "$deb" Version), not 1.20" >&2
    fi
  fi
  rm -rf "$tmp"
fi
if [ -z "${KUBECTL_OLD:-}" ] && [ -x "$old/usr/bin/kubectl" ]; then
  export KUBECTL_OLD=$PWD/$old/usr/bin/kubectl
fi
if [ -z "${KUBECTL_OLD:-}" ]; then
  echo "!!! k8s-check: no kubectl 1.20 (apt-get download kubernetes-client failed): the kustomize v2.0.3" \
    "comparison is SKIPPED !!!" >&2
fi

echo "k8s-check: kubectl $("$KUBECTL" version --client 2>/dev/null | head -1)"
if [ "$tools_only" = 1 ]; then exit 0; fi
[ -z "${KUBECTL_OLD:-}" ] || echo "k8s-check: and kubectl $("$KUBECTL_OLD" version --client --short 2>/dev/null)"
exec "$python" -m pytest -o addopts="-ra" -q tests/deploy/test_k8s.py
