#!/usr/bin/env bash
# Install what benchgen's demo and tests need, idempotently: each step checks
# what is already there (and verifies files by sha256) before fetching anything,
# and runs what it installed once before trusting it.
# Steps live in scripts/setup.d/NN-name.sh and run in order, except the llama-server
# build (15-llm-server.sh), which is CPU-bound and starts in the background right after
# the system packages, so the downloads of the other steps overlap it; its check waits
# for the 0.5B model that 10-llm-models.sh assembles.
#
# Cache: $BENCHGEN_CACHE (default ~/.cache/benchgen), outside the repository.
#
# `scripts/setup.sh` (`make setup`, `make test`) runs every step; `scripts/setup.sh demo`
# (`make demo`) only the steps whose header says `# needed by: make demo`, so on a fresh
# machine the tests' own installs (MCP servers, chromium, the Python libraries the release
# tests load a release with) neither delay the demo nor take CPU from the llama-server build.
set -euo pipefail
only="" list=""
[ "${1:-}" = --list ] && { list=1; shift; }
[ $# -le 1 ] || set -- usage
case "${1:-}" in
  "") ;;
  demo) only=demo ;;
  *) echo "usage: scripts/setup.sh [--list] [demo]   (no argument: every step; demo: what \`make demo\` needs; --list: name the steps, run none)" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "$0")" && pwd)"

# The steps to run, in order: every one, or those whose header line lists `make $only`
# (a list: `# needed by: make demo, make test`).
selected() {
  for step in "$here"/setup.d/*.sh; do
    [ -e "$step" ] || continue
    if [ -z "$only" ] || grep -qE "^# needed by: (make [a-z]+, )*make $only(,|\$)" "$step"; then
      echo "$step"
    fi
  done
}
if [ -n "$list" ]; then
  selected | while IFS= read -r step; do echo "${step##*/}"; done
  exit 0
fi
export BENCHGEN_CACHE="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
mkdir -p "$BENCHGEN_CACHE"
t0=$SECONDS
background="$here/setup.d/15-llm-server.sh"
bg_log="$BENCHGEN_CACHE/setup-llm-server.log"
bg_pid=""
skipped=()
# The background build runs in its own process group, so a failing setup stops all of it.
trap '[ -n "$bg_pid" ] && kill -- "-$bg_pid" 2>/dev/null || true' EXIT

run_step() {
  local step="$1" s0=$SECONDS
  echo "setup: $(basename "$step")"
  bash "$step"
  echo "setup: $(basename "$step") took $((SECONDS - s0)) s"
}

chosen="$(selected)"
for step in "$here"/setup.d/*.sh; do
  [ -e "$step" ] || continue
  if ! grep -qxF "$step" <<<"$chosen"; then
    skipped+=("$(basename "$step" .sh)")
    continue
  fi
  [ "$step" = "$background" ] && continue
  run_step "$step"
  if [ "$(basename "$step")" = 00-system.sh ] && grep -qxF "$background" <<<"$chosen"; then
    echo "setup: 15-llm-server.sh (in the background; log $bg_log)"
    BENCHGEN_WAIT_FOR_MODEL=600 setsid bash -c 's0=$SECONDS; bash "$0" && echo "setup: 15-llm-server.sh took $((SECONDS - s0)) s"' \
      "$background" >"$bg_log" 2>&1 &
    bg_pid=$!
  fi
done
if [ -n "$bg_pid" ]; then
  status=0
  wait "$bg_pid" || status=$?
  bg_pid=""
  cat "$bg_log"
  [ "$status" = 0 ] || { echo "setup: 15-llm-server.sh failed (see above)"; exit "$status"; }
fi
echo "setup: done in $((SECONDS - t0)) s (cache: $BENCHGEN_CACHE)"
if [ ${#skipped[@]} -gt 0 ]; then
  echo "setup: for \`make $only\` only; \`make setup\` (or \`make test\`) also installs ${skipped[*]}"
fi
