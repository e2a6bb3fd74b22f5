#!/usr/bin/env bash
# Benchmarks that print the figures quoted in the README. Each part lives in
# scripts/bench.d/NN-name.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for b in "$here"/bench.d/*.sh; do
  [ -e "$b" ] || continue
  echo "== $(basename "$b" .sh)"
  bash "$b"
done
