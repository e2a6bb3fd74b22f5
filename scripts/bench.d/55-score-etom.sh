#!/usr/bin/env bash
# `benchgen score` beside ETOM's published evaluator on the same input: 50,000
# orchestrator-style predictions over five ETOM level files (about 50 MB, made by
# etom_gen.py), CPU seconds (user + system, the least of 3 runs) of each and the ratio; then
# the stage breakdown of `benchgen score` (benches/score.rs --etom: loading, scoring core).
#
# eval.py is not shipped with benchgen: set ETOM_DIR to a checkout of the ETOM repository
# (eval/eval.py and eval/graph_evaluator.py are used as they are, driven by
# etom_eval_replay.py); without it that row is skipped. SCORE_ETOM_DIR keeps the input.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir="${SCORE_ETOM_DIR:-$(mktemp -d)}"
mkdir -p "$dir"
[ -e "$dir/predictions.jsonl" ] || python3 scripts/bench.d/etom_gen.py "$dir"
bin=target/release/benchgen
[ -x "$bin" ] || cargo build --release --locked
levels=("$dir"/level_1.json "$dir"/level_2.json "$dir"/level_3.json "$dir"/level_4.json "$dir"/level_5.json)
benches=()
for f in "${levels[@]}"; do benches+=(--bench "$f"); done

# Least user+sys CPU seconds of 3 runs of "$@" (stdout of the last run in $dir/out).
cpu() {
  local best=""
  for _ in 1 2 3; do
    /usr/bin/time -f '%U %S' -o "$dir/time" "$@" > "$dir/out"
    local s
    s=$(awk '{printf "%.3f", $1 + $2}' "$dir/time")
    if [ -z "$best" ] || awk -v a="$s" -v b="$best" 'BEGIN{exit !(a < b)}'; then best=$s; fi
  done
  echo "$best"
}

corrected=$(cpu "$bin" --json score "${benches[@]}" --pred "$dir/predictions.jsonl")
compat=$(cpu "$bin" --json score --compat etom "${benches[@]}" --pred "$dir/predictions.jsonl")
cp "$dir/out" "$dir/benchgen-compat.json"
etom="${ETOM_DIR:-}"
if [ -n "$etom" ] && [ -e "$etom/eval/eval.py" ]; then
  python=$(cpu python3 scripts/bench.d/etom_eval_replay.py "$etom" "$dir/predictions.jsonl" "${levels[@]}")
  cp "$dir/out" "$dir/eval-py.txt"
else
  python=""
fi

mb=$(du -cb "${levels[@]}" | awk 'END{printf "%.1f", $1 / 1e6}')
n=$(wc -l < "$dir/predictions.jsonl")
echo "input: $n predictions over five ETOM level files ($mb MB)"
echo "| run | CPU s (user + sys) | CPU vs eval.py |"
echo "| --- | ---: | ---: |"
ratio() { if [ -n "$python" ]; then awk -v p="$python" -v s="$1" 'BEGIN{printf "%.1f× less", p / s}'; else echo "-"; fi; }
echo "| benchgen score (corrected) | $corrected | $(ratio "$corrected") |"
echo "| benchgen score --compat etom | $compat | $(ratio "$compat") |"
if [ -n "$python" ]; then
  echo "| eval.py (ETOM's strategies and statistics) | $python | 1× |"
  # The compat mode must print eval.py's numbers: compare every level.
  python3 - "$dir/benchgen-compat.json" "$dir/eval-py.txt" <<'PY'
import json, re, sys
rep = json.load(open(sys.argv[1]))
rows = {r["key"]: r for s in rep["sections"] if s["dimension"] == "level" for r in s["rows"]}
bad = 0
for line in open(sys.argv[2]):
    m = re.match(r"(L\d): N (\d+), EM ([\d.]+), P ([\d.]+), R ([\d.]+), F1 ([\d.]+) over (\d+), "
                 r"TP/FP/FN (\d+)/(\d+)/(\d+), status (.*)$", line)
    if not m:
        continue
    r = rows[m[1]]
    status = {k[len("status."):]: int(v) for k, v in r.get("extras", {}).items() if k.startswith("status.")}
    ours = (r["n"], round(r["em"], 4), round(r["calls_macro"]["p"], 4), round(r["calls_macro"]["r"], 4),
            round(r["calls_macro"]["f1"], 4), r["calls_n"], r["support"]["tp"], r["support"]["fp"],
            r["support"]["fn"], status)
    theirs = (int(m[2]), float(m[3]), float(m[4]), float(m[5]), float(m[6]), int(m[7]), int(m[8]), int(m[9]),
              int(m[10]), json.loads(m[11]))
    if ours != theirs:
        bad += 1
        print(f"{m[1]} differs: benchgen {ours} vs eval.py {theirs}")
print("--compat etom printed eval.py's figures on every level (N, EM, P/R/F1 and their count, TP/FP/FN, status counts)" if bad == 0 else f"{bad} level(s) differ")
PY
else
  echo "(eval.py row skipped: set ETOM_DIR to a checkout of the ETOM repository)"
fi
echo "stage breakdown (benches/score.rs --etom):"
cargo bench --locked --bench score -- --etom "$dir" 2>/dev/null
