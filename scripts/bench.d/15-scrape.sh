#!/usr/bin/env bash
# Registry figures for docs/registry.md: scrape 10,000 servers from the loopback Glama
# fixture at a configured 20 requests/s (achieved rate, CPU per page, peak RSS of the
# scraper), and the wall time of merging three 10,000-server snapshots. Release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo test --release --locked --test it registry_bench:: -- --ignored --nocapture --test-threads=1 2>&1 \
  | grep -oE 'registry (scrape|merge).*' || { echo "registry bench failed" >&2; exit 1; }
