#!/usr/bin/env bash
# Installs the third-party MCP servers the agentry-mcp tests run against, into a project-local,
# git-ignored directory (default: <repo>/.cache/mcp, override with AGENTRY_MCP_CACHE).
#
#   npm/   @modelcontextprotocol/server-everything, server-filesystem, conformance, node@22
#   conformance-next/  @modelcontextprotocol/conformance, the next (pre-release) version
#   clients/  the official TypeScript SDK (@modelcontextprotocol/sdk) and MCP Inspector, the
#          clients the API tests run against /mcp, and the JavaScript A2A SDK (@a2a-js/sdk), the
#          second A2A client of tests/api/a2a.rs
# mcp-server-time (PyPI), and with it the official Python SDK on which
# tests/support/oauth_fixture.py runs, goes into the tests' one Python venv: see
# scripts/install-api-test-deps.sh.
#
# Idempotent: a stamp file records the pinned versions; when it matches, the script exits at once.
# Pass --force to reinstall.
set -euo pipefail

SERVER_EVERYTHING_VERSION="2026.8.31"
SERVER_FILESYSTEM_VERSION="2026.8.31"
CONFORMANCE_VERSION="0.1.16"
# Measured too: the next conformance release, with the 2026-07-28 client scenarios.
CONFORMANCE_NEXT_VERSION="0.2.0-alpha.12"
NODE22_VERSION="22.23.3"
TS_SDK_VERSION="1.32.2"
INSPECTOR_VERSION="2.12.0"
A2A_JS_SDK_VERSION="1.3.0"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${AGENTRY_MCP_CACHE:-$repo_root/.cache/mcp}"
stamp="$cache/.installed"
want="everything=$SERVER_EVERYTHING_VERSION filesystem=$SERVER_FILESYSTEM_VERSION conformance=$CONFORMANCE_VERSION conformance_next=$CONFORMANCE_NEXT_VERSION node=$NODE22_VERSION ts_sdk=$TS_SDK_VERSION inspector=$INSPECTOR_VERSION a2a_js_sdk=$A2A_JS_SDK_VERSION"

if [[ "${1:-}" != "--force" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "MCP test servers already installed in $cache"
    exit 0
fi

command -v npm >/dev/null || { echo "npm is required (apt-get install nodejs npm)" >&2; exit 1; }

mkdir -p "$cache/npm"
rm -f "$stamp"

echo "installing npm packages into $cache/npm"
# A package.json of our own keeps npm from walking up into the repository.
if [[ ! -f "$cache/npm/package.json" ]]; then
    echo '{"name":"agentry-mcp-test-servers","private":true}' > "$cache/npm/package.json"
fi
npm install --prefix "$cache/npm" --no-audit --no-fund --loglevel=error --save-exact \
    "@modelcontextprotocol/server-everything@$SERVER_EVERYTHING_VERSION" \
    "@modelcontextprotocol/server-filesystem@$SERVER_FILESYSTEM_VERSION" \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" \
    "node@$NODE22_VERSION"

echo "installing conformance $CONFORMANCE_NEXT_VERSION into $cache/conformance-next"
mkdir -p "$cache/conformance-next"
if [[ ! -f "$cache/conformance-next/package.json" ]]; then
    echo '{"name":"agentry-mcp-conformance-next","private":true}' > "$cache/conformance-next/package.json"
fi
npm install --prefix "$cache/conformance-next" --no-audit --no-fund --loglevel=error --save-exact \
    "@modelcontextprotocol/conformance@$CONFORMANCE_NEXT_VERSION"

echo "installing the TypeScript SDK, MCP Inspector and the A2A JavaScript SDK into $cache/clients"
mkdir -p "$cache/clients"
if [[ ! -f "$cache/clients/package.json" ]]; then
    echo '{"name":"agentry-mcp-test-clients","private":true}' > "$cache/clients/package.json"
fi
npm install --prefix "$cache/clients" --no-audit --no-fund --loglevel=error --save-exact \
    "@modelcontextprotocol/sdk@$TS_SDK_VERSION" \
    "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" \
    "@a2a-js/sdk@$A2A_JS_SDK_VERSION"

# Entry points the tests use (see services/mcp/tests/support/mod.rs).
test -f "$cache/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
test -f "$cache/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
test -x "$cache/npm/node_modules/node/bin/node"
test -f "$cache/conformance-next/node_modules/@modelcontextprotocol/conformance/dist/index.js"
test -f "$cache/clients/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js"
test -f "$cache/clients/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
test -f "$cache/clients/node_modules/@a2a-js/sdk/dist/client/index.js"

echo "$want" > "$stamp"
echo "MCP test servers installed in $cache"
