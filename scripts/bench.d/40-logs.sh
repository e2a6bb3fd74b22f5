#!/usr/bin/env bash
# Log track: import + anonymise + group 100,000 generated sessions (1 M events, sessions
# interleaved), then graph candidates and stats; wall times and peak RSS (release build).
# Override the session count with LOGS_BENCH_N.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked --bench logs -- "${LOGS_BENCH_N:-100000}"
