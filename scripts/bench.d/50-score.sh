#!/usr/bin/env bash
# `benchgen score` on 1,000,000 generated predictions across all kinds: throughput and peak
# memory per mode (release build). Override the count with SCORE_BENCH_N.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked --bench score -- "${SCORE_BENCH_N:-1000000}"
