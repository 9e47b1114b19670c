#!/usr/bin/env bash
# Creates (or refreshes) a project-local Python venv from a pinned requirements file.
#
#   scripts/ensure-venv.sh VENV_DIR REQUIREMENTS_FILE
#
# Idempotent and fast when nothing changed: the venv keeps a stamp holding the
# sha256 of the requirements file it was built from; a matching stamp means done.
# A changed requirements file reinstalls into the same venv. Used by `make venv`,
# `make sam-venv` and `./deploy.sh --local`, so nothing is ever installed by hand.
set -euo pipefail

venv=${1:?usage: ensure-venv.sh VENV_DIR REQUIREMENTS_FILE}
requirements=${2:?usage: ensure-venv.sh VENV_DIR REQUIREMENTS_FILE}
python=${PYTHON:-python3}

if [[ ! -f "$requirements" ]]; then
  echo "ensure-venv: requirements file '$requirements' not found" >&2
  exit 1
fi

want=$(sha256sum "$requirements" | cut -d' ' -f1)
stamp="$venv/.requirements.sha256"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi

if ! command -v "$python" >/dev/null 2>&1; then
  echo "ensure-venv: '$python' not found; install Python 3.10+ (Debian: apt-get install -y python3 python3-venv)" >&2
  exit 1
fi

# A venv without a working python or pip is rebuilt: `python3 -m venv` without Debian's
# python3-venv fails half-way and leaves one without pip, which no install can fix.
# Only a folder that is a venv (pyvenv.cfg) or empty is ever removed.
if [[ -e "$venv" ]] && { [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; }; then
  if [[ -f "$venv/pyvenv.cfg" ]] || [[ -d "$venv" && -z "$(ls -A "$venv")" ]]; then
    echo "ensure-venv: $venv has no working python or pip (left by a failed python3 -m venv?); rebuilding it"
    rm -rf "$venv"
  else
    echo "ensure-venv: $venv exists but is not a Python venv; move it away or choose another folder" >&2
    exit 1
  fi
fi

if [[ ! -x "$venv/bin/python" ]]; then
  echo "ensure-venv: creating $venv"
  if ! "$python" -m venv "$venv"; then
    # Do not leave the half-made venv for the next run to trip over.
    rm -rf "$venv"
    echo "ensure-venv: '$python -m venv $venv' failed (see above). On Debian/Ubuntu the venv module is a" >&2
    echo "  package of its own: apt-get install -y python3-venv (as root), then re-run." >&2
    exit 1
  fi
fi
# Keep the venv out of git wherever it lives (Python >= 3.13 does this by itself).
[[ -f "$venv/.gitignore" ]] || echo '*' >"$venv/.gitignore"

# A requirements file with hashes (requirements-dev.txt, made by `make requirements-lock`)
# is installed in pip's hash-checking mode: every package, dependencies included, must be
# pinned in it, and every file pip downloads must match one of its sha256s. Files without
# any hash (tools/requirements-sam.txt) install as before.
hash_mode=
if grep -q -- '--hash=sha256:' "$requirements"; then
  hash_mode=--require-hashes
fi
echo "ensure-venv: installing $requirements into $venv${hash_mode:+ ($hash_mode)}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check ${hash_mode:+"$hash_mode"} -r "$requirements"
# The stamp is written last, so an interrupted install is redone next time.
echo "$want" >"$stamp"
echo "ensure-venv: $venv ready"
