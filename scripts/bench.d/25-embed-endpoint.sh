#!/usr/bin/env bash
# Embedding throughput on 2 cores: the local model (fastembed, MiniLM int8, the default) vs an
# embedding server (`[embed] provider = "openai"`) — llama.cpp's llama-server from `make setup`
# started here with `--embeddings --pooling mean` and the 0.5B Qwen2.5-Coder GGUF (the only
# GGUF the setup has; a 0.5B chat model, so the server side does ~20× MiniLM's work per token).
# One slot (-np 1; so each text streams the whole model through memory) and no busy-waiting
# (--poll 0, fairer on a shared machine): with more slots, this llama-server build returns wrong vectors for sequences that
# share a batch (docs/efs.md, "Embedding servers"). Both embed the same texts: the tools of the first servers of the ETOM snapshot
# (../shared/data/etom/mcp_registry.json or $ETOM_SNAPSHOT) up to $EMBED_BENCH_TOOLS (default 100).
# Printed: wall seconds, texts/s, CPU seconds (user+sys) of benchgen and of the server, and texts
# per CPU second of both together — the figure that wall time on a shared machine distorts least.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"
snapshot="${ETOM_SNAPSHOT:-$repo/../shared/data/etom/mcp_registry.json}"
want="${EMBED_BENCH_TOOLS:-100}"
cache="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
server_bin="$cache/llm/build/bin/llama-server"
gguf="$cache/llm/models/qwen2.5-coder-0.5b-instruct.gguf"
if [ ! -f "$snapshot" ]; then
  echo "skipping: $snapshot is not there"
  exit 0
fi
bin="${BENCHGEN_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --release --locked -q
  bin="$repo/target/release/benchgen"
fi
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/pipeline"
export BENCHGEN_NO_PROGRESS=1

# The first servers of the snapshot, up to about $want tools.
python3 - "$snapshot" "$want" "$work/registry.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
want, out, n = int(sys.argv[2]), [], 0
for s in d["servers"]:
    if n >= want:
        break
    out.append(s)
    n += len(s.get("tools") or [])
d["servers"] = out
d["total_servers"], d["total_tools"] = len(out), n
json.dump(d, open(sys.argv[3], "w"))
EOF

config() { # $1 = [embed] lines
  printf '[registry]\nsource = "%s"\n\n[embed]\n%b\n' "$work/registry.json" "$1" > "$work/pipeline/b.toml"
}
run() { # benchgen with time: prints "wall user sys"
  /usr/bin/time -f "%e %U %S" -o "$work/time" "$bin" --config "$work/pipeline/b.toml" "$@" >/dev/null
  cat "$work/time"
}
cpu_of() { # user+sys seconds of a process so far
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

config ""
"$bin" --config "$work/pipeline/b.toml" run --until filter >/dev/null
tools=$(python3 -c "import json;print(sum(len(s['tools']) for s in json.load(open('$work/artifacts/filter/catalog.json'))['servers']))")
echo "embedding $tools tool texts (first servers of the ETOM snapshot), 2 cores"
row() { # label wall cpu_benchgen cpu_server
  python3 -c "
import sys
label, wall, cb, cs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
cpu = cb + (float(cs) if cs != '-' else 0.0)
print('%-58s %7.1f %8.1f %13.1f %11s %12.1f' % (label, wall, $tools / wall, cb, cs, $tools / cpu))
" "$@"
}
printf '%-58s %7s %8s %13s %11s %12s\n' provider wall_s texts/s cpu_benchgen cpu_server texts/cpu_s

if [ -f "$cache/embed/all-MiniLM-L6-v2-int8/model.onnx" ]; then
  read -r wall user sys < <(run embed --force)
  row "fastembed, MiniLM-L6 int8 (384), batch 8" "$wall" "$(python3 -c "print($user+$sys)")" "-"
else
  echo "fastembed: skipped (MiniLM assets missing; run make setup)"
fi

if [ -x "$server_bin" ] && [ -f "$gguf" ]; then
  port=$(python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
  "$server_bin" -m "$gguf" --host 127.0.0.1 --port "$port" -t 2 --no-webui \
    --embeddings --pooling mean -c 2048 -np 1 -ub 2048 -b 2048 --poll 0 >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "llama-server did not start:"; tail -5 "$work/server.log"; exit 1; }
  for batch in 32; do
    # One slot in the server: one request at a time is all it can use.
    config "provider = \"openai\"\nbase_url = \"http://127.0.0.1:$port/v1\"\nmodel = \"qwen2.5-coder-0.5b\"\nbatch_size = $batch\nmax_concurrency = 1\ntimeout_s = 1800"
    rm -rf "$work/artifacts/embed" # no reuse from the previous run
    before=$(cpu_of "$server_pid")
    read -r wall user sys < <(run embed --force)
    after=$(cpu_of "$server_pid")
    row "openai → llama-server -np 1, Qwen2.5-Coder 0.5B (896), batch $batch" "$wall" \
      "$(python3 -c "print($user+$sys)")" "$(python3 -c "print(round($after-$before, 1))")"
  done
  read -r wall user sys < <(run embed --force)
  echo "server again with every vector reused: ${wall} s (no request)"
else
  echo "llama-server: skipped (llama-server or the 0.5B GGUF missing; run make setup)"
fi
