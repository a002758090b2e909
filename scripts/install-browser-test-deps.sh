#!/usr/bin/env bash
# Installs what the web console's browser test (tests/api/console.rs) needs beyond Rust:
#   - Debian's `chromium` (installed by scripts/test.sh next to bubblewrap, or here when run
#     alone as root), and
#   - `playwright-core` from npm, pinned, into <repo>/.cache/browser-test (override with
#     AGENTRY_BROWSER_TEST_CACHE). playwright-core drives the system chromium; it downloads no
#     browser of its own.
# Idempotent: nothing happens when the pinned version is already there.
set -euo pipefail

PLAYWRIGHT_CORE_VERSION="1.65.1"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${AGENTRY_BROWSER_TEST_CACHE:-$repo_root/.cache/browser-test}"

if ! command -v chromium >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]]; then
        echo "installing chromium (Debian package)"
        apt-get install -y -q chromium >/dev/null \
            || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
    else
        echo "chromium is required: sudo apt-get install chromium" >&2
        exit 1
    fi
fi

command -v node >/dev/null || { echo "Node.js is required (node)" >&2; exit 1; }
installed="$dir/node_modules/playwright-core/package.json"
if [[ -f "$installed" ]] && grep -q "\"version\": \"$PLAYWRIGHT_CORE_VERSION\"" "$installed"; then
    echo "playwright-core $PLAYWRIGHT_CORE_VERSION already installed in $dir"
    exit 0
fi
mkdir -p "$dir"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$dir" --no-audit --no-fund --no-save \
    "playwright-core@$PLAYWRIGHT_CORE_VERSION" >/dev/null
echo "playwright-core $PLAYWRIGHT_CORE_VERSION installed in $dir"
