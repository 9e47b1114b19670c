#!/usr/bin/env bash
# Checks that this machine has what `make test` or `./deploy.sh --local` needs, and
# says exactly what is missing and the command that installs it.
#
#   scripts/check-prereqs.sh [--for test|local] [--install]     (default: test)
#
#   local  (./deploy.sh --local)  Rust through rustup with the toolchain pinned in
#          rust-toolchain.toml, a C linker (cc), Python 3.11+ with venv and ensurepip
#          (Debian/Ubuntu: python3-venv) for the emulator's .venv
#   test   (make test)            all of that, plus make, Node.js 18+ and npm (the
#          browser test's driver), and Chromium at /usr/bin/chromium, or apt-get with
#          root or sudo to install it (scripts/ensure-chromium.sh does, on first use)
#
# Exits 0 when everything is there, 3 after listing every missing piece (not just the
# first). Install commands are for Debian/Ubuntu, the systems `make test` runs on; the
# rustup one works everywhere. Without --install nothing is installed. With --install
# (what `make test` and `./deploy.sh --local` pass), what can be installed here is,
# saying each command before it runs: the Debian packages with apt-get (as root or with
# sudo), rustup (from sh.rustup.rs, into ~/.cargo) and the pinned toolchain; then the
# checks run again and anything still missing is listed as above.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
purpose=test
install=0
while [ $# -gt 0 ]; do
  case "$1" in
    --for)
      case "${2:-}" in
        test | local) purpose=$2; shift ;;
        *) echo "check-prereqs: --for takes test or local, not '${2:-}'" >&2; exit 2 ;;
      esac
      ;;
    --install) install=1 ;;
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-prereqs: unknown argument '$1' (use --for test|local, --install)" >&2; exit 2 ;;
  esac
  shift
done
what="make test"
[ "$purpose" = test ] || what="./deploy.sh --local"

# Overridable for the tests (tests/deploy/run.sh) only.
chromium=${AWSMP_CHROMIUM:-/usr/bin/chromium}
python=${PYTHON:-python3}

# apt-get needs root: what to put before it (nothing as root, sudo, or "as root:").
if [ "$(id -u)" = 0 ]; then
  as_root=""
elif command -v sudo >/dev/null 2>&1; then
  as_root="sudo "
else
  as_root="as root: "
fi

missing=0
# What --install can do about the missing pieces: Debian packages, and the Rust steps.
apt_packages=""
rust_steps=""
apt_fix() { apt_packages="$apt_packages $*"; }
need() {
  # need WHAT WHY HOW...: one missing piece, why it is needed, how to get it.
  missing=$((missing + 1))
  printf 'check-prereqs: missing: %s\n    needed for: %s\n' "$1" "$2" >&2
  shift 2
  local how
  for how in "$@"; do printf '    get it:     %s\n' "$how" >&2; done
}
have() { command -v "$1" >/dev/null 2>&1; }

# ------------------------------------------------------------------ Rust
pinned=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$root/rust-toolchain.toml" 2>/dev/null | head -1)
[ -n "$pinned" ] || pinned=stable
rustup_install="curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --default-toolchain none, then open a new shell (or: . \"\$HOME/.cargo/env\")"
toolchain_install="rustup toolchain install $pinned --profile minimal --component rustfmt,clippy"
if have rustup; then
  if ! rustup toolchain list 2>/dev/null | grep -q "^$pinned-"; then
    need "Rust toolchain $pinned (pinned in rust-toolchain.toml)" "building and testing the workspace" "$toolchain_install"
    rust_steps=toolchain
  elif ! have cargo; then
    need "cargo on PATH (rustup is installed, its bin folder is not on PATH)" "building the workspace" \
      ". \"\$HOME/.cargo/env\"  (or add ~/.cargo/bin to PATH)"
  fi
elif have cargo; then
  # A distribution's cargo ignores rust-toolchain.toml: fine only if it is the pinned one.
  version=$(rustc --version 2>/dev/null | cut -d' ' -f2)
  if [ "$version" != "$pinned" ]; then
    need "rustup (cargo ${version:-?} is not rustup's, and rust-toolchain.toml pins $pinned)" \
      "building with the pinned toolchain" "$rustup_install" "then: $toolchain_install"
  fi
else
  need "Rust (rustup and cargo)" "building the workspace" "$rustup_install" "then: $toolchain_install"
  rust_steps="rustup toolchain"
  have curl || apt_fix curl
fi
if ! have cc; then
  need "a C compiler and linker (cc)" "linking Rust binaries and build scripts" "${as_root}apt-get install -y build-essential"
  apt_fix build-essential
fi

# ------------------------------------------------------------------ Python
if ! have "$python"; then
  need "Python 3.11+ ($python)" "the emulators' .venv (moto), cfn-lint and deploy.sh's samconfig.toml reader" \
    "${as_root}apt-get install -y python3 python3-venv"
  apt_fix python3 python3-venv
else
  pyversion=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo "?")
  if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    need "Python 3.11+ ($python is $pyversion)" "tomllib (samconfig.toml, the template checks) and the pinned moto" \
      "${as_root}apt-get install -y python3 python3-venv  (Debian 12 / Ubuntu 24.04 ship 3.11+), or PYTHON=/path/to/python3.11"
  elif ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    need "Python's venv with ensurepip (Debian/Ubuntu package python3-venv)" \
      "creating .venv; without it python3 -m venv fails and leaves a venv without pip" \
      "${as_root}apt-get install -y python3-venv  (or python$pyversion-venv)"
    apt_fix python3-venv
  fi
fi

# ------------------------------------------------------------------ make test only
if [ "$purpose" = test ]; then
  if ! have make; then
    need "make" "running make test" "${as_root}apt-get install -y make"
    apt_fix make
  fi
  if ! have node || ! have npm; then
    need "Node.js 18+ and npm" "the registration page's browser test (npm ci in web/test)" \
      "${as_root}apt-get install -y nodejs npm"
    apt_fix nodejs npm
  else
    node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
    if [ "${node_major:-0}" -lt 18 ] 2>/dev/null; then
      need "Node.js 18+ (node is $(node --version 2>/dev/null || echo '?'))" "the browser test's driver (playwright-core)" \
        "a newer Node.js: https://nodejs.org/en/download (or your distribution's nodejs 18+)"
    fi
  fi
  if [ ! -x "$chromium" ]; then
    if ! have apt-get; then
      need "Chromium at $chromium" "the registration page's browser test" "install Chromium so that $chromium runs it"
    elif [ "$as_root" = "as root: " ]; then
      need "Chromium at $chromium (make test installs it with apt-get, which needs root; you are not root and there is no sudo)" \
        "the registration page's browser test" "as root: apt-get install -y chromium fonts-liberation"
    fi
  fi
fi

# `make test` is the second of the two commands: the first installs make with the rest.
if [ "$purpose" = local ] && [ "$install" = 1 ] && ! have make && have apt-get && [ "$as_root" != "as root: " ]; then
  apt_fix make
fi

if [ "$install" = 1 ] && { [ "$missing" -gt 0 ] || [ -n "$apt_packages" ]; }; then
  installed=0
  if [ -n "$apt_packages" ]; then
    if ! have apt-get; then
      echo "check-prereqs: --install: no apt-get here; install the pieces above yourself" >&2
    elif [ "$as_root" = "as root: " ]; then
      echo "check-prereqs: --install: apt-get needs root, and you are not root and there is no sudo; install the pieces above as root" >&2
    else
      # shellcheck disable=SC2086 # one word per package
      set -- $apt_packages
      echo "check-prereqs: installing: ${as_root}apt-get install -y $*" >&2
      ${as_root}apt-get update -qq >&2 || echo "check-prereqs: apt-get update failed; trying the install anyway" >&2
      ${as_root}apt-get install -y -qq "$@" >&2 && installed=1
    fi
  fi
  case " $rust_steps " in
    *" rustup "*)
      if have curl; then
        echo "check-prereqs: installing: rustup (curl https://sh.rustup.rs | sh -s -- -y --default-toolchain none)" >&2
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --default-toolchain none >&2 && installed=1
      fi
      export PATH="$HOME/.cargo/bin:$PATH"
      ;;
  esac
  case " $rust_steps " in
    *" toolchain "*)
      if have rustup; then
        echo "check-prereqs: installing: $toolchain_install" >&2
        $toolchain_install >&2 && installed=1
      fi
      ;;
  esac
  if [ "$installed" = 1 ]; then
    echo "check-prereqs: checking again" >&2
    exec bash "$0" --for "$purpose"
  fi
fi

if [ "$missing" -gt 0 ]; then
  printf 'check-prereqs: %d prerequisite(s) of %s missing (see above); install them and re-run.\n' "$missing" "$what" >&2
  exit 3
fi
echo "check-prereqs: everything $what needs is here"
