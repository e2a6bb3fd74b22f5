#!/usr/bin/env bash
# Install what benchgen's demo and tests need, idempotently: each step checks
# what is already there (and verifies files by sha256) before fetching anything.
# Steps live in scripts/setup.d/NN-name.sh and run in order.
#
# Cache: $BENCHGEN_CACHE (default ~/.cache/benchgen), outside the repository.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export BENCHGEN_CACHE="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
mkdir -p "$BENCHGEN_CACHE"
# Each step is timed, so a slow cold start shows where its minutes went.
t0=$SECONDS
for step in "$here"/setup.d/*.sh; do
  [ -e "$step" ] || continue
  echo "setup: $(basename "$step")"
  s0=$SECONDS
  bash "$step"
  echo "setup: $(basename "$step") took $((SECONDS - s0)) s"
done
echo "setup: done in $((SECONDS - t0)) s (cache: $BENCHGEN_CACHE)"
