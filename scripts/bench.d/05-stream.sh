#!/usr/bin/env bash
# The stage runner's streaming path: copy a 2 GB input to a stage output (hashing
# and atomic commit included) and print wall time and peak memory.
# Target (2-core machine): under 300 MB peak RSS.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked -q --bench stream
