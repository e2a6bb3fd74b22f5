#!/usr/bin/env bash
# EFS pair search on synthetic clustered vectors (benches/efs_pairs.rs): the blocked search
# (`[efs.pairs] index = "blocked"`, what `auto` uses from 5,000 tools) at 2,375, 20,000 and
# 100,000 tools, and the plain loop (`index = "exact"`) up to 20,000 tools with the recall of
# its top-k lists by the blocked search. Target: 100,000 tools in under 30 s on 2 cores.
# EFS_BENCH_SIZES="2375 20000" limits the sizes; EFS_BENCH_EXACT_MAX=100000 also runs the
# loop at 100,000 (about 6 minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench --locked --bench efs_pairs -q -- ${EFS_BENCH_SIZES:-} 2>/dev/null
