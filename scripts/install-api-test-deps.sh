#!/usr/bin/env bash
# Installs what the API, terminal-client and deployment tests need beyond Rust:
#   - a Python virtualenv shared by the checks (default <repo>/.cache/venv, override with
#     AGENTRY_VENV) with openapi-spec-validator (the OpenAPI document must validate),
#     schemathesis (generated requests against the running server's document), and for
#     tests/deploy pytest, PyYAML, helm-python-sdk (the Helm v4 Go SDK as a library: the chart is
#     rendered and linted offline, no helm binary) and kubernetes-validate (the Kubernetes JSON
#     schemas, offline), and openapi-python-client with what its generated clients import
#     (httpx, attrs, python-dateutil): a client generated from /openapi.json must run the
#     quickstart flow;
#     and openai (the official OpenAI SDK: the client of the
#     `/v1/chat/completions` test, tests/api/openai_compat.rs) and openai-agents (the OpenAI
#     Agents SDK, on the `openai` above: tests/api/openai_agents_client.py), and mcp-server-time (a reference
#     MCP server) with the official Python MCP SDK (`mcp`, with PyJWT and cryptography) it brings,
#     on which tests/support/oauth_fixture.py, probe_server.py and the Python MCP client tests run;
#     and a2a-sdk (the official A2A Python SDK: the client of tests/api/a2a_client.py) and
#     standardwebhooks (verifies the signed A2A push notifications it receives);
#   - tmux (the Debian package), which drives `agentry chat` in a real terminal, and
#     docker-compose (the Debian package), for `docker-compose config`;
#   - promtool, which checks a live server's /metrics (`promtool check metrics`): only the binary,
#     unpacked from Debian's `prometheus` package into <repo>/.cache/promtool (installing the
#     package would also start a Prometheus server), unless a promtool is on PATH.
# Add further Python test tools to PACKAGES: one venv for every Python suite (one install, one
# resolution of their shared dependencies).
#
# Idempotent: a stamp file records the pinned versions; when it matches, the venv is left alone.
# Pass --force to reinstall.
set -euo pipefail

PACKAGES=(
    "openapi-spec-validator==0.9.0"
    "schemathesis==4.32.5"
    "pytest==9.2.0"
    "PyYAML==6.0.4"
    "helm-python-sdk==0.2.2"
    "kubernetes-validate==1.37.0"
    "openapi-python-client==0.29.1"
    "python-dateutil==4.0.0"
    "openai==3.51.0"
    "openai-agents==0.24.0"
    "mcp-server-time==2026.10.19"
    "a2a-sdk==1.3.0"
    "standardwebhooks==1.1.0"
)

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${AGENTRY_VENV:-$repo_root/.cache/venv}"
stamp="$venv/.installed"
want="${PACKAGES[*]}"

for tool in tmux docker-compose; do
    command -v "$tool" >/dev/null && continue
    echo "installing $tool (Debian package)"
    if [[ $(id -u) -eq 0 ]]; then
        apt-get install -y -q "$tool" >/dev/null \
            || { apt-get update -q >/dev/null && apt-get install -y -q "$tool" >/dev/null; }
    else
        echo "$tool is required: apt-get install $tool" >&2
        exit 1
    fi
done

promtool="$repo_root/.cache/promtool/promtool"
if ! command -v promtool >/dev/null && [[ ! -x "$promtool" ]]; then
    echo "unpacking promtool from Debian's prometheus package into $(dirname "$promtool")"
    deb_dir="$(mktemp -d)"
    (cd "$deb_dir" && apt-get download -q prometheus >/dev/null 2>&1) \
        || { [[ $(id -u) -eq 0 ]] && apt-get update -q >/dev/null && (cd "$deb_dir" && apt-get download -q prometheus >/dev/null 2>&1); } \
        || { echo "promtool is required: apt-get download prometheus (or put promtool on PATH)" >&2; exit 1; }
    dpkg-deb -x "$deb_dir"/prometheus_*.deb "$deb_dir/root"
    mkdir -p "$(dirname "$promtool")"
    cp "$deb_dir/root/usr/bin/promtool" "$promtool"
    rm -rf "$deb_dir"
    "$promtool" --version >/dev/null
fi

if [[ "${1:-}" != "--force" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "API test dependencies already installed in $venv"
    exit 0
fi

command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 1; }
rm -f "$stamp"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "${PACKAGES[@]}"
"$venv/bin/openapi-spec-validator" --help >/dev/null
"$venv/bin/schemathesis" --version >/dev/null
"$venv/bin/openapi-python-client" --version >/dev/null
"$venv/bin/python" -c "import httpx, attrs, dateutil"
"$venv/bin/python" -c "import helm_python, kubernetes_validate, yaml, pytest, openai, agents; helm_python.helm_sdk_version()"
test -x "$venv/bin/mcp-server-time"
"$venv/bin/python" -c "import mcp.server.auth, jwt, cryptography, uvicorn, starlette"
"$venv/bin/python" -c "import a2a.client, a2a.types"

echo "$want" > "$stamp"
echo "API test dependencies installed in $venv"
