#!/usr/bin/env bash
# Wait for the llama-server build that `SETUP_OVERLAP=1 scripts/setup.sh` left running in
# the background, show its log, and fail as setup would have if it failed. Without such a
# build (setup waited for it, or nothing had to be built) this returns at once.
set -euo pipefail
export BENCHGEN_CACHE="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
pidfile="$BENCHGEN_CACHE/setup-llm-server.pid"
rcfile="$BENCHGEN_CACHE/setup-llm-server.rc"
log="$BENCHGEN_CACHE/setup-llm-server.log"
[ -f "$pidfile" ] || exit 0
pid="$(cat "$pidfile")"
t0=$SECONDS
announced=""
# The build writes its exit status to $rcfile as its last act; a process that is gone
# without one was killed.
while [ ! -f "$rcfile" ]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    sleep 1
    [ -f "$rcfile" ] && break
    rm -f "$pidfile"
    cat "$log" 2>/dev/null || true
    echo "setup: the background llama-server build (pid $pid) ended without a result; run \`make setup\` again"
    exit 1
  fi
  if [ -z "$announced" ]; then
    echo "setup: waiting for the llama-server build in the background (log $log)"
    announced=1
  fi
  sleep 1
done
rc="$(cat "$rcfile")"
rm -f "$pidfile" "$rcfile"
cat "$log"
[ "$rc" = 0 ] || { echo "setup: 15-llm-server.sh failed (see above)"; exit "$rc"; }
[ -n "$announced" ] && echo "setup: the llama-server build was ready $((SECONDS - t0)) s after the wait began"
exit 0
