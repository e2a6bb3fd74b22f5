#!/usr/bin/env bash
# LLM layer: calls/s against the scripted test server at 200 ms latency (C = 1, 8, 64),
# CPU per call, and the local model's tokens/s and seconds per typical call.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked --bench llm 2>/dev/null
