#!/usr/bin/env bash
# Synthesis: `synth chains` + `execute` on 1,000 chains of the demo domain with the scripted
# endpoint at 200 ms per call and concurrency 32: samples/s, share of the endpoint ceiling,
# CPU per sample, and the load average. Override the chain count with SYNTH_BENCH_N.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked --bench synth -- "${SYNTH_BENCH_N:-1000}"
