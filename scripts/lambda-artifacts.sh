#!/usr/bin/env bash
# Builds every Lambda bootstrap the SAM templates name, in one cargo invocation, and
# prints one table: each binary's size and zipped size against the 8 MB goal, and its
# init time (exec to the first GET /runtime/invocation/next on a local Runtime API)
# against the 30 ms goal, beside a Python 3.11 handler that imports boto3 and creates a
# DynamoDB client, measured the same way in the same run. docs/performance.md ("Lambda
# artifacts") has the figures and what they mean.
#
#   scripts/lambda-artifacts.sh [options]
#
#   --runs N              starts per function after one warm-up round (default 20)
#   --profile NAME        cargo profile (default release, what `sam build` ships)
#   --config KEY=VALUE    passed to cargo as --config (repeatable), e.g. to try a profile:
#                         --profile lambda-z --config 'profile.lambda-z.inherits="release"'
#                         --config 'profile.lambda-z.opt-level="z"'
#   --skip-build          measure what the profile's folder already holds
#   -h, --help            this text
#
# Environment: NICE_LEVEL=15 (the build runs under nice), PYTHON=.venv/bin/python (the
# Python 3.11 with boto3), MIN_FREE_GB=10 (refuse to build with less free disk).
#
# The build is `cargo build --release --bin NAME...` at the workspace root, no `-p`:
# the same package set, so the same feature unification, as `sam build` gets from
# `cargo lambda build --release --bin NAME` at CodeUri ./ (scripts/sam-build.sh), only
# for this machine's target. The full-LTO release build takes several minutes on two
# cores; the init runs about a minute. Nothing reaches the network: cargo runs offline
# and the functions' SDK endpoints point at a closed local port.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() {
  echo "lambda-artifacts: $*" >&2
  exit 1
}
say() { echo "lambda-artifacts: $*"; }

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nice_level=${NICE_LEVEL:-15}
python=${PYTHON:-$repo_root/.venv/bin/python}
min_free_gb=${MIN_FREE_GB:-10}
runs=20
profile=release
build=true
config_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--runs needs a positive number"
      runs=$2
      shift 2
      ;;
    --profile)
      [[ $# -ge 2 ]] || die "--profile needs a name"
      profile=$2
      shift 2
      ;;
    --config)
      [[ $# -ge 2 ]] || die "--config needs KEY=VALUE"
      config_args+=(--config "$2")
      shift 2
      ;;
    --skip-build) build=false; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

cd "$repo_root"
templates=(template-events.yaml template-main.yaml)
for template in "${templates[@]}"; do
  [[ -f "$template" ]] || die "template '$template' not found in $repo_root"
done
[[ -x "$python" ]] || die "no Python at $python (make venv, or set PYTHON)"
"$python" -c 'import sys, boto3; assert sys.version_info[:2] == (3, 11), sys.version' ||
  die "$python must be Python 3.11 with boto3"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { s = b - a; printf "%dm%04.1fs", s / 60, s - 60 * int(s / 60) }'; }

# The binaries the templates build (Metadata.BuildProperties.Binary), in order, each a
# bin target of this workspace.
mapfile -t binaries < <(awk '$1 == "Binary:" && !seen[$2]++ { print $2 }' "${templates[@]}")
[[ ${#binaries[@]} -gt 0 ]] || die "no 'Binary:' build property in ${templates[*]}"
metadata=$(cargo metadata --no-deps --format-version 1 --offline "${config_args[@]}")
mapfile -t workspace_bins < <(python3 -c 'import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "bin" in t["kind"]:
            print(t["name"])' <<<"$metadata")
for bin in "${binaries[@]}"; do
  printf '%s\n' "${workspace_bins[@]}" | grep -qx -- "$bin" ||
    die "the templates name '$bin', which no workspace crate builds"
done
target_dir=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' <<<"$metadata")
case "$profile" in
  dev | test) profile_dir=debug ;;
  release | bench) profile_dir=release ;;
  *) profile_dir=$profile ;;
esac
bin_dir="$target_dir/$profile_dir"
host=$(rustc -vV | sed -n 's/^host: //p')

profile_args=(--profile "$profile")
[[ "$profile" == release ]] && profile_args=(--release)
bin_args=()
for bin in "${binaries[@]}"; do bin_args+=(--bin "$bin"); done
build_command="cargo build ${profile_args[*]}${config_args[*]:+ ${config_args[*]}} ${bin_args[*]}"

if [[ "$build" == true ]]; then
  free_gb=$(df -P -BG "$target_dir" 2>/dev/null | awk 'NR == 2 { sub("G", "", $4); print $4 }')
  if [[ -n "$free_gb" && "$free_gb" -lt "$min_free_gb" ]]; then
    die "only ${free_gb} GB free under $target_dir (MIN_FREE_GB=$min_free_gb); not building"
  fi
  say "building ${#binaries[@]} bootstraps for $host in one invocation (nice -n $nice_level):"
  say "  $build_command"
  start=$(now)
  CARGO_NET_OFFLINE=true nice -n "$nice_level" cargo build "${profile_args[@]}" \
    "${config_args[@]}" "${bin_args[@]}"
  end=$(now)
  say "built in $(elapsed "$start" "$end")"
fi
for bin in "${binaries[@]}"; do
  [[ -f "$bin_dir/$bin" ]] || die "$bin_dir/$bin is not built (run without --skip-build)"
done

# What the binaries were built with, printed above the table.
profile_text=$(awk -v want="[profile.$profile]" '
  $0 == want { on = 1; next }
  /^\[/ { on = 0 }
  on && NF && $1 !~ /^#/ { printf "%s%s", sep, $0; sep = ", " }' Cargo.toml)
label="profile $profile: ${profile_text:-(not in Cargo.toml)}${config_args[*]:+; ${config_args[*]}}"

say "measuring sizes and init times ($runs runs per function)"
python3 "$repo_root/scripts/lambda_artifacts.py" --bin-dir "$bin_dir" --target "$host" \
  --runs "$runs" --python "$python" --label "$label" \
  $(printf -- '--template %s ' "${templates[@]}")
