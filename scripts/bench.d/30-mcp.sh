#!/usr/bin/env bash
# MCP figures for the README: sandbox calls/s and p50/p99 latency over stdio and
# Streamable HTTP with 1 and 32 concurrent clients, and the executor's overhead per
# call excluding LLM time. Release build; BENCH_CALLS sets the calls per run (default 2000).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo test --release --locked --test it -- mcp_bench:: --ignored --nocapture --test-threads=1 2>&1 \
  | grep -oE '(sandbox (stdio|http)|executor):? .*' || { echo "mcp bench failed" >&2; exit 1; }
