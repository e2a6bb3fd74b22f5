#!/usr/bin/env bash
# LLM batch API (issue 43): 100,000 typed requests of a role in `mode = "batch"` through the
# client against the loopback stand-in of the files and batches endpoints (two files of
# 50,000): write + upload, stand-in, download + ingest, exchanges/s and peak memory of the
# client (release build). Goal: ingest at 20,000 exchanges/s or more, peak under 500 MB.
# Override the count with LLM_BATCH_BENCH_N.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked --bench llm_batch -- "${LLM_BATCH_BENCH_N:-100000}"
