#!/usr/bin/env bash
# The local stack's demo as a test: runs `awsmp local up` (the same code as
# ./deploy.sh --local, in the debug build the tests already compiled) and fails
# unless it exits 0 after printing what was billed, `awsmp status` found the local
# deployment through its stack outputs, an over-bill was refunded once, and the
# subscription function (at License Updated) and the agreement reconciliation kept
# each buyer's rate card.
set -euo pipefail
cd "$(dirname "$0")/.."
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
start=$(date +%s)
# make test runs the Node.js usage API client too, and fails without Node.js.
if AWSMP_DEMO_NODE_CLIENT=require cargo run -q -p awsmp-cli --features local --bin awsmp -- local up 2>&1 | tee "$log"; then
  status=0
else
  status=$?
fi
elapsed=$(( $(date +%s) - start ))
if [ "$status" -eq 0 ] && grep -q '^billed records: [1-9]' "$log" &&
   grep -q '^Region us-east-1 (stack awsmp-main-awsmplocaldemo-local)' "$log" &&
   grep -q '^USD: refunded 0.0125, pending 0' "$log" &&
   grep -q 'GET /usage/events/evt-a1: counted into .* worth 0.105 USD (estimated' "$log" &&
   grep -q 'Usage Record Outcome (worth [0-9.]* USD together, estimated' "$log" &&
   grep -q 'buyer event Buyer Registered: .*(form fields companyName, contactEmail, names only)' "$log" &&
   grep -q 'rate cards kept when License Updated was handled: A agmt-localdemoa (requests 0.0025 USD, storage_gb 0.5 USD)' "$log" &&
   grep -q 'rate cards kept on the subscribers rows by the agreement reconciliation: A agmt-localdemoa (requests 0.0025 USD, storage_gb 0.5 USD)' "$log"; then
  echo "local demo: billed usage and passed its checks in ${elapsed}s"
  echo "1 passed, 0 failed"
else
  echo "local demo: FAILED (exit $status after ${elapsed}s); the output above says which check"
  echo "0 passed, 1 failed"
  exit 1
fi
