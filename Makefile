# awsmp-metering: one entry point for every check. `make test` is what CI runs
# (.ci/run); each stage is its own target so a person can run just one.
#
#   make prereqs      installs what this machine lacks for `make test` where it can, and
#                     says what is still missing and how to get it
#   make venv         project-local .venv with moto[server] + cfn-lint (pinned)
#   make sam-venv     separate .venv-sam with aws-sam-cli, cargo-lambda, ziglang (hashed pins;
#                     deploy.sh refuses other versions; not needed by `make test`)
#   make audit        RustSec advisories (fetches the database; run before each release)
#   make requirements-lock  regenerates requirements-dev.txt (hashed pins) from requirements-dev.in
#   make test         prereqs, venv, then every test stage below, in order
#   make bench        the performance figures (docs/performance.md): pipeline, then Lambda
#                     artifact sizes and init times; printed; not in `make test`
#   make fuzz         every fuzz target for FUZZ_SECONDS each (not part of `make test`,
#                     which replays the committed corpus instead); fuzz/README.md
#
# Stages whose files are written by other work are guarded: each is skipped (with a
# line saying so) only while the file it runs is absent, and runs as soon as it lands.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
VENV ?= $(ROOT)/.venv
SAM_VENV ?= $(ROOT)/.venv-sam
CHECKOV_VENV ?= $(ROOT)/.venv-checkov
# crates/dev/local-aws finds moto here (AWSMP_VENV overrides its default of ./.venv).
export AWSMP_VENV := $(VENV)
# Where `make prereqs` puts rustup when it installs it, for the stages after it.
export PATH := $(PATH):$(HOME)/.cargo/bin

.PHONY: test prereqs unused-deps deny audit venv requirements-lock sam-venv chromium unit-and-integration simulation lint-templates deploy-tests \
        browser-test report-test local-demo usage-api-test sim-boto3-test fuzz fuzz-cmin bench

test: prereqs unused-deps deny venv unit-and-integration simulation lint-templates deploy-tests browser-test report-test local-demo \
      usage-api-test sim-boto3-test
	@echo "make test: all stages finished"

# Installs what is missing when it can (apt-get as root or with sudo, rustup and the
# pinned toolchain), saying each command, then checks again.
prereqs:
	@bash scripts/check-prereqs.sh --for test --install

# Every dependency a Cargo.toml declares is used (cargo-shear reads each crate's sources,
# its dev-dependencies and the [workspace.dependencies] no member uses). Installed at a
# pinned version on first use: about four CPU-minutes (seven on two busy cores), as for
# cargo-machete, which misses unused dev-dependencies and workspace entries. 1.14.0's
# locked rust-analyzer parser needs a newer rustc than rust-toolchain.toml pins.
# A dependency used where it cannot look goes in that crate's
# [package.metadata.cargo-shear] `ignored`, with a comment saying why.
CARGO_SHEAR_VERSION := 1.13.0
unused-deps:
	@if ! cargo install --list | grep -qxF "cargo-shear v$(CARGO_SHEAR_VERSION):"; then \
	  echo "+ cargo install cargo-shear --version $(CARGO_SHEAR_VERSION) --locked"; \
	  cargo install cargo-shear --version $(CARGO_SHEAR_VERSION) --locked; \
	fi
	@echo "+ cargo shear"
	@if ! out=$$(cargo shear --format=github 2>&1); then \
	  found=$$(printf '%s\n' "$$out" | sed -nE 's/^::(error|warning) file=([^,]*),line=([0-9]+),[^:]*::(.*)$$/  \2:\3: \4/p'); \
	  if [ -n "$$found" ]; then \
	    echo "unused-deps: declared but not used (remove each, or run cargo shear --fix):"; \
	    printf '%s\n' "$$found"; \
	  else \
	    printf '%s\n' "$$out"; echo "unused-deps: cargo shear failed"; \
	  fi; \
	  exit 1; \
	fi

# Supply chain (docs/build.md, "Supply chain"): every crate's license is one deny.toml
# allows, every crate comes from crates.io (no git, no other registry), no registry
# dependency is "*" (every member is publish = false, so its path dependencies are not);
# two versions of one crate are only reported. cargo-deny reads the graph --offline: no
# advisory database is fetched (`cargo fetch` downloads only crates the build needs
# anyway, and nothing once they are cached). Installed at a pinned version on first use: 2m51s
# here (3.5 CPU-minutes, two cores); the check itself takes about two seconds.
CARGO_DENY_VERSION := 0.20.2
deny:
	@if ! cargo install --list | grep -qxF "cargo-deny v$(CARGO_DENY_VERSION):"; then \
	  echo "+ cargo install cargo-deny --version $(CARGO_DENY_VERSION) --locked"; \
	  cargo install cargo-deny --version $(CARGO_DENY_VERSION) --locked; \
	fi
	@cargo fetch --quiet
	@if ! out=$$(cargo deny --offline --color never check licenses bans sources 2>&1); then \
	  cargo deny --offline --color never --log-level error check licenses bans sources 2>&1 || true; \
	  echo "deny: FAILED (cargo deny --offline check licenses bans sources; its errors are above)."; \
	  echo "  A license that is not allowed: make sure it is acceptable for the product, then add it to"; \
	  echo "  deny.toml's allow (every crate) or exceptions (one crate). A git or non-crates.io source:"; \
	  echo "  depend on the crates.io release instead. docs/build.md, \"Supply chain\", says more."; \
	  exit 1; \
	fi; \
	dups=$$(printf '%s\n' "$$out" | grep -c '^warning\[duplicate\]' || true); \
	echo "deny: ok: every license allowed by deny.toml, every crate from crates.io, no \"*\" requirement ($$dups crates in two versions: warnings, listed by cargo deny check bans)"

# RustSec advisories (docs/build.md, "Supply chain"): fetches the advisory database
# (github.com/RustSec/advisory-db, the network) and fails on a vulnerability, a yanked
# crate or an unsound or unmaintained crate in the graph (deny.toml's [advisories]).
# Not part of `make test`, which stays offline-safe: run it before each release and
# when Cargo.lock changes.
audit:
	@if ! cargo install --list | grep -qxF "cargo-deny v$(CARGO_DENY_VERSION):"; then \
	  echo "+ cargo install cargo-deny --version $(CARGO_DENY_VERSION) --locked"; \
	  cargo install cargo-deny --version $(CARGO_DENY_VERSION) --locked; \
	fi
	@echo "+ cargo deny check advisories"
	@if ! cargo deny --color never check advisories; then \
	  echo "audit: FAILED. An advisory above names a crate in Cargo.lock: update it (cargo update -p CRATE),"; \
	  echo "  or, when it cannot reach this product's use, add its id to deny.toml's [advisories] ignore with"; \
	  echo "  the reason. 'failed to fetch advisory database' means github.com could not be reached."; \
	  exit 1; \
	fi
	@echo "audit: ok: no RustSec advisory against any crate in Cargo.lock"

venv:
	@scripts/ensure-venv.sh "$(VENV)" requirements-dev.txt

# requirements-dev.txt is generated from requirements-dev.in (the tools the tests use):
# every package they bring in, pinned, each with the sha256 of every file PyPI has for
# that version (all wheels, the sdist), which `make venv` installs with --require-hashes.
# Run this after editing requirements-dev.in, then commit both. pip-tools runs in a
# throwaway venv; pins already in the lock are kept unless requirements-dev.in needs
# others (PIP_COMPILE_ARGS=--upgrade moves all to the newest). pip-compile keeps the
# dependencies of the Python running it: use 3.11 (PYTHON=...), the oldest the pins allow.
PIP_TOOLS_VERSION := 7.7.0
PIP_TOOLS_PIP_VERSION := 26.3
PIP_COMPILE_ARGS ?=
# Each lock is NAME.in -> NAME.txt: the test venv's, and checkov's own (make lint-templates).
LOCKS ?= requirements-dev requirements-checkov tools/requirements-sam
requirements-lock:
	@py=$${PYTHON:-python3}; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	"$$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  echo "requirements-lock: warning: $$py is not Python 3.11; dependencies only older Pythons need may be left out"; \
	"$$py" -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/pip" install --quiet --disable-pip-version-check "pip==$(PIP_TOOLS_PIP_VERSION)" "pip-tools==$(PIP_TOOLS_VERSION)"; \
	for lock in $(LOCKS); do \
	mkdir -p "$$tmp/$$(dirname $$lock)"; cp $$lock.txt "$$tmp/$$lock.txt"; \
	echo "+ pip-compile --generate-hashes $$lock.in (pip-tools $(PIP_TOOLS_VERSION))"; \
	"$$tmp/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras --no-header \
	  --no-emit-index-url --no-emit-find-links --annotation-style=line $(PIP_COMPILE_ARGS) \
	  --output-file "$$tmp/$$lock.txt" $$lock.in; \
	{ echo "# Generated from $$lock.in by \`make requirements-lock\`: do not edit by hand."; \
	  echo "# Every package the tools below bring in is pinned here with the sha256 of every file"; \
	  echo "# PyPI has for that version (all wheels, the sdist): scripts/ensure-venv.sh installs it"; \
	  echo "# with pip --require-hashes, on Linux or macOS, Python 3.11 to 3.14."; \
	  echo "#"; \
	  awk '!/^#/ { exit } { print }' $$lock.in; \
	  echo; \
	  cat "$$tmp/$$lock.txt"; } >$$lock.txt; \
	echo "requirements-lock: $$lock.txt has $$(grep -c '^[A-Za-z0-9]' $$lock.txt) pins and $$(grep -c -- '--hash=sha256:' $$lock.txt) hashes"; \
	done

sam-venv:
	@scripts/ensure-venv.sh "$(SAM_VENV)" tools/requirements-sam.txt

chromium:
	@scripts/ensure-chromium.sh

# One cargo build of the whole workspace (features unify once; debug profile).
# Doc tests first, so the last summary printed is the main test run's.
unit-and-integration: venv
	cargo test --workspace --doc --quiet
	@if command -v cargo-nextest >/dev/null 2>&1; then \
	  echo "+ cargo nextest run --workspace --no-fail-fast"; \
	  cargo nextest run --workspace --no-fail-fast; \
	else \
	  echo "+ cargo test --workspace --no-fail-fast"; \
	  cargo test --workspace --no-fail-fast; \
	fi

# The deterministic simulation (crates/dev/dst): at least SIM_SCHEDULES schedules of the
# whole pipeline under concurrent faults inside SIM_BUDGET seconds, one summary line.
# A failure prints the shrunk schedule and the command that replays it.
SIM_SCHEDULES ?= 10000
SIM_BUDGET ?= 600
simulation:
	cargo run --quiet -p awsmp-dst -- --schedules $(SIM_SCHEDULES) --min $(SIM_SCHEDULES) --budget-secs $(SIM_BUDGET)

# Hook: CloudFormation lint of the stacks' templates, and the templates after SAM's
# transform (no dependency cycle; API bodies name functions that exist); a flood played
# against the registration WebACL's rules (tests/deploy/check_waf_flood.py); checkov
# (pinned and hashed in requirements-checkov.txt, its own venv: its pins conflict with
# the test venv's) on both templates before and after SAM's transform. Every check that
# does not apply is skipped at its resource with a reason, so any new finding fails.
lint-templates: venv
	@if ls template-*.yaml >/dev/null 2>&1; then \
	  echo "+ cfn-lint template-*.yaml"; \
	  "$(VENV)/bin/cfn-lint" template-*.yaml; \
	  echo "+ tests/deploy/check_sam_graph.py"; \
	  "$(VENV)/bin/python" tests/deploy/check_sam_graph.py; \
	  echo "+ tests/deploy/check_waf_flood.py"; \
	  "$(VENV)/bin/python" tests/deploy/check_waf_flood.py; \
	  scripts/ensure-venv.sh "$(CHECKOV_VENV)" requirements-checkov.txt; \
	  tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  "$(VENV)/bin/python" tests/deploy/checkov_templates.py "$$tmp"; \
	  for scan in "template-main.yaml template-events.yaml" "$$tmp/template-main.transformed.json $$tmp/template-events.transformed.json"; do \
	    echo "+ checkov $$scan"; \
	    "$(CHECKOV_VENV)/bin/checkov" $$(printf -- '-f %s ' $$scan) --framework cloudformation --compact --quiet --skip-download || \
	      { echo "lint-templates: checkov found the above. Fix it, or skip a check that does not apply at its resource:"; \
	        echo "  Metadata: checkov: skip: [{id: CKV_..., comment: \"one-line reason\"}]"; exit 1; }; \
	  done; \
	else \
	  echo "lint-templates: skipped (no template-*.yaml yet)"; \
	fi

# Hook: deploy.sh plan tests (no AWS; checks what deploy.sh would run).
deploy-tests:
	@if [ -f tests/deploy/run.sh ]; then \
	  bash tests/deploy/run.sh; \
	else \
	  echo "deploy-tests: skipped (tests/deploy/run.sh not written yet)"; \
	fi

# Hook: the registration page in headless Chromium.
browser-test:
	@if [ -f web/test/run.sh ]; then \
	  scripts/ensure-chromium.sh; \
	  bash web/test/run.sh; \
	else \
	  echo "browser-test: skipped (web/test/run.sh not written yet)"; \
	fi

# `awsmp report --html` on the pipeline's output (moto + the simulator), opened in
# headless Chromium; the page and its screenshot stay in test-artifacts/report/. The
# test also runs in unit-and-integration, where it skips the browser if Chromium is not
# installed yet; here Chromium is installed first and the browser half cannot be skipped.
report-test: venv chromium
	AWSMP_REQUIRE_CHROMIUM=1 cargo test -p awsmp-cli --test report -- --nocapture
	@echo "report-test: page and screenshot in test-artifacts/report/"

# Hook: the whole lifecycle on the local stack (./deploy.sh --local).
local-demo: venv
	@if [ -f scripts/local-demo.sh ]; then \
	  bash scripts/local-demo.sh; \
	else \
	  echo "local-demo: skipped (scripts/local-demo.sh not written yet)"; \
	fi

# Property-based test of the usage API from docs/usage-api.openapi.yaml (schemathesis,
# every request SigV4-signed) against `awsmp local up --serve`: no 5xx, every answer as
# the contract says, no usage-table item for an event answered `rejected`. About a minute.
usage-api-test: venv
	@bash tests/usage-api/run.sh

# boto3's marketplace-agreement client (RPC v2 CBOR, then awsJson 1.0, as the AWS CLI
# and older botocore speak it) against the simulator's Agreement API.
sim-boto3-test: venv
	cargo build -p awsmp-marketplace-sim --quiet
	$(VENV)/bin/python -m pytest tests/marketplace-sim -q -p no:cacheprovider

# Performance figures (prints numbers, asserts nothing; goals and limits beside each).
# The pipeline's figures, then each Lambda artifact's size and init time, for this
# machine and for arm64, what the templates deploy (each part builds every Lambda with
# the release profile's LTO: 5-30 minutes here; the arm64 one needs a cross gcc, qemu
# and aarch64's standard library or rust-src, and says which is missing).
bench: venv
	cargo bench -p awsmp-e2e --bench pipeline_figures
	cargo bench -p awsmp-e2e --bench usage_api_figures
	cargo bench -p awsmp-dst --bench submitter_ceiling
	cargo bench -p awsmp-operate --bench charges_figures
	bash scripts/lambda-artifacts.sh
	@bash scripts/lambda-artifacts.sh --target aarch64-unknown-linux-gnu || \
	  echo "bench: no arm64 figures here (the line above says what is missing)"

# Coverage-guided fuzzing (cargo-fuzz + libFuzzer), one target at a time, each for
# FUZZ_SECONDS; new inputs land in fuzz/corpus/<target>/, crashes in fuzz/artifacts/.
# cargo-fuzz needs nightly flags: RUSTC_BOOTSTRAP=1 lets the pinned stable rustc take
# them. `make fuzz-cmin` minimizes the corpus before it is committed.
FUZZ_SECONDS ?= 60
FUZZ_FLAGS ?= -O -a --codegen-units 16
FUZZ := cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz
# One cargo-fuzz for everyone (it is not on the make test path: it needs nightly flags).
CARGO_FUZZ_VERSION := 0.13.2
FUZZ_TOOL = @cargo install --list | grep -qxF "cargo-fuzz v$(CARGO_FUZZ_VERSION):" || \
	  cargo install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked

fuzz:
	$(FUZZ_TOOL)
	@for target in $$($(FUZZ) list); do \
	  echo "+ cargo fuzz run $$target for $(FUZZ_SECONDS)s"; \
	  ( $(FUZZ) run $(FUZZ_FLAGS) $$target corpus/$$target seeds/$$target -- \
	      -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -print_final_stats=1 ) || exit 1; \
	done

# Minimize: a set-cover merge on edge coverage alone (-use_counters=0) keeps every
# edge in a fraction of the files `cargo fuzz cmin` keeps.
fuzz-cmin:
	$(FUZZ_TOOL)
	$(FUZZ) build $(FUZZ_FLAGS)
	@for target in $$($(FUZZ) list); do \
	  echo "+ minimize fuzz/corpus/$$target"; \
	  tmp=$$(mktemp -d); \
	  fuzz/target/x86_64-unknown-linux-gnu/release/$$target -set_cover_merge=1 -use_counters=0 \
	    -max_len=8192 -timeout=10 "$$tmp" fuzz/corpus/$$target 2>/dev/null || exit 1; \
	  rm -rf fuzz/corpus/$$target && mv "$$tmp" fuzz/corpus/$$target; \
	done
	@du -sh fuzz/corpus
