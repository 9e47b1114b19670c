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
#   --target TRIPLE       build for TRIPLE instead of this machine, e.g.
#                         aarch64-unknown-linux-gnu, what the templates deploy (see below)
#   --build-std           build the standard library from rust-src even where a prebuilt
#                         one exists: a build for the host this way shows how much a
#                         -Zbuild-std build differs from one on the prebuilt library
#   --skip-build          measure what the profile's folder already holds
#   -h, --help            this text
#
# Environment: NICE_LEVEL=15 (the build runs under nice), PYTHON=.venv/bin/python (the
# Python 3.11 with boto3), MIN_FREE_GB=10 (refuse to build with less free disk).
#
# The build is `cargo build --release --bin NAME...` at the workspace root, no `-p`:
# the same package set, so the same feature unification, as `sam build` gets from
# `cargo lambda build --release --bin NAME` at CodeUri ./ (scripts/sam-build.sh), for
# this machine's target unless --target names another. The full-LTO release build takes several minutes on two
# cores; the init runs about a minute. Nothing reaches the network: cargo runs offline
# and the functions' SDK endpoints point at a closed local port.
#
# Another target (--target): the linker is CARGO_TARGET_<TRIPLE>_LINKER, or else the
# cross gcc named for the triple (Debian's gcc-aarch64-linux-gnu and
# libc6-dev-arm64-cross for aarch64), which ring's C build finds too. Without that
# target's prebuilt standard library (`rustup target add`), the standard library is
# built from the toolchain's rust-src (`rustup component add rust-src`, or the same
# version's source linked at $(rustc --print sysroot)/lib/rustlib/src/rust/library)
# with -Zbuild-std, so it is compiled with the release profile too: a few percent
# smaller than a build on the prebuilt library (docs/performance.md measures by how
# much). Init then runs under qemu user-mode emulation (qemu-aarch64-static, Debian's
# qemu-user-static): it shows each bootstrap starts and reaches its first /next; its
# times are the emulator's, not arm64's, and the Python rows are left out.
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
target=
build_std=false
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
    --target)
      [[ $# -ge 2 ]] || die "--target needs a target triple"
      target=$2
      shift 2
      ;;
    --build-std) build_std=true; shift ;;
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
host=$(rustc -vV | sed -n 's/^host: //p')
sysroot=$(rustc --print sysroot)
target_args=()
build_env=()
run_args=()
[[ -n "$target" ]] || target=$host
if [[ "$target" == "$host" && "$build_std" == false ]]; then
  bin_dir="$target_dir/$profile_dir"
else
  target_args=(--target "$target")
  bin_dir="$target_dir/$target/$profile_dir"
  if [[ "$target" != "$host" && "$build" == true ]]; then
    env_triple=$(tr 'a-z-' 'A-Z_' <<<"$target")
    linker_var="CARGO_TARGET_${env_triple}_LINKER"
    if [[ -z "${!linker_var:-}" ]]; then
      cross_gcc="$(cut -d- -f1 <<<"$target")-linux-gnu-gcc"
      command -v "$cross_gcc" >/dev/null ||
        die "no linker for $target: set $linker_var, or install $cross_gcc (Debian: gcc-$(cut -d- -f1 <<<"$target")-linux-gnu)"
      build_env+=("$linker_var=$cross_gcc")
    fi
  fi
  if [[ "$build" == true && ( "$build_std" == true || ! -d "$sysroot/lib/rustlib/$target/lib" ) ]]; then
    library="$sysroot/lib/rustlib/src/rust/library"
    [[ -f "$library/std/Cargo.toml" && -f "$library/Cargo.lock" ]] ||
      die "no standard library for $target and no rust-src at $library: rustup target add $target, or rustup component add rust-src, or link the library/ folder of rustc $(rustc -vV | sed -n 's/^release: //p')'s source there"
    target_args+=(-Zbuild-std=std,panic_unwind)
    build_env+=(RUSTC_BOOTSTRAP=1)
    std_note="standard library built from rust-src with this profile (-Zbuild-std)"
  fi
  arch=$(cut -d- -f1 <<<"$target")
  if [[ "$arch" != "$(cut -d- -f1 <<<"$host")" ]]; then
    qemu=$(command -v "qemu-$arch-static" || command -v "qemu-$arch" || true)
    [[ -n "$qemu" ]] || die "no qemu-$arch-static to start $target binaries (Debian: qemu-user-static)"
    sysroot_dir="/usr/$arch-linux-gnu"
    [[ -d "$sysroot_dir" ]] || die "no $sysroot_dir for the emulator's dynamic loader (Debian: libc6-$arch-cross)"
    run_args=(--run-with "$qemu -L $sysroot_dir")
  fi
fi

profile_args=(--profile "$profile")
[[ "$profile" == release ]] && profile_args=(--release)
bin_args=()
for bin in "${binaries[@]}"; do bin_args+=(--bin "$bin"); done
build_command="${build_env[*]:+${build_env[*]} }cargo build ${profile_args[*]}${target_args[*]:+ ${target_args[*]}}${config_args[*]:+ ${config_args[*]}} ${bin_args[*]}"

if [[ "$build" == true ]]; then
  mkdir -p "$target_dir" # a first build's folder: df needs it to exist
  free_gb=$(df -P -BG "$target_dir" 2>/dev/null | awk 'NR == 2 { sub("G", "", $4); print $4 }' || true)
  if [[ -n "$free_gb" && "$free_gb" -lt "$min_free_gb" ]]; then
    die "only ${free_gb} GB free under $target_dir (MIN_FREE_GB=$min_free_gb); not building"
  fi
  say "building ${#binaries[@]} bootstraps for $target in one invocation (nice -n $nice_level):"
  say "  $build_command"
  start=$(now)
  env CARGO_NET_OFFLINE=true "${build_env[@]}" nice -n "$nice_level" cargo build \
    "${profile_args[@]}" "${target_args[@]}" "${config_args[@]}" "${bin_args[@]}"
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
label="profile $profile: ${profile_text:-(not in Cargo.toml)}${config_args[*]:+; ${config_args[*]}}${std_note:+; $std_note}"

say "measuring sizes and init times ($runs runs per function)"
python3 "$repo_root/scripts/lambda_artifacts.py" --bin-dir "$bin_dir" --target "$target" \
  --runs "$runs" --python "$python" --label "$label" "${run_args[@]}" \
  $(printf -- '--template %s ' "${templates[@]}")
