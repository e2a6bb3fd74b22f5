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
for step in "$here"/setup.d/*.sh; do
  [ -e "$step" ] || continue
  echo "setup: $(basename "$step")"
  bash "$step"
done
echo "setup: done (cache: $BENCHGEN_CACHE)"
