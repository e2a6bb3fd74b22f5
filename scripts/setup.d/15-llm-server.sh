#!/usr/bin/env bash
# The local LLM server (the embedded default, `provider = "local"`): llama.cpp's llama-server
# built from the sources vendored by the llama-cpp-python sdist (docs/OFFLINE-ASSETS.md), and
# proved by running it: a build counts only once it has served a short completion on the
# 0.5B model. Every `make setup` proves the cached build again, so a build that does not run
# on this CPU is rebuilt, never trusted because the file exists.
#
# Two flavours (recorded in build/FLAVOUR):
#   native    -DGGML_NATIVE=ON (-march=native): fastest where it runs.
#   portable  GGML_NATIVE off, x86-64 feature flags named explicitly from /proc/cpuinfo
#             (AVX2/FMA/F16C, AVX-512 where advertised) and AMX always off: some hosts
#             advertise AMX yet trap on its instructions (SIGILL in ggml_backend_amx_mul_mat).
# A CPU that advertises AMX starts with the portable build; any other starts native, and a
# native build that fails its check is rebuilt portable and checked again.
#
# Layout under $BENCHGEN_CACHE/llm:
#   build/bin/llama-server   the server (default `server_binary`)
#   build/FLAVOUR            native | portable, of the build that passed its check
#   server-check.log         the last check's server log
# CMAKE (default `cmake`) is the build tool and BENCHGEN_CPUINFO (default /proc/cpuinfo) the
# CPU description; tests put stand-ins there (tests/it/setup.rs).
# needed by: make demo, make test
set -euo pipefail
CACHE="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
LLM="$CACHE/llm"
CMAKE="${CMAKE:-cmake}"
CPUINFO="${BENCHGEN_CPUINFO:-/proc/cpuinfo}"
LLAMA_CPP_PYTHON=0.3.36
server="$LLM/build/bin/llama-server"
model="$LLM/models/qwen2.5-coder-0.5b-instruct.gguf"
large="$LLM/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
mkdir -p "$LLM/downloads"

# cmake/g++ come from 00-system.sh; check again so this step can run alone.
if [ "$CMAKE" = cmake ] && { ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; }; then
  echo "  installing Debian packages: cmake g++"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq cmake g++
fi
# Run from setup.sh in the background, beside 10-llm-models.sh: wait for the model it
# assembles (it appears whole, by rename) before the first check.
wait_for_model() {
  local waited=0
  while [ ! -f "$model" ] && [ "$waited" -lt "${BENCHGEN_WAIT_FOR_MODEL:-0}" ]; do
    sleep 2
    waited=$((waited + 2))
  done
  [ -f "$model" ] || { echo "  error: $model is missing (10-llm-models.sh assembles it)" >&2; exit 1; }
}

# check: prove the build on each model the demo uses, the 0.5B first and the 1.5B when it
# is there: one build can pass on one model and trap on the other (on one AMX host a native
# build died by SIGILL on the 0.5B's kernels and by SIGSEGV on the 1.5B's).
check() {
  wait_for_model
  check_model "$model" || return 1
  if [ -f "$large" ]; then check_model "$large" || return 1; fi
}

# check_model MODEL: start the server on MODEL and ask for a 4-token completion. Prints why
# it failed (signal name for a crash) and returns 1 when it does not answer.
check_model() {
  local m="$1" port log pid i status=""
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  log="$LLM/server-check.log"
  "$server" -m "$m" --host 127.0.0.1 --port "$port" -t 2 -c 512 --no-webui >"$log" 2>&1 &
  pid=$!
  for i in $(seq 1 600); do # up to 60 s to load
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" && status=0 || status=$?
      break
    fi
    if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
  local answered=1
  if [ -z "$status" ]; then
    if curl -fsS --max-time 60 "http://127.0.0.1:$port/completion" \
      -H 'Content-Type: application/json' -d '{"prompt":"1, 2, 3,","n_predict":4}' 2>/dev/null \
      | grep -q '"content"'; then
      answered=0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then wait "$pid" && status=0 || status=$?; fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [ "$answered" = 0 ]; then return 0; fi
  if [ -n "$status" ] && [ "$status" -gt 128 ]; then
    echo "  llama-server check on $(basename "$m"): killed by SIG$(kill -l $((status - 128))) (log $log)"
  elif [ -n "$status" ]; then
    echo "  llama-server check on $(basename "$m"): exited with status $status during start-up (log $log)"
  else
    echo "  llama-server check on $(basename "$m"): no completion within 60 s (log $log)"
  fi
  tail -5 "$log" | sed 's/^/    /'
  return 1
}

source_dir() {
  local src="$LLM/src/llama_cpp_python-$LLAMA_CPP_PYTHON"
  if [ ! -d "$src/vendor/llama.cpp" ]; then
    local sdist="$LLM/downloads/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
    if [ ! -f "$sdist" ]; then
      echo "  downloading llama-cpp-python==$LLAMA_CPP_PYTHON source package (PyPI, for its vendored llama.cpp)" >&2
      # `--no-binary llama-cpp-python`, not `:all:`: that also built its build dependencies
      # (ninja, cmake) from source just to read the sdist's metadata.
      python3 -m pip download --quiet --no-deps --disable-pip-version-check \
        --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$LLM/downloads" >&2
    fi
    mkdir -p "$LLM/src"
    tar -xzf "$sdist" -C "$LLM/src"
  fi
  echo "$src/vendor/llama.cpp"
}

# build FLAVOUR: a clean cmake build of llama-server.
build() {
  local flavour="$1" src launcher flags=()
  # Absolute and without `//` or a trailing slash, as CMake writes the source paths the
  # launcher compares with it (a BENCHGEN_CACHE ending in `/` would otherwise match none).
  src=$(cd "$(source_dir)" && pwd)
  if [ "$flavour" = native ]; then
    flags=(-DGGML_NATIVE=ON)
  else
    local cpu
    cpu=$(grep -m1 '^flags' "$CPUINFO" 2>/dev/null || true)
    has() { [[ " $cpu " == *" $1 "* ]]; }
    flags=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
    has avx && flags+=(-DGGML_AVX=ON)
    has avx2 && flags+=(-DGGML_AVX2=ON)
    has fma && flags+=(-DGGML_FMA=ON)
    has f16c && flags+=(-DGGML_F16C=ON)
    has bmi2 && flags+=(-DGGML_BMI2=ON)
    if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
      flags+=(-DGGML_AVX512=ON)
      has avx512_vnni && flags+=(-DGGML_AVX512_VNNI=ON)
      has avx512_bf16 && flags+=(-DGGML_AVX512_BF16=ON)
      has avx512vbmi && flags+=(-DGGML_AVX512_VBMI=ON)
    else
      flags+=(-DGGML_AVX512=OFF)
    fi
  fi
  echo "  building llama-server ($flavour: ${flags[*]}; cmake -j2, a few minutes)"
  rm -rf "$LLM/build"
  # The launcher compiles what is not the models' arithmetic at a lower level (llama-compile
  # says which and why): a minute of the cold setup, no change to the answers or their speed.
  # Copied into the cache beside the build, whose CMake cache names it: a later `cmake
  # --build` there must not depend on the checkout that ran setup. GGML_CCACHE=OFF: ccache
  # is then never tried (ggml already leaves it out where a launcher is set).
  cp "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/llama-compile" "$LLM/llama-compile"
  chmod +x "$LLM/llama-compile"
  launcher="$LLM/llama-compile;$src"
  "$CMAKE" -S "$src" -B "$LLM/build" "${flags[@]}" \
    -DGGML_CCACHE=OFF -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    >"$LLM/cmake-configure.log" 2>&1 \
    || { tail -30 "$LLM/cmake-configure.log"; exit 1; }
  "$CMAKE" --build "$LLM/build" --target llama-server -j2 >"$LLM/cmake-build.log" 2>&1 \
    || { tail -30 "$LLM/cmake-build.log"; exit 1; }
  [ -x "$server" ] || { echo "  llama-server was not built (see $LLM/cmake-build.log)"; exit 1; }
}

if [ -x "$server" ]; then
  flavour=$(cat "$LLM/build/FLAVOUR" 2>/dev/null || echo unknown)
  if check; then
    echo "  llama-server: present and answering ($flavour build, $server)"
    exit 0
  fi
  echo "  llama-server: the cached $flavour build does not run here; rebuilding"
  rm -f "$LLM/build/FLAVOUR"
fi

if grep -qw amx_tile "$CPUINFO" 2>/dev/null; then
  echo "  this CPU advertises AMX, which traps on some hosts: building the portable flavour"
  first=portable
else
  first=native
fi
build "$first"
if check; then
  echo "$first" >"$LLM/build/FLAVOUR"
  echo "  llama-server: built ($first) and answering ($server)"
  exit 0
fi
if [ "$first" = native ]; then
  echo "  llama-server: the native build does not run on this CPU; building the portable flavour"
  build portable
  if check; then
    echo portable >"$LLM/build/FLAVOUR"
    echo "  llama-server: built (portable) and answering ($server)"
    exit 0
  fi
fi
echo "  error: llama-server does not run on this machine even as a portable build (see $LLM/server-check.log)" >&2
exit 1
