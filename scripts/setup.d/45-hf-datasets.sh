#!/usr/bin/env bash
# Hugging Face `datasets` (PyPI), for the release test that loads every config of a card
# as the Hub's loader does (tests/it/release.rs): a venv of its own under the setup cache,
# proved by loading a one-row JSON dataset, not just found. Idempotent: a venv whose
# version answers is left alone.
# needed by: make test
# (the tests only: `scripts/setup.sh demo` skips it)
set -euo pipefail
cache="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
venv="$cache/hf-datasets"
VERSION=5.2.0

prove() {
  local dir out
  dir=$(mktemp -d)
  printf '[{"query": "benchgen-setup"}]' >"$dir/part.json"
  out=$(HF_HOME="$dir/home" HF_DATASETS_OFFLINE=1 "$venv/bin/python" -c '
import sys, datasets
datasets.disable_progress_bars()
d = datasets.load_dataset("json", data_files=sys.argv[1], split="train")
assert d[0]["query"] == "benchgen-setup", d[0]
print(datasets.__version__)' "$dir/part.json" 2>&1) || { rm -rf "$dir"; echo "$out" | tail -5 >&2; return 1; }
  rm -rf "$dir"
  [ "$(echo "$out" | tail -1)" = "$VERSION" ] || { echo "  datasets: got version $(echo "$out" | tail -1), want $VERSION" >&2; return 1; }
  echo "  Hugging Face datasets $VERSION: loads a JSON dataset ($venv)"
}

if [ -x "$venv/bin/python" ] && prove 2>/dev/null; then
  exit 0
fi
echo "  installing from PyPI into $venv: datasets==$VERSION pyyaml"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "datasets==$VERSION" pyyaml
prove
