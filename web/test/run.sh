#!/usr/bin/env bash
# `make browser-test`: the registration page in headless Chromium.
#
#   web/test/run.sh
#
# Makes sure Chromium (scripts/ensure-chromium.sh) and the pinned npm driver
# (playwright-core, from package-lock.json) are installed, then runs the Rust test
# that serves the page and the register endpoint locally and drives the browser
# (crates/functions/register/tests/browser.rs). Screenshots go to test-artifacts/browser/.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "browser-test: node and npm are required (Node.js >= 18): apt-get install -y nodejs npm" >&2
  exit 1
fi
"$root/scripts/ensure-chromium.sh"

# npm ci installs exactly package-lock.json; skipped when the pinned version is there.
pinned=$(cd "$here" && node -p "require('./package.json').dependencies['playwright-core']")
installed=$(cd "$here" && node -p "require('./node_modules/playwright-core/package.json').version" 2>/dev/null || true)
if [[ "$installed" != "$pinned" ]]; then
  echo "browser-test: installing the npm driver (npm ci in web/test)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

cd "$root"
echo "+ cargo test -p awsmp-register --features browser-test --test browser"
cargo test -p awsmp-register --features browser-test --test browser -- --nocapture
echo "browser-test: screenshots in test-artifacts/browser/"
