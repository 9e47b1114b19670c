#!/usr/bin/env bash
# Property-based test of the usage API from its OpenAPI document (docs/usage-api.openapi.yaml),
# against the local stack: starts `awsmp local up --serve`, waits until its demo is done,
# then runs tests/usage-api/test_property.py (schemathesis under pytest, every request
# signed with SigV4): no input gets a 5xx or an answer outside the contract, and no event
# answered `rejected` left an item in the usage table. `make usage-api-test` runs it.
#
#   USAGE_API_MAX_EXAMPLES   generated examples per operation (default 200)
#   USAGE_API_START_TIMEOUT  seconds to wait for the local stack (default 300)
#   AWSMP_BIN                an awsmp binary to use instead of building the debug one
#
# Extra arguments go to pytest (e.g. --hypothesis-seed=1 to replay a run).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=${AWSMP_VENV:-$root/.venv}
start_timeout=${USAGE_API_START_TIMEOUT:-300}
export USAGE_API_MAX_EXAMPLES=${USAGE_API_MAX_EXAMPLES:-200}

if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import schemathesis' 2>/dev/null; then
  echo "usage-api-test: schemathesis is not installed in $venv: run make venv" >&2
  exit 1
fi
if [[ -z "${AWSMP_BIN:-}" ]]; then
  cargo build -q -p awsmp-cli --features local --bin awsmp
  AWSMP_BIN=$root/target/debug/awsmp
fi

log=$(mktemp)
stack_pid=
stop_stack_and_remove_log() {
  if [[ -n "$stack_pid" ]] && kill -0 "$stack_pid" 2>/dev/null; then
    kill "$stack_pid" 2>/dev/null || true
    wait "$stack_pid" 2>/dev/null || true
  fi
  rm -f "$log"
}
trap stop_stack_and_remove_log EXIT
trap 'exit 130' INT TERM

started=$(date +%s)
"$AWSMP_BIN" local up --serve >"$log" 2>&1 &
stack_pid=$!

# The endpoints are printed first; `serving;` once the demo's own requests are done (the
# test compares the usage table before and after its requests, so the demo must be over).
while ! grep -q '^serving;' "$log"; do
  if ! kill -0 "$stack_pid" 2>/dev/null; then
    wait "$stack_pid" && status=0 || status=$?
    echo "usage-api-test: awsmp local up --serve exited (status $status) before serving; its output:" >&2
    cat "$log" >&2
    exit 1
  fi
  if (( $(date +%s) - started > start_timeout )); then
    echo "usage-api-test: the local stack was not serving after ${start_timeout}s (USAGE_API_START_TIMEOUT); its output:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 1
done

field() { sed -nE "s/^$1:[[:space:]]+([^[:space:]]+).*/\\1/p" "$log" | head -1; }
api_url=$(field 'usage API')
emulator=$(field 'emulator')
table=$(field 'usage table')
if [[ "$api_url" != */usage/events || -z "$emulator" || -z "$table" ]]; then
  echo "usage-api-test: could not read the usage API URL, emulator and usage table from awsmp local up:" >&2
  cat "$log" >&2
  exit 1
fi
echo "usage-api-test: local stack serving after $(( $(date +%s) - started ))s; usage API ${api_url}"

# Hypothesis keeps its caches in the venv, not in the work tree; no example database
# (the test turns it off), no bytecode beside the test.
export HYPOTHESIS_STORAGE_DIRECTORY=$venv/.hypothesis PYTHONDONTWRITEBYTECODE=1
export USAGE_API_BASE_URL=${api_url%/usage/events}
export AWSMP_EMULATOR_URL=$emulator
export AWSMP_USAGE_TABLE=$table
test_started=$(date +%s)
if "$venv/bin/python" -m pytest -p no:cacheprovider --rootdir=tests/usage-api -q \
    tests/usage-api/test_property.py "$@"; then
  echo "usage-api-test: passed in $(( $(date +%s) - test_started ))s (local stack start not counted)"
else
  status=$?
  echo "usage-api-test: FAILED (pytest exit $status); the failing example is above."
  if grep -qE '^[0-9T:.-]+Z +ERROR ' "$log"; then
    echo "The local stack's errors (last 20):"
    grep -E '^[0-9T:.-]+Z +ERROR ' "$log" | tail -n 20
  fi
  exit 1
fi
