#!/usr/bin/env bash
# Third-party MCP servers the MCP tests run against (see docs: OFFLINE-ASSETS, MCP):
#   npm  @modelcontextprotocol/server-{everything,memory,filesystem,sequential-thinking}
#   PyPI mcp-server-time, mcp-server-git (in a venv)
# Installed into $BENCHGEN_CACHE/mcp/{npm,venv}. Idempotent: a step is skipped when its
# stamp names the same versions and every entry point still has the sha256 recorded when
# it was installed (npm and pip check the registry's own integrity hashes on download).
# needed by: make test
# (the tests only: `scripts/setup.sh demo` skips it)
set -euo pipefail
cache="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}/mcp"
mkdir -p "$cache"

NPM_VERSION=2026.8.31
NPM_PKGS=(server-everything server-memory server-filesystem server-sequential-thinking)
PY_VERSION=2026.10.19
PY_PKGS=(mcp-server-time mcp-server-git)

# verify STAMP_FILE WANT: the stamp's first line is WANT and every listed file hashes as recorded.
verify() {
  local stamp="$1" want="$2"
  [ -f "$stamp" ] || return 1
  [ "$(head -n1 "$stamp")" = "$want" ] || return 1
  tail -n +2 "$stamp" | sha256sum --check --quiet --status 2>/dev/null
}

# --- npm ---------------------------------------------------------------------------------
npm_dir="$cache/npm"
npm_want="npm ${NPM_PKGS[*]} @ $NPM_VERSION"
npm_entries=()
for p in "${NPM_PKGS[@]}"; do npm_entries+=("$npm_dir/node_modules/@modelcontextprotocol/$p/package.json"); done
if verify "$npm_dir/.stamp" "$npm_want"; then
  echo "  npm MCP servers: present ($npm_dir)"
else
  command -v npm >/dev/null || { echo "  npm is missing: install nodejs and npm (Debian: apt-get install nodejs npm)" >&2; exit 1; }
  specs=()
  for p in "${NPM_PKGS[@]}"; do specs+=("@modelcontextprotocol/$p@$NPM_VERSION"); done
  echo "  installing from npm into $npm_dir: ${specs[*]}"
  mkdir -p "$npm_dir"
  [ -f "$npm_dir/package.json" ] || echo '{"name":"benchgen-mcp-servers","private":true}' > "$npm_dir/package.json"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error --save-exact "${specs[@]}"
  for p in "${NPM_PKGS[@]}"; do
    got=$(node -p "require('$npm_dir/node_modules/@modelcontextprotocol/$p/package.json').version")
    [ "$got" = "$NPM_VERSION" ] || { echo "  $p: got version $got, want $NPM_VERSION" >&2; exit 1; }
  done
  { echo "$npm_want"; sha256sum "${npm_entries[@]}" "$npm_dir"/node_modules/.bin/mcp-server-*; } > "$npm_dir/.stamp.tmp"
  mv "$npm_dir/.stamp.tmp" "$npm_dir/.stamp"
fi

# --- PyPI (venv) -------------------------------------------------------------------------
venv="$cache/venv"
py_want="pypi ${PY_PKGS[*]} @ $PY_VERSION"
if verify "$venv/.stamp" "$py_want"; then
  echo "  Python MCP servers: present ($venv)"
else
  echo "  installing from PyPI into $venv: ${PY_PKGS[*]/%/==$PY_VERSION}"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_PKGS[@]/%/==$PY_VERSION}"
  command -v git >/dev/null || echo "  warning: mcp-server-git needs the git binary on PATH" >&2
  { echo "$py_want"; sha256sum "$venv/bin/mcp-server-time" "$venv/bin/mcp-server-git"; } > "$venv/.stamp.tmp"
  mv "$venv/.stamp.tmp" "$venv/.stamp"
fi

# --- Run each server once ------------------------------------------------------------------
# An MCP handshake and tools/list per server, so a server that installed but does not start
# (a missing runtime, a broken dependency) fails here, not in a test.
ping() {
  local what="$1"; shift
  local out
  if out=$(python3 "$(dirname "$0")/mcp-ping.py" "$@" 2>&1); then
    echo "  $what: answers ($out)"
  else
    echo "  error: MCP server $what does not start: $out" >&2
    echo "  (remove $cache and run make setup again to reinstall)" >&2
    exit 1
  fi
}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
git -C "$scratch" init -q
MEMORY_FILE_PATH="$scratch/memory.jsonl" ping server-memory node "$npm_dir/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
ping server-everything node "$npm_dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
ping server-filesystem node "$npm_dir/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js" "$scratch"
ping server-sequential-thinking node "$npm_dir/node_modules/@modelcontextprotocol/server-sequential-thinking/dist/index.js"
ping mcp-server-time "$venv/bin/mcp-server-time"
ping mcp-server-git "$venv/bin/mcp-server-git" --repository "$scratch"
