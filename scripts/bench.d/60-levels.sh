#!/usr/bin/env bash
# ETOM's five levels over the ETOM snapshot against the scripted endpoint (200 ms per
# request, concurrency 32): wall time, requests (counted by the endpoint), the manifests'
# exchanges, CPU and share of the endpoint ceiling per stage, and the load average.
# Target: ≥ 80 % of the ceiling.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked --bench levels 2>/dev/null
