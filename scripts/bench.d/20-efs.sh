#!/usr/bin/env bash
# Embeddings and EFS candidate pairs on the ETOM snapshot (../shared/data/etom/mcp_registry.json,
# or $ETOM_SNAPSHOT):
# embedding throughput, pair search time, peak RSS; candidate pairs and planned listwise calls
# at several pair settings with their coverage of the hand-checked list (docs/efs.md).
# Pair search on synthetic vectors at 20,000 and 100,000 tools: 21-efs-search.sh.
# Targets (2-core machine): embedding < 20 s, pair search < 1 s, peak RSS < 1 GB.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"
snapshot="${ETOM_SNAPSHOT:-$repo/../shared/data/etom/mcp_registry.json}"
sanity="$repo/scripts/bench.d/data/etom-efs-sanity.json"
checked="$repo/scripts/bench.d/data/etom-efs-checked.json"
if [ ! -f "$snapshot" ]; then
  echo "skipping: $snapshot is not there"
  exit 0
fi
cargo build --release --locked -q
bin="$repo/target/release/benchgen"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pipeline"
export BENCHGEN_NO_PROGRESS=1

config() { # $1 = extra TOML for [efs.pairs]
  # The verifier role is only configured (never called): `efs pairs` plans its calls.
  printf '[registry]\nsource = "%s"\n\n[efs.pairs]\n%b\n\n[llm.roles.verifier]\nprovider = "vllm"\nmodel = "none"\n[llm.roles.generator]\nprovider = "vllm"\nmodel = "none"\n' "$snapshot" "$1" > "$work/pipeline/etom.toml"
}
cp -r "$repo/pipeline/prompts" "$work/pipeline/"
timed() { # run benchgen, print "seconds max_rss_kb"
  /usr/bin/time -f "%e %M" -o "$work/time" "$bin" --config "$work/pipeline/etom.toml" "$@" >/dev/null
  cat "$work/time"
}

config ""
"$bin" --config "$work/pipeline/etom.toml" run --until filter >/dev/null
read -r secs rss < <(timed embed)
tools=$(python3 -c "import json;print(json.load(open('$work/artifacts/embed/index.json'))['count'])")
echo "embed: $tools tools in ${secs} s ($(python3 -c "print(round($tools/$secs))") texts/s), peak RSS $((rss / 1024)) MB"
read -r secs rss < <(timed efs pairs)
search_ms=$(python3 -c "import json;print(json.load(open('$work/artifacts/efs-pairs/manifest.json'))['duration_ms'])")
echo "efs pairs: stage ${search_ms} ms (process ${secs} s), peak RSS $((rss / 1024)) MB"
cp "$work/artifacts/efs-pairs/pairs.csv" "$work/pairs-exact.csv"
config 'index = "blocked"'
read -r secs rss < <(timed efs pairs --force)
search_ms=$(python3 -c "import json;print(json.load(open('$work/artifacts/efs-pairs/manifest.json'))['duration_ms'])")
same=$(cmp -s "$work/pairs-exact.csv" "$work/artifacts/efs-pairs/pairs.csv" && echo "identical pairs.csv" || echo "pairs.csv DIFFERS")
echo "efs pairs, index = \"blocked\": stage ${search_ms} ms (process ${secs} s), peak RSS $((rss / 1024)) MB, $same"
config ""
read -r secs rss < <(timed embed --force)
echo "embed again with every vector reused: ${secs} s"

echo
echo "candidate pairs and planned listwise calls on the ETOM snapshot; coverage of the hand-checked"
echo "list ($(python3 -c "import json;d=json.load(open('$checked'));print(len(d),'groups,',sum(s['size']*(s['size']-1)//2 for s in d),'pairs')")): direct = planned pairs, perfect = what a perfect verifier rebuilds through union-find"
printf '%-46s %7s %6s %7s %7s %8s\n' setting pairs calls direct perfect sanity
while IFS='|' read -r label extra; do
  config "$extra"
  "$bin" --config "$work/pipeline/etom.toml" efs pairs --force >/dev/null
  read -r pairs calls < <(python3 -c "import json;s=json.load(open('$work/artifacts/efs-pairs/summary.json'));print(s['pairs'],s['calls'])")
  read -r direct perfect < <("$bin" --config "$work/pipeline/etom.toml" --json efs compare --reference "$checked" --sets "$checked" | python3 -c "import json,sys;d=json.load(sys.stdin);print(d['candidate_recall_ceiling'],d['perfect_verifier_recall'])")
  sanity_pv=$("$bin" --config "$work/pipeline/etom.toml" --json efs compare --reference "$sanity" --sets "$sanity" | python3 -c "import json,sys;print(json.load(sys.stdin)['perfect_verifier_recall'])")
  printf '%-46s %7s %6s %7s %7s %8s\n' "$label" "$pairs" "$calls" "$direct" "$perfect" "$sanity_pv"
done <<'EOF2'
ETOM rule: cosine >= 0.80 in top-10|min_cosine = 0.8\nmin_score = 0.8\nname_weight = 0.0\nparam_weight = 0.0\naction_penalty = 0.0\nsame_server_penalty = 0.0
earlier default: score >= 0.75|min_score = 0.75
score >= 0.60|min_score = 0.6
rrf, score >= 0.60|min_score = 0.6\nrank_by = "rrf"
score >= 0.50 (default)|
rrf, score >= 0.50|rank_by = "rrf"
default, mutual neighbours only|mutual_only = true
EOF2

