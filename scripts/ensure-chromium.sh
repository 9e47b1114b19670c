#!/usr/bin/env bash
# Makes sure a headless Chromium is at /usr/bin/chromium for the browser test.
#
#   scripts/ensure-chromium.sh
#
# Does nothing when /usr/bin/chromium exists. Otherwise installs Debian's `chromium`
# package with apt-get (root, as on CI). An apt failure is reported clearly and the
# script exits non-zero, so the caller's browser test fails loudly instead of being
# skipped without a word.
set -euo pipefail

chromium=/usr/bin/chromium
if [[ -x "$chromium" ]]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: $chromium is missing and apt-get is not available; install Chromium by hand" >&2
  exit 1
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "ensure-chromium: $chromium is missing and installing it needs root (apt-get install -y chromium)" >&2
    exit 1
  fi
fi

echo "ensure-chromium: installing Debian package chromium"
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get update -qq; then
  echo "ensure-chromium: 'apt-get update' failed; cannot install chromium (network or apt sources?)" >&2
  exit 1
fi
if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null; then
  echo "ensure-chromium: 'apt-get install -y chromium' failed; the browser test needs $chromium" >&2
  exit 1
fi
if [[ ! -x "$chromium" ]]; then
  echo "ensure-chromium: chromium installed but $chromium is still missing" >&2
  exit 1
fi
echo "ensure-chromium: $("$chromium" --version 2>/dev/null || echo chromium) ready"
