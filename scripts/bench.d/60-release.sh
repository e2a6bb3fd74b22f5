#!/usr/bin/env bash
# `benchgen release` on 100,000 generated samples (both tracks, catalogs, review decisions):
# wall time and peak memory of the release stage (release build). Target: under 30 s and
# 2 GB. Override the count with RELEASE_BENCH_N.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked --bench release -- "${RELEASE_BENCH_N:-100000}"
