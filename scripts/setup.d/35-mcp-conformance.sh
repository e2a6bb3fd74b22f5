#!/usr/bin/env bash
# The official MCP conformance suite (npm @modelcontextprotocol/conformance), which needs
# Node >= 22: npm's `node@22` package brings its own node binary, so the machine's Node 20
# is left alone. Installed into $BENCHGEN_CACHE/mcp/conformance; the test
# `it::mcp_sandbox::official_conformance_suite_*` runs it offline against `benchgen sandbox`.
# Idempotent: skipped when the stamp names the same versions and the entry points still
# hash as recorded.
# needed by: make test
# (the tests only: `scripts/setup.sh demo` skips it)
set -euo pipefail
dir="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}/mcp/conformance"
CONFORMANCE_VERSION=0.1.16
NODE_VERSION=22.23.3
want="conformance $CONFORMANCE_VERSION node $NODE_VERSION"
entries=("$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js" "$dir/node_modules/node/bin/node")
stamp="$dir/.stamp"
if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$want" ] && tail -n +2 "$stamp" | sha256sum --check --quiet --status 2>/dev/null \
  && "$dir/node_modules/.bin/node" "$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js" --help >/dev/null 2>&1; then
  # Present, and its own Node runs it (not just found).
  echo "  MCP conformance suite: present and runs ($dir)"
  exit 0
fi
command -v npm >/dev/null || { echo "  npm is missing: install nodejs and npm (Debian: apt-get install nodejs npm)" >&2; exit 1; }
echo "  installing from npm into $dir: @modelcontextprotocol/conformance@$CONFORMANCE_VERSION node@$NODE_VERSION"
mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"name":"benchgen-mcp-conformance","private":true}' > "$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --loglevel=error --save-exact \
  "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" "node@$NODE_VERSION"
"$dir/node_modules/.bin/node" --version | grep -q "^v22\." || { echo "  node@$NODE_VERSION did not give a Node 22 binary" >&2; exit 1; }
{ echo "$want"; sha256sum "${entries[@]}"; } > "$stamp"
echo "  MCP conformance suite: installed"
