#!/usr/bin/env bash
# Review web app: 200 concurrent loopback reviewers sign in, open and submit their samples;
# the server is killed with kill -9 at 40% and restarted; p50/p99 page and submit latency,
# the count of acknowledged submissions lost from the database (must be 0), and, after
# `review import` drained the outbox, those without a ledger event or with one recorded
# twice (both must be 0). Release build.
# Override: REVIEW_BENCH_REVIEWERS, REVIEW_BENCH_SAMPLES, KILL_AT (share, default 0.4).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked --bench review_serve -- "${REVIEW_BENCH_REVIEWERS:-200}" "${REVIEW_BENCH_SAMPLES:-500}"
