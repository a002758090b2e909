#!/usr/bin/env bash
# The whole test suite, from a fresh clone: make sure PostgreSQL, MariaDB/MySQL and Redis answer
# on their default local ports (starting them when installed but stopped), create the test
# databases, install the MCP reference servers the tests use, then run formatting, lints and
# every test on every backend, then the deployment files.
#
#   scripts/test.sh            # everything
#   scripts/test.sh -p agentry-store   # extra args go to the test runner
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/services.sh
. scripts/services.sh

# Seconds per step, printed at the end (also when a step fails): docs/ci.md records them.
step_names=(); step_secs=(); step_start=$SECONDS
step() { # name: ends the running step, starts this one
  step_secs+=($(( SECONDS - step_start ))); step_names+=("$1"); step_start=$SECONDS; say "$1"
}
breakdown() {
  step_secs+=($(( SECONDS - step_start )))
  printf 'test.sh: seconds per step\n' >&2
  printf '  %5d  %s\n' "${step_secs[0]}" "services, databases, system packages" >&2
  local i
  for i in "${!step_names[@]}"; do
    printf '  %5d  %s\n' "${step_secs[$((i + 1))]}" "${step_names[$i]}" >&2
  done
  printf '  %5d  total\n' "$SECONDS" >&2
}
trap breakdown EXIT

# A from-scratch build (CI's clean clone) is faster without incremental compilation, whose
# caches only pay off on the next build of a changed tree.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

if [ -z "${AGENTRY_TEST_POSTGRES_URL:-}" ]; then
  ensure_postgres
  ensure_postgres_room
  psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'agentry_test'" | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE agentry_test" >/dev/null
fi
if [ -z "${AGENTRY_TEST_MYSQL_URL:-}" ]; then
  ensure_mysql
  mysql -h 127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS agentry_test CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
fi
ensure_redis

# The sandbox tests run real bubblewrap (docs/security.md); Landlock needs only the kernel.
if ! command -v bwrap >/dev/null 2>&1; then
  say "installing bubblewrap (the tenant sandbox)"
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq bubblewrap >/dev/null
fi

# The web console's browser test drives Debian's chromium (tests/api/console.rs).
if ! command -v chromium >/dev/null 2>&1; then
  say "installing chromium (the web console's browser test)"
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq chromium >/dev/null
fi

if [ -x scripts/install-mcp-test-servers.sh ]; then
  step "installing the MCP reference servers used by the tests"
  scripts/install-mcp-test-servers.sh
fi

step "installing the API, terminal-client and deployment checks' dependencies (a Python venv, tmux, docker-compose)"
scripts/install-api-test-deps.sh

step "installing the browser test's playwright-core (.cache/browser-test)"
scripts/install-browser-test-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check
# Clippy's lints (warnings denied) run inside the test build below, as `cargo clippy` runs them:
# clippy-driver wraps the compiler of the workspace's own crates. One compilation of the tree
# instead of two — `cargo clippy` first checked every dependency and crate, and the test build
# then compiled them all again (docs/ci.md). Exported, so that the tests and the deployment
# step reuse that build instead of compiling without the wrapper.
if [ -z "${RUSTC_WORKSPACE_WRAPPER:-}" ]; then
  RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver)" \
    || { echo "test.sh: clippy-driver not found (rustup component add clippy)" >&2; exit 1; }
  export RUSTC_WORKSPACE_WRAPPER
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi

export CI="${CI:-true}"   # every backend runs; nothing is skipped
# One test more than cores: many tests wait on servers and databases rather than compute
# (measured on 2 cores: 633 s with 2 at a time, 549 s with 3).
export NEXTEST_TEST_THREADS="${NEXTEST_TEST_THREADS:-$(( $(nproc) + 1 ))}"
if cargo nextest --version >/dev/null 2>&1; then
  step "test build, with clippy's lints"
  cargo nextest run --workspace --locked --no-run "$@"
  step "tests"
  cargo nextest run --workspace --locked --no-fail-fast "$@"
else
  step "tests (build with clippy's lints, and run)"
  cargo test --workspace --locked --no-fail-fast "$@"
fi

# The Dockerfile, docker-compose.yml and the Helm chart, checked offline (tests/deploy); they ask
# the binary for its configuration keys.
step "deployment files (tests/deploy)"
# The test build above made the binary (the integration tests run it). A `cargo build` of its
# own resolves features without the dev-dependencies and rebuilds much of the tree (~2.5 min of
# CI's 30), so it runs only when the tests were narrowed by arguments or the binary is missing.
if [ $# -gt 0 ] || [ ! -x "${CARGO_TARGET_DIR:-target}/debug/agentry" ]; then
  cargo build --locked -p agentry-gateway --bin agentry
fi
AGENTRY_BIN="${CARGO_TARGET_DIR:-target}/debug/agentry" \
  "${AGENTRY_VENV:-.cache/venv}/bin/pytest" -q -p no:cacheprovider tests/deploy
