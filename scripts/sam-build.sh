#!/usr/bin/env bash
# Builds the Lambda bootstraps with cargo-lambda and runs `sam build` on the SAM
# templates, offline, outside the repository's own target/ and .aws-sam/, and prints
# each bootstrap's size and each step's time. docs/build.md has the measured figures.
#
#   scripts/sam-build.sh [options] [TEMPLATE...]      (default: template-events.yaml template-main.yaml)
#
#   --arch arm64|x86-64   target (default arm64, as the templates say). When the aarch64
#                         standard library cannot be installed, a default arm64 run falls
#                         back to x86-64 bootstraps (for sizes) and skips `sam build`,
#                         whose templates ask for arm64; an explicit --arch arm64 fails.
#   --skip-cargo          skip step 1 (per-binary `cargo lambda build`)
#   --skip-sam            skip step 2 (`sam build`)
#   --online              do not cut the network for the build steps
#   -h, --help            this text
#
# Everything it writes goes under these (environment variables override them):
#   SAM_VENV=/tmp/sam-venv                 aws-sam-cli, cargo-lambda, ziglang (tools/requirements-sam.txt, hash-checked)
#   CARGO_TARGET_DIR=/tmp/awsmp-lambda-target   never the repo's target/: no wait on (or hold of) its lock
#   SAM_BUILD_ROOT=/tmp/awsmp-sam-build    one <template-stem>/build dir per template, plus summary.tsv
#   SAM_SCRATCH_HOME=/tmp/awsmp-sam-home   HOME for sam (it writes ~/.aws-sam)
#   NICE_LEVEL=19                          builds run under `nice -n NICE_LEVEL`
#   SAM_CONFIG_ENV=default                 samconfig.toml environment (build parameters)
#
# Offline: the only network steps come first (venv on first use, `rustup target add`
# when the target is missing, `cargo fetch`). The build steps then run with
# CARGO_NET_OFFLINE=true and, when `unshare -n` works (root), in a network namespace
# that has no network at all, which is the proof that they need none.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() {
  echo "sam-build: $*" >&2
  exit 1
}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sam_venv=${SAM_VENV:-/tmp/sam-venv}
target_dir=${CARGO_TARGET_DIR:-/tmp/awsmp-lambda-target}
build_root=${SAM_BUILD_ROOT:-/tmp/awsmp-sam-build}
sam_home=${SAM_SCRATCH_HOME:-/tmp/awsmp-sam-home}
nice_level=${NICE_LEVEL:-19}
config_env=${SAM_CONFIG_ENV:-default}
sam_requirements="$repo_root/tools/requirements-sam.txt"

arch=arm64
arch_explicit=false
run_cargo=true
run_sam=true
isolate_network=true
templates=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch)
      [[ $# -ge 2 ]] || die "--arch needs a value: arm64 or x86-64"
      arch=$2
      arch_explicit=true
      shift 2
      ;;
    --skip-cargo) run_cargo=false; shift ;;
    --skip-sam) run_sam=false; shift ;;
    --online) isolate_network=false; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) templates+=("$1"); shift ;;
  esac
done
case "$arch" in
  arm64 | x86-64) ;;
  *) die "--arch must be arm64 or x86-64, not '$arch'" ;;
esac
[[ ${#templates[@]} -gt 0 ]] || templates=(template-events.yaml template-main.yaml)

# Refuse a target dir inside the repository: it would share (and lock) what the other
# builds in this workspace use, or land in git.
case "$(realpath -m "$target_dir")/" in
  "$repo_root"/*) die "CARGO_TARGET_DIR ($target_dir) is inside the repository; use a folder outside it" ;;
esac
case "$(realpath -m "$build_root")/" in
  "$repo_root"/*) die "SAM_BUILD_ROOT ($build_root) is inside the repository; use a folder outside it" ;;
esac

cd "$repo_root"
for template in "${templates[@]}"; do
  [[ -f "$template" ]] || die "template '$template' not found in $repo_root"
done

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { s = b - a; printf "%dm%04.1fs", s / 60, s - 60 * int(s / 60) }'; }

# ---------------------------------------------------------------- tools (network)
venv_stamp="$sam_venv/.awsmp-sam-build.stamp"
want_stamp="$(sha256sum "$sam_requirements" | cut -d' ' -f1)"
if [[ ! -x "$sam_venv/bin/sam" || ! -x "$sam_venv/bin/cargo-lambda" || ! -f "$venv_stamp" ||
  "$(cat "$venv_stamp")" != "$want_stamp" ]]; then
  echo "sam-build: preparing tool venv $sam_venv (tools/requirements-sam.txt: aws-sam-cli, cargo-lambda, ziglang, hash-checked)"
  [[ -x "$sam_venv/bin/python" ]] || python3 -m venv "$sam_venv"
  "$sam_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --require-hashes -r "$sam_requirements"
  echo "$want_stamp" >"$venv_stamp"
fi
# pip's ziglang ships zig inside its package folder, not in bin/: without it on PATH
# cargo-lambda (and so sam build) stops with "Zig is not installed".
zig_dir=$("$sam_venv/bin/python" -c 'import os, ziglang; print(os.path.dirname(ziglang.__file__))') ||
  die "ziglang is missing from $sam_venv (pip install cargo-lambda brings it)"
[[ -x "$zig_dir/zig" ]] || die "no zig executable in $zig_dir"
export PATH="$sam_venv/bin:$zig_dir:$PATH"

rust_target=x86_64-unknown-linux-gnu
[[ "$arch" == arm64 ]] && rust_target=aarch64-unknown-linux-gnu
if ! rustup target list --installed | grep -qx "$rust_target"; then
  echo "sam-build: adding the $rust_target standard library (rustup target add, one try)"
  if ! rustup target add "$rust_target"; then
    if [[ "$arch" == arm64 && "$arch_explicit" == false ]]; then
      echo "sam-build: WARNING: cannot add $rust_target; building x86-64 bootstraps for sizes" \
        "and skipping sam build (the templates ask for arm64)" >&2
      arch=x86-64
      run_sam=false
    else
      die "cannot add the $rust_target standard library (rustup target add $rust_target)"
    fi
  fi
fi

echo "sam-build: cargo fetch (the last step that may use the network)"
cargo fetch --quiet

# ---------------------------------------------------------------- offline from here
export CARGO_TARGET_DIR="$target_dir"
export CARGO_NET_OFFLINE=true
export SAM_CLI_TELEMETRY=0
# Both build steps run with HOME set to the scratch folder (sam writes ~/.aws-sam).
# rustup's cargo proxy finds its toolchains through HOME unless these are set, and would
# then try, offline, to install one.
export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"
export RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
# The SAME HOME for step 1 and step 2: cargo-lambda (cargo-zigbuild) writes its zig
# cc/linker wrappers under ~/.cache, and a different wrapper path changes the CC that
# ring's build script sees, so cargo would rebuild it and every
# crate above it (nearly the whole SDK) inside sam build.
mkdir -p "$target_dir" "$build_root" "$sam_home"
export HOME="$sam_home"
export AWS_ACCESS_KEY_ID=dummy AWS_SECRET_ACCESS_KEY=dummy
export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1

offline=()
network_note="CARGO_NET_OFFLINE=true (network not cut: --online)"
if [[ "$isolate_network" == true ]]; then
  if unshare -n true 2>/dev/null; then
    offline=(unshare -n)
    network_note="no network (unshare -n) + CARGO_NET_OFFLINE=true"
  else
    network_note="CARGO_NET_OFFLINE=true (unshare -n not permitted here, network not cut)"
  fi
fi
echo "sam-build: build steps run with $network_note, nice -n $nice_level, CARGO_TARGET_DIR=$target_dir"

# The binaries the chosen templates build (Metadata.BuildProperties.Binary), in order.
mapfile -t binaries < <(awk '$1 == "Binary:" && !seen[$2]++ { print $2 }' "${templates[@]}")
[[ ${#binaries[@]} -gt 0 ]] || die "no 'Binary:' build property in ${templates[*]}"

# Every one must be a bin target of this workspace before anything compiles.
mapfile -t workspace_bins < <(cargo metadata --no-deps --format-version 1 --offline |
  "$sam_venv/bin/python" -c 'import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "bin" in t["kind"]:
            print(t["name"])')
missing=()
for bin in "${binaries[@]}"; do
  printf '%s\n' "${workspace_bins[@]}" | grep -qx -- "$bin" || missing+=("$bin")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  die "the templates name binaries this workspace does not have yet: ${missing[*]}" \
    "(workspace bins: ${workspace_bins[*]}); build a template whose crates exist, e.g. $0 template-events.yaml"
fi

summary="$build_root/summary.tsv"
printf 'step\tname\tseconds\n' >"$summary"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$(awk -v a="$3" -v b="$4" 'BEGIN { printf "%.1f", b - a }')" >>"$summary"; }

# ---------------------------------------------------------------- 1. cargo lambda build
# One binary per command, exactly as sam build runs it (`cargo lambda build --release
# --arm64 --bin NAME` at CodeUri ./): cargo unifies features over the packages it is
# asked for, so an all-binaries build would compile some dependencies with other
# features and sam build would compile them again.
if [[ "$run_cargo" == true ]]; then
  for bin in "${binaries[@]}"; do
    echo "sam-build: [1] cargo lambda build --release --$arch --bin $bin"
    start=$(now)
    "${offline[@]}" nice -n "$nice_level" cargo lambda build --release "--$arch" --bin "$bin"
    end=$(now)
    record cargo-lambda "$bin" "$start" "$end"
    echo "sam-build: [1] $bin built in $(elapsed "$start" "$end")"
  done
fi

# ---------------------------------------------------------------- 2. sam build
if [[ "$run_sam" == true ]]; then
  for template in "${templates[@]}"; do
    stem=$(basename "$template" .yaml)
    # sam writes build.toml beside the build dir, so each template gets its own parent.
    template_build_dir="$build_root/$stem/build"
    rm -rf "$template_build_dir"
    echo "sam-build: [2] sam build -t $template --build-dir $template_build_dir"
    start=$(now)
    "${offline[@]}" nice -n "$nice_level" sam build --template-file "$template" \
      --build-dir "$template_build_dir" --cache-dir "$build_root/$stem/cache" \
      --config-file "$repo_root/samconfig.toml" --config-env "$config_env"
    end=$(now)
    record sam-build "$stem" "$start" "$end"
    echo "sam-build: [2] $template built in $(elapsed "$start" "$end")"
  done
fi

# ---------------------------------------------------------------- 3. figures
echo
echo "sam-build: bootstraps ($arch, $CARGO_TARGET_DIR/lambda/NAME/bootstrap)"
printf '%-22s %12s %9s %12s\n' binary bytes MiB zip-bytes
for bin in "${binaries[@]}"; do
  bootstrap="$target_dir/lambda/$bin/bootstrap"
  if [[ ! -f "$bootstrap" ]]; then
    printf '%-22s %12s\n' "$bin" "(not built)"
    continue
  fi
  bytes=$(stat -c %s "$bootstrap")
  # What Lambda receives: the bootstrap alone, deflated, as sam package zips it.
  zip_bytes=$("$sam_venv/bin/python" - "$bootstrap" <<'PY'
import io, sys, zipfile
buffer = io.BytesIO()
with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
    archive.write(sys.argv[1], "bootstrap")
print(len(buffer.getvalue()))
PY
  )
  printf '%-22s %12d %9.2f %12d\n' "$bin" "$bytes" "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')" "$zip_bytes"
  printf 'size\t%s\t%s\n' "$bin" "$bytes" >>"$summary"
done
if [[ "$run_sam" == true ]]; then
  echo
  echo "sam-build: sam build artifacts"
  for template in "${templates[@]}"; do
    stem=$(basename "$template" .yaml)
    for artifact in "$build_root/$stem/build"/*/bootstrap; do
      [[ -f "$artifact" ]] || continue
      printf '  %-45s %12d bytes  %s\n' "${artifact#"$build_root"/}" "$(stat -c %s "$artifact")" \
        "$(file -b "$artifact" 2>/dev/null | cut -d, -f1-2 || true)"
    done
  done
fi
echo
echo "sam-build: times (seconds) in $summary"
grep -v '^size' "$summary" | column -t -s $'\t'
