#!/usr/bin/env bash
# Offline tests of deploy.sh and of the templates' wiring.
#
# deploy.sh runs with a PATH holding only the stand-ins in tests/deploy/fakes (aws, sam,
# cargo, cargo-lambda, zig: they record their arguments and answer from a state folder)
# and links to the plain system tools it uses, so a real AWS CLI or SAM on this machine
# is never reached. Each test checks the plan deploy.sh prints, the commands it ran (in
# order), its exit code and its error message. samconfig.toml is checked against what
# `sam deploy --config-env ENV` needs by hand; scripts/check-prereqs.sh runs on a PATH
# of stand-ins (a machine lacking one tool at a time), and scripts/ensure-venv.sh
# repairs a real venv left without pip. Then tests/deploy/check_templates.py checks
# the templates against the environment contract and docs/design.md, and tests/deploy/check_deployer_policy.py the
# deployer policy and CloudFormation service role against the templates (docs/deployer.md).
#
#   bash tests/deploy/run.sh        exits non-zero on any failure; ends with "N passed, M failed"
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

PASSED=0
FAILED=0
CURRENT=""
CURRENT_FAILED=0

# Plain system tools deploy.sh and the stand-ins use (cp and mv: the stand-ins only);
# nothing else is on PATH.
SYSBIN="$WORK/sysbin"
mkdir -p "$SYSBIN"
for tool in bash sh env cat grep sed awk tr mktemp rm mkdir dirname basename cut head tail sort uniq wc printf ls tee cp mv; do
  if path=$(type -P "$tool"); then ln -s "$path" "$SYSBIN/$tool"; fi
done
# deploy.sh reads samconfig.toml with python3; link the interpreter itself (a pyenv
# shim would need this shell's environment).
# SYSBIN_NO_PYTHON is the same without it.
SYSBIN_NO_PYTHON="$WORK/sysbin-no-python"
cp -P -R "$SYSBIN" "$SYSBIN_NO_PYTHON"
if PYTHON3=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null); then
  ln -s "$PYTHON3" "$SYSBIN/python3"
fi

# ------------------------------------------------------------------ harness
begin() {
  CURRENT=$1
  CURRENT_FAILED=0
  STATE="$WORK/$PASSED-$FAILED-state"
  rm -rf "$STATE" "$WORK/fakebin" "$WORK/page"
  DEPLOY_SH=""
  DEPLOY_PATH=""
  mkdir -p "$STATE" "$WORK/fakebin"
  cp "$HERE"/fakes/* "$WORK/fakebin/"
  cp "$ROOT/tools/requirements-sam.txt" "$WORK/fakebin/"
  LOG="$STATE/calls.log"
  : >"$LOG"
}

fail() {
  CURRENT_FAILED=1
  printf '    %s\n' "$*"
}

end() {
  if [ "$CURRENT_FAILED" = 0 ]; then
    PASSED=$((PASSED + 1))
    printf 'ok   %s\n' "$CURRENT"
  else
    FAILED=$((FAILED + 1))
    printf 'FAIL %s\n' "$CURRENT"
    printf '    --- exit %s; stdout:\n%s\n    --- stderr:\n%s\n    --- calls:\n%s\n' \
      "$RC" "$(sed 's/^/      /' "$WORK/out")" "$(sed 's/^/      /' "$WORK/err")" "$(sed 's/^/      /' "$LOG")"
  fi
}

# deploy ARGS...: runs deploy.sh with only the stand-ins and system tools on PATH, no
# terminal on stdin, and nothing of this shell's environment. DEPLOY_SH (default: the
# checkout's) and DEPLOY_PATH (default: stand-ins + system tools) change what runs.
# answering LINES... ARGS: deploy with those lines as its stdin (the answers to --review).
deploy() {
  env -i HOME="$WORK" PATH="${DEPLOY_PATH:-$WORK/fakebin:$SYSBIN}" FAKE_LOG="$LOG" FAKE_STATE="$STATE" \
    ${AWSMP_ANY_TOOL_VERSIONS:+AWSMP_ANY_TOOL_VERSIONS="$AWSMP_ANY_TOOL_VERSIONS"} bash "${DEPLOY_SH:-$ROOT/deploy.sh}" "$@" <"${DEPLOY_STDIN:-/dev/null}" >"$WORK/out" 2>"$WORK/err"
  RC=$?
}

answering() {
  local answers=$1
  shift
  printf '%s\n' "$answers" >"$WORK/stdin"
  DEPLOY_STDIN="$WORK/stdin" deploy "$@"
}

# with_samconfig: a copy of the checkout's deploy.sh and templates in $WORK/checkout
# whose samconfig.toml is this function's stdin; deploy then runs that copy.
with_samconfig() {
  rm -rf "$WORK/checkout"
  mkdir -p "$WORK/checkout"
  cp "$ROOT/deploy.sh" "$ROOT"/template-*.yaml "$WORK/checkout/"
  mkdir -p "$WORK/checkout/tools"
  cp "$ROOT/tools/requirements-sam.txt" "$WORK/checkout/tools/"
  cat >"$WORK/checkout/samconfig.toml"
  DEPLOY_SH="$WORK/checkout/deploy.sh"
}

without_tool() { rm -f "$WORK/fakebin/$1"; }

# stack REGION NAME STATUS [KEY=VALUE outputs...]
stack() {
  local dir="$STATE/stacks/$1/$2" kv
  mkdir -p "$dir/outputs" "$dir/params"
  echo "$3" >"$dir/status"
  shift 3
  for kv in "$@"; do echo "${kv#*=}" >"$dir/outputs/${kv%%=*}"; done
}

existing_events() { stack us-east-1 awsmp-events-prod "${1:-UPDATE_COMPLETE}" SubscribersTableName=awsmp-subscribers-prod; }

existing_main() {
  stack "$1" awsmp-main-abc123-prod "${2:-UPDATE_COMPLETE}" \
    "FulfillmentUrl=https://old$1.example/prod/fulfillment" "RegisterUrl=https://old$1.example/prod/register" \
    "RegistrationPageUrl=https://page-$1.cloudfront.net/" "PageBucketName=page-bucket-$1" "PageDistributionId=DIST$1"
}

expect_exit() { [ "$RC" = "$1" ] || fail "exit code $RC, expected $1"; }
expect_out() { grep -qF -- "$1" "$WORK/out" || fail "stdout lacks: $1"; }
expect_no_out() { ! grep -qF -- "$1" "$WORK/out" || fail "stdout has: $1"; }
expect_err() { grep -qF -- "$1" "$WORK/err" || fail "stderr lacks: $1"; }
expect_call() { grep -qF -- "$1" "$LOG" || fail "no call containing: $1"; }
expect_no_call() { ! grep -qF -- "$1" "$LOG" || fail "unexpected call containing: $1"; }
expect_calls() {
  local n
  n=$(grep -cF -- "$1" "$LOG")
  [ "$n" = "$2" ] || fail "$n calls containing '$1', expected $2"
}
# expect_order A B: the first call containing A comes before the first containing B.
expect_order() {
  local a b
  a=$(grep -nF -- "$1" "$LOG" | head -1 | cut -d: -f1)
  b=$(grep -nF -- "$2" "$LOG" | head -1 | cut -d: -f1)
  if [ -z "$a" ] || [ -z "$b" ] || [ "$a" -ge "$b" ]; then fail "expected a call with '$1' before one with '$2'"; fi
}
# call_with A: the first call containing A (to check its other arguments).
call_with() { grep -F -- "$1" "$LOG" | head -1; }
expect_in_call() {
  case " $(call_with "$1") " in
    *" $2 "*) ;;
    *) fail "the call with '$1' lacks argument '$2'" ;;
  esac
}
expect_not_in_call() {
  case " $(call_with "$1") " in
    *" $2"*) fail "the call with '$1' has argument '$2'" ;;
  esac
}
no_changes() {
  expect_no_call "sam build"
  expect_no_call "sam deploy"
  expect_no_call "update-termination-protection"
  expect_no_call "aws s3"
}

MAIN_ARGS="--product-code abc123 --region us-west-2 --stage prod"

# ------------------------------------------------------------------ usage
begin "help prints usage and exits 0"
deploy --help
expect_exit 0
expect_out "Usage:"
expect_out "./deploy.sh --local [--serve]"
end

begin "no arguments: usage on stderr, exit 2"
deploy
expect_exit 2
grep -qF "Usage:" "$WORK/err" || fail "usage not on stderr"
end

begin "unknown command is refused"
deploy destroy --stage prod
expect_exit 2
expect_err "unknown command 'destroy'"
no_changes
end

# ------------------------------------------------------------------ first deploy
begin "first deploy, dry run: plan says CREATE for both stacks and changes nothing"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --dry-run
expect_exit 0
expect_out "account:     123456789012"
expect_out "config env:  prod (samconfig.toml)"
expect_out "events stack awsmp-events-prod (us-east-1): CREATE (first deploy)"
expect_out "main stack awsmp-main-abc123-prod (us-west-2): CREATE (first deploy)"
expect_out "reads subscribers table awsmp-subscribers-prod in us-east-1"
expect_out "SubscribersTableName=awsmp-subscribers-prod"
expect_out "ApiGatewayLoggingRole=create"
expect_out "Dry run: nothing was built or changed."
expect_out "Before real billing: review every resource this creates"
expect_call "aws sts get-caller-identity"
expect_call "aws cloudformation describe-stacks --stack-name awsmp-events-prod --region us-east-1"
expect_call "aws dynamodb describe-table --table-name awsmp-subscribers-prod --region us-east-1"
expect_call "aws dynamodb describe-table --table-name awsmp-abc123-customer-profile --region us-west-2"
expect_call "aws lambda get-account-settings --region us-west-2"
no_changes
cp "$WORK/out" "$WORK/first-dry-run.out"
end

begin "first deploy: builds each template once, events before main, wired cross-Region"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
expect_exit 0
expect_calls "sam build" 2
expect_calls "sam build --template-file template-events.yaml --build-dir .aws-sam/build-events" 1
expect_calls "sam build --template-file template-main.yaml --build-dir .aws-sam/build-main" 1
expect_calls "sam deploy" 2
expect_order "sam build --template-file template-main.yaml" "sam deploy"
expect_order "sam deploy --template-file .aws-sam/build-events" "sam deploy --template-file .aws-sam/build-main"
for arg in "--template-file .aws-sam/build-events/template.yaml" "StageName=prod" "LogRetentionInDays=365" \
  "--capabilities CAPABILITY_IAM" "--resolve-s3" "--no-fail-on-empty-changeset" "--config-env prod-events"; do
  expect_in_call "sam deploy --template-file .aws-sam/build-events" "$arg"
done
expect_not_in_call "sam deploy --template-file .aws-sam/build-events" "ProductCode="
for arg in "--template-file .aws-sam/build-main/template.yaml" "ProductCode=abc123" "StageName=prod" \
  "SubscribersTableName=awsmp-subscribers-prod" "SubscribersTableRegion=us-east-1" "ApiGatewayLoggingRole=create" \
  "LogRetentionInDays=365" "CreateDashboard=true"; do
  expect_in_call "sam deploy --template-file .aws-sam/build-main" "$arg"
done
expect_call "aws cloudformation update-termination-protection --enable-termination-protection --stack-name awsmp-events-prod --region us-east-1"
expect_call "aws cloudformation update-termination-protection --enable-termination-protection --stack-name awsmp-main-abc123-prod --region us-west-2"
expect_out "us-west-2: Fulfillment URL https://page-us-west-2.cloudfront.net/fulfillment"
expect_out "usage API https://usageus-west-2.execute-api.us-west-2.amazonaws.com/usage/events"
expect_out "buyer profiles: only the register function can read them; to read or erase one (awsmp profile), redeploy with --parameter ProfileAccessRoleArn=<role ARN>"
expect_out "Enter the Fulfillment URL in the AWS Marketplace Management Portal"
# Without --review, sam executes the change set itself.
expect_not_in_call "sam deploy" "--no-execute-changeset"
expect_no_call "describe-change-set"
expect_no_call "execute-change-set"
# The dry run printed exactly the sam deploy commands the real run executed.
grep -F "  sam deploy " "$WORK/first-dry-run.out" | sed 's/^  //; s/ *$//' >"$WORK/planned"
grep -F "sam deploy " "$LOG" | sed 's/ *$//' >"$WORK/ran"
diff "$WORK/planned" "$WORK/ran" >/dev/null || fail "dry-run commands differ from the real run: $(diff "$WORK/planned" "$WORK/ran")"
end

begin "events only, first deploy: us-east-1, the dev environment's settings, no main-stack parameters"
deploy events --stage dev --yes
expect_exit 0
expect_out "config env:  dev (samconfig.toml)"
expect_out "events env:  dev-events"
expect_in_call "sam build" "--config-env dev-events"
expect_in_call "sam deploy" "--config-env dev-events"
expect_calls "sam build" 1
expect_call "sam build --template-file template-events.yaml"
expect_calls "sam deploy" 1
expect_in_call "sam deploy" "--region us-east-1"
expect_in_call "sam deploy" "LogRetentionInDays=14"
expect_not_in_call "sam deploy" "ApiThrottlingRateLimit="
expect_out "events: awsmp-events-dev in us-east-1, subscribers table awsmp-subscribers-dev"
end

begin "a stage without its own samconfig section uses [default]"
deploy events --stage qa --dry-run
expect_exit 0
expect_out "config env:  default (samconfig.toml)"
expect_out "LogRetentionInDays=90"
end

begin "samconfig.toml: every environment deploys by hand (sam deploy --config-env ENV)"
# What `sam build/deploy --config-env ENV` needs with no other option: the template,
# stack name, Region, capabilities, an artifact bucket and a value for every template
# parameter without a default; and what keeps it the same as deploy.sh: the stack and
# tag names deploy.sh uses, [default]'s overrides repeated, no parameter the template
# lacks. [default] names no stack, so `sam deploy` without --config-env deploys nothing.
RC=0
python3 - "$ROOT" "$(sed -n '/^DEPLOY_PY=\$($/,/^PY$/p' "$ROOT/deploy.sh" | sed '1,2d;$d')" >"$WORK/out" 2>"$WORK/err" <<'EOF' || RC=$?
import re, subprocess, sys, tomllib
root, helper = sys.argv[1], sys.argv[2]
config = tomllib.load(open(root + "/samconfig.toml", "rb"))
problems = []

def parameters(template):
    """{name: has_default} of the template's top-level Parameters."""
    text = open(root + "/" + template).read()
    block = re.search(r"^Parameters:\n(.*?)(?=^\S)", text, re.S | re.M).group(1)
    found = {}
    for name, body in re.findall(r"^  ([A-Za-z0-9]+):\n((?:(?:    .*)?\n)*)", block, re.M):
        found[name] = re.search(r"^    Default:", body, re.M) is not None
    return found

def overrides(env):
    out = subprocess.run([sys.executable, "-c", helper, "overrides", root + "/samconfig.toml", env],
                         capture_output=True, text=True)
    if out.returncode != 0:
        problems.append("[%s] parameter_overrides: %s" % (env, out.stderr.strip()))
        return {}
    return dict(line.split("=", 1) for line in out.stdout.splitlines())

default = overrides("default")
if "stack_name" in config["default"].get("deploy", {}).get("parameters", {}):
    problems.append("[default] names a stack: `sam deploy` without --config-env would deploy it")
envs = [name for name, value in config.items() if isinstance(value, dict) and name != "default"]
if not {"dev", "dev-events", "prod", "prod-events"} <= set(envs):
    problems.append("environments %s lack one of dev, dev-events, prod, prod-events" % envs)
for env in envs:
    build = config[env].get("build", {}).get("parameters", {})
    deploy = config[env].get("deploy", {}).get("parameters", {})
    template = build.get("template_file")
    want = "template-events.yaml" if env.endswith("-events") else "template-main.yaml"
    if template != want:
        problems.append("[%s.build.parameters] template_file is %r, not %r" % (env, template, want))
        continue
    if "template_file" in deploy:
        problems.append("[%s.deploy.parameters] sets template_file: sam deploy would skip what sam build built" % env)
    params = parameters(template)
    values = overrides(env)
    stage = env[: -len("-events")] if env.endswith("-events") else env
    for key in ("stack_name", "region", "capabilities"):
        if not deploy.get(key):
            problems.append("[%s.deploy.parameters] lacks %s" % (env, key))
    if "CAPABILITY_IAM" not in str(deploy.get("capabilities", "")):
        problems.append("[%s] capabilities lack CAPABILITY_IAM (the templates create roles)" % env)
    if deploy.get("resolve_s3") is not True and not deploy.get("s3_bucket"):
        problems.append("[%s] has neither resolve_s3 = true nor s3_bucket: sam has nowhere to upload code" % env)
    if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-[0-9]", str(deploy.get("region", ""))):
        problems.append("[%s] region %r is not a Region name" % (env, deploy.get("region")))
    if env.endswith("-events") and deploy.get("region") != "us-east-1":
        problems.append("[%s] region is %r: the events stack lives in us-east-1" % (env, deploy.get("region")))
    for name, has_default in params.items():
        if not has_default and name not in values:
            problems.append("[%s] sets no value for %s, a parameter of %s without a default" % (env, name, template))
    for name in values:
        if name not in params:
            problems.append("[%s] overrides %s, which %s does not declare" % (env, name, template))
    for name, value in default.items():
        if name in params and name not in values:
            problems.append("[%s] does not repeat [default]'s %s=%s: sam by hand would not apply it" % (env, name, value))
    if values.get("StageName") != stage:
        problems.append("[%s] StageName is %r, not %r" % (env, values.get("StageName"), stage))
    if env.endswith("-events"):
        stack = "awsmp-events-%s" % stage
    else:
        stack = "awsmp-main-%s-%s" % (values.get("ProductCode"), stage)
    if deploy.get("stack_name") != stack:
        problems.append("[%s] stack_name is %r; deploy.sh names this stack %r" % (env, deploy.get("stack_name"), stack))
    component = "events" if env.endswith("-events") else "main"
    if deploy.get("tags") != "awsmp:stage=%s awsmp:component=%s" % (stage, component):
        problems.append("[%s] tags are %r, not deploy.sh's" % (env, deploy.get("tags")))
for problem in problems:
    print(problem)
print("%d environment(s) checked, %d problem(s)" % (len(envs), len(problems)))
sys.exit(1 if problems else 0)
EOF
: >"$LOG"
expect_exit 0
expect_out "environment(s) checked, 0 problem(s)"
[ "$CURRENT_FAILED" = 0 ] || sed 's/^/    /' "$WORK/out" "$WORK/err"
end

# ------------------------------------------------------------------ samconfig.toml forms
begin "samconfig: the single string sam deploy --guided writes is read value for value"
# What --guided writes: every value quoted, the whole list one TOML string. The old awk
# reader turned LogRetentionInDays into '\' and dropped every pair after the first.
with_samconfig <<'EOF'
version = 0.1
[prod.deploy.parameters]
stack_name = "awsmp-main-abc123-prod"
region = "us-west-2"
confirm_changeset = true
capabilities = "CAPABILITY_IAM"
parameter_overrides = "LogRetentionInDays=\"30\" CreateDashboard=\"false\" AlertsTopicArn=\"\" TablesKmsKeyArn=\"expires at\" WebAclArn=\"arn:aws:wafv2:x=y\" PagePriceClass=\"say \\\"hi\\\" there\""
EOF
existing_events
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --yes
expect_exit 0
for arg in "LogRetentionInDays=30" "CreateDashboard=false" 'AlertsTopicArn=""' 'TablesKmsKeyArn="expires at"' \
  "WebAclArn=arn:aws:wafv2:x=y" 'PagePriceClass="say \"hi\" there"' "ProductCode=abc123"; do
  expect_in_call "sam deploy" "$arg"
done
expect_not_in_call "sam deploy" 'LogRetentionInDays=\'
expect_out 'TablesKmsKeyArn="expires at"'
end

begin "samconfig: the list form, with quoted values, '=' inside and empty values"
with_samconfig <<'EOF'
version = 0.1
[default.deploy.parameters]
parameter_overrides = ["LogRetentionInDays=90", "CreateDashboard=true"]
[prod.deploy.parameters]
parameter_overrides = [
  "LogRetentionInDays=30",
  "AlertsTopicArn=\"\"",
  'TablesKmsKeyArn="expires at"',
  "WebAclArn=arn:aws:wafv2:x=y",
  'PagePriceClass="say \"hi\" there"',
]
EOF
deploy all $MAIN_ARGS --yes
expect_exit 0
for arg in "LogRetentionInDays=30" "CreateDashboard=true" 'AlertsTopicArn=""' 'TablesKmsKeyArn="expires at"' \
  "WebAclArn=arn:aws:wafv2:x=y" 'PagePriceClass="say \"hi\" there"'; do
  expect_in_call "sam deploy --template-file .aws-sam/build-main" "$arg"
done
# The events stack gets its own template's parameters only.
expect_in_call "sam deploy --template-file .aws-sam/build-events" "LogRetentionInDays=30"
expect_in_call "sam deploy --template-file .aws-sam/build-events" 'AlertsTopicArn=""'
expect_not_in_call "sam deploy --template-file .aws-sam/build-events" "TablesKmsKeyArn="
end

begin "samconfig: sam's ParameterKey=,ParameterValue= form, and a name no template declares"
with_samconfig <<'EOF'
[prod.deploy.parameters]
parameter_overrides = "ParameterKey=LogRetentionInDays,ParameterValue=30 ParameterKey=TablesKmsKeyArn,ParameterValue=\"expires at\" ParameterKey=LogRetentionDays,ParameterValue=7"
EOF
deploy events --stage prod --dry-run
expect_exit 0
expect_out "parameters: LogRetentionInDays=30"
expect_err "samconfig.toml [prod.deploy.parameters] sets LogRetentionDays, which neither template declares; it is ignored."
# A main-stack parameter is no typo: kept out of the events stack without a word.
grep -qF "TablesKmsKeyArn" "$WORK/err" && fail "warned about TablesKmsKeyArn, a main-stack parameter"
expect_no_out "TablesKmsKeyArn"
expect_no_out "ParameterKey"
existing_events
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --dry-run
expect_exit 0
expect_out 'TablesKmsKeyArn="expires at"'
end

begin "samconfig: a pair sam would cut or drop is refused with the fix"
with_samconfig <<'EOF'
[prod.deploy.parameters]
parameter_overrides = ["TablesKmsKeyArn=expires at"]
EOF
deploy events --stage prod --dry-run
expect_exit 2
expect_err "sam reads 'TablesKmsKeyArn=expires at' as TablesKmsKeyArn=expires and ignores 'at'"
expect_err 'Quote a value that has spaces (Key="two words")'
expect_no_call "aws "
with_samconfig <<'EOF'
[prod.deploy.parameters]
parameter_overrides = "LogRetentionInDays=30 AlertsTopicArn="
EOF
deploy events --stage prod --dry-run
expect_exit 2
expect_err "ignores 'AlertsTopicArn='"
expect_err 'write an empty value as Key=""'
with_samconfig <<'EOF'
[prod.deploy.parameters]
parameter_overrides = ["LogRetentionInDays=30 CreateDashboard=true"]
EOF
deploy events --stage prod --dry-run
expect_exit 2
expect_err "holds 2 pairs; give one KEY=VALUE per list entry"
with_samconfig <<'EOF'
[prod.deploy.parameters]
parameter_overrides = 30
EOF
deploy events --stage prod --dry-run
expect_exit 2
expect_err "must be a string or a list of strings"
end

begin "samconfig: a file that is not TOML stops deploy.sh before any AWS call"
with_samconfig <<'EOF'
[prod.deploy.parameters
parameter_overrides = ["LogRetentionInDays=30"]
EOF
deploy events --stage prod --dry-run
expect_exit 2
expect_err "samconfig.toml is not valid TOML"
expect_no_call "aws "
end

begin "--parameter values with spaces and quotes reach sam quoted; ones sam cannot carry are refused"
existing_events
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --parameter 'TablesKmsKeyArn=a "b" c' --yes
expect_exit 0
expect_in_call "sam deploy" 'TablesKmsKeyArn="a \"b\" c"'
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --parameter 'TablesKmsKeyArn=ends\' --dry-run
expect_exit 2
expect_err "cannot be passed through sam's --parameter-overrides unchanged"
end

begin "no python3: deploy.sh says what it needs it for and how to get it"
DEPLOY_PATH="$WORK/fakebin:$SYSBIN_NO_PYTHON"
deploy events --stage prod --dry-run
expect_exit 3
expect_err "python3 is not on PATH; deploy.sh reads samconfig.toml with Python 3.11+ (tomllib)"
expect_err "apt-get install -y python3"
end

# ------------------------------------------------------------------ redeploy
begin "redeploy: both stacks updated in place, no table or logging-role changes"
existing_events
existing_main us-west-2
mkdir -p "$STATE/tables/us-east-1" "$STATE/tables/us-west-2"
touch "$STATE/tables/us-east-1/awsmp-subscribers-prod" "$STATE/tables/us-west-2/awsmp-abc123-usage-prod" \
  "$STATE/tables/us-west-2/awsmp-abc123-aggregated-usage-prod" "$STATE/tables/us-west-2/awsmp-abc123-customer-profile"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
expect_exit 0
expect_out "events stack awsmp-events-prod (us-east-1): UPDATE in place (now UPDATE_COMPLETE)"
expect_out "main stack awsmp-main-abc123-prod (us-west-2): UPDATE in place (now UPDATE_COMPLETE)"
expect_no_call "dynamodb describe-table"
expect_no_call "apigateway get-account"
expect_no_call "lambda get-account-settings"
expect_calls "sam build" 2
expect_calls "sam deploy" 2
expect_not_in_call "sam deploy --template-file .aws-sam/build-main" "ApiGatewayLoggingRole="
expect_in_call "sam deploy --template-file .aws-sam/build-main" "SubscribersTableName=awsmp-subscribers-prod"
[ "$(cat "$STATE/stacks/us-east-1/awsmp-events-prod/status")" = UPDATE_COMPLETE ] || fail "events stack not updated"
expect_out "us-west-2: Fulfillment URL https://page-us-west-2.cloudfront.net/fulfillment"
end

begin "redeploy after a rolled-back update (UPDATE_ROLLBACK_COMPLETE) updates in place"
existing_events UPDATE_ROLLBACK_COMPLETE
deploy events --stage prod --dry-run
expect_exit 0
expect_out "UPDATE in place (now UPDATE_ROLLBACK_COMPLETE)"
end

# ------------------------------------------------------------------ multi-Region
begin "main in two Regions: one build, one deploy per Region, subscribers table from the events stack"
existing_events
mkdir -p "$STATE/apigw-role"
echo "arn:aws:iam::123456789012:role/apigw-logs" >"$STATE/apigw-role/eu-west-1"
deploy main --product-code abc123 --region us-west-2 --region eu-west-1 --stage prod --yes
expect_exit 0
expect_calls "sam build" 1
expect_calls "sam build --template-file template-main.yaml" 1
expect_no_call "sam deploy --template-file .aws-sam/build-events"
expect_calls "sam deploy" 2
expect_call "aws cloudformation describe-stacks --stack-name awsmp-events-prod --region us-east-1 --query Stacks[0].Outputs[?OutputKey=='SubscribersTableName'].OutputValue"
DEPLOY_MAIN="sam deploy --template-file .aws-sam/build-main/template.yaml --stack-name awsmp-main-abc123-prod"
expect_in_call "$DEPLOY_MAIN --region us-west-2" "ApiGatewayLoggingRole=create"
expect_in_call "$DEPLOY_MAIN --region eu-west-1" "ApiGatewayLoggingRole=existing"
expect_in_call "$DEPLOY_MAIN --region eu-west-1" "SubscribersTableName=awsmp-subscribers-prod"
expect_in_call "$DEPLOY_MAIN --region eu-west-1" "SubscribersTableRegion=us-east-1"
expect_order "--region us-west-2 --config-file" "--region eu-west-1 --config-file"
expect_out "us-west-2: Fulfillment URL https://page-us-west-2.cloudfront.net/fulfillment"
expect_out "eu-west-1: Fulfillment URL https://page-eu-west-1.cloudfront.net/fulfillment"
end

begin "a Region given twice is deployed once"
existing_events
deploy main --product-code abc123 --region us-west-2 --region us-west-2 --stage prod --dry-run
expect_exit 0
expect_err "Region us-west-2 given twice"
[ "$(grep -c "main stack awsmp-main-abc123-prod" "$WORK/out")" = 1 ] || fail "Region planned twice"
end

begin "main and events in us-east-1 together: one concurrency check counting both stacks"
mkdir -p "$STATE/lambda-unreserved"
echo 103 >"$STATE/lambda-unreserved/us-east-1"
deploy all --product-code abc123 --region us-east-1 --stage prod --dry-run
# deprovision-cleanup 1 + submitter 1 + discoverer 2 = 4 > 103 - 100
expect_exit 3
expect_err "the stacks reserve 4 execution(s), and 103 are unreserved"
end

# ------------------------------------------------------------------ page upload
begin "page files are uploaded with config.json, then CloudFront is invalidated"
existing_events
mkdir -p "$WORK/page"
echo "<html></html>" >"$WORK/page/index.html"
deploy main --product-code abc123 --region us-west-2 --stage prod --page-dir "$WORK/page" --yes
expect_exit 0
expect_call "aws s3 sync $WORK/page s3://page-bucket-us-west-2/ --region us-west-2"
expect_call "s3://page-bucket-us-west-2/config.json --region us-west-2 --content-type application/json"
expect_call "aws cloudfront create-invalidation --distribution-id DISTus-west-2 --paths /*"
expect_order "sam deploy" "aws s3 sync"
grep -qF '"registerUrl":"https://page-us-west-2.cloudfront.net/register","fulfillmentUrl":"https://page-us-west-2.cloudfront.net/fulfillment"' "$STATE/s3/config.json" ||
  fail "config.json does not name the page-origin URLs: $(cat "$STATE/s3/config.json")"
grep -qF '"wafIntegrationUrl":""' "$STATE/s3/config.json" || fail "config.json names an SDK without the challenge: $(cat "$STATE/s3/config.json")"
expect_no_call "wafv2"
end

begin "WafRegisterChallenge: config.json names the WebACL's integration SDK"
existing_events
mkdir -p "$WORK/page" "$STATE/waf-integration-url"
echo "<html></html>" >"$WORK/page/index.html"
echo "https://abc123.us-west-2.sdk.awswaf.com/abc123/def456/" >"$STATE/waf-integration-url/us-west-2"
deploy main --product-code abc123 --region us-west-2 --stage prod --page-dir "$WORK/page" --parameter WafRegisterChallenge=enabled --yes
expect_exit 0
expect_call "aws wafv2 get-web-acl --scope REGIONAL --region us-west-2 --name awsmp-register --id ACLus-west-2 --query ApplicationIntegrationURL"
grep -qF '"wafIntegrationUrl":"https://abc123.us-west-2.sdk.awswaf.com/abc123/def456/"' "$STATE/s3/config.json" ||
  fail "config.json lacks the SDK URL: $(cat "$STATE/s3/config.json" 2>/dev/null)"
end

begin "WafRegisterChallenge without an integration URL stops before the page is uploaded"
existing_events
mkdir -p "$WORK/page"
echo "<html></html>" >"$WORK/page/index.html"
deploy main --product-code abc123 --region us-west-2 --stage prod --page-dir "$WORK/page" --parameter WafRegisterChallenge=enabled --yes
expect_exit 3
expect_err "gave no integration SDK URL (got 'None')"
expect_err "WafRegisterChallenge=disabled"
expect_no_call "aws s3 sync"
end

# ------------------------------------------------------------------ modes
begin "dry-run metering needs test accounts"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --metering-mode dry-run --dry-run
expect_exit 2
expect_err "give them with --test-accounts"
no_changes
end

begin "dry-run metering with test accounts is passed to the main stack"
existing_events
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --metering-mode dry-run --test-accounts 111122223333,444455556666 --yes
expect_exit 0
expect_in_call "sam deploy" "MeteringMode=dry-run"
expect_in_call "sam deploy" "TestAccountAllowlist=111122223333,444455556666"
end

begin "live metering clears the test-account allowlist"
existing_events
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --metering-mode live --yes
expect_exit 0
expect_in_call "sam deploy" "MeteringMode=live"
expect_in_call "sam deploy" 'TestAccountAllowlist=""'
end

begin "live metering refuses test accounts"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --metering-mode live --test-accounts 111122223333 --dry-run
expect_exit 2
expect_err "--test-accounts is only for dry-run"
end

begin "direct-submit reserves only the submitter's concurrency"
mkdir -p "$STATE/lambda-unreserved"
echo 101 >"$STATE/lambda-unreserved/us-west-2"
existing_events
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --deployment-mode direct-submit --dry-run
expect_exit 0
expect_out "DeploymentMode=direct-submit"
end

begin "the metering quota is shared with the other main stacks in the Region"
existing_events
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --yes
expect_exit 0
expect_in_call "sam deploy" "MeteringRequestsPerSecond=10"
expect_call "aws cloudformation list-stacks --region us-west-2"
stack us-west-2 awsmp-main-other1-prod UPDATE_COMPLETE
stack us-west-2 awsmp-main-other2-prod UPDATE_COMPLETE
: >"$LOG"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --yes
expect_exit 0
expect_in_call "sam deploy" "MeteringRequestsPerSecond=3"
expect_err "2 other awsmp main stack(s) in us-west-2"
expect_err "--parameter MeteringRequestsPerSecond=3"
: >"$LOG"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --parameter MeteringRequestsPerSecond=5 --yes
expect_exit 0
expect_in_call "sam deploy" "MeteringRequestsPerSecond=5"
expect_no_call "list-stacks"
end

begin "--parameter passes a template parameter; unknown or managed ones are refused"
existing_events
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --parameter MeteringLockHours=3 --dry-run
expect_exit 0
expect_out "MeteringLockHours=3"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --parameter NoSuchThing=1 --dry-run
expect_exit 2
expect_err "'NoSuchThing' is not a parameter of the template(s) 'main' deploys"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --parameter SubscribersTableName=other --dry-run
expect_exit 2
expect_err "is set by deploy.sh itself"
# shellcheck disable=SC2086
deploy events --stage prod --parameter ProductCode=x --dry-run
expect_exit 2
end

begin "an alerts topic in another Region is refused"
existing_events
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --alerts-topic-arn arn:aws:sns:us-east-1:123456789012:alerts --dry-run
expect_exit 2
expect_err "alarms can only notify a topic in their own Region"
end

# ------------------------------------------------------------------ preflight failures
begin "preflight: no aws CLI"
without_tool aws
deploy events --stage prod --dry-run
expect_exit 3
expect_err "the AWS CLI (aws) is not on PATH"
expect_err "Install AWS CLI v2"
end

begin "preflight: no sam CLI"
without_tool sam
deploy events --stage prod --dry-run
expect_exit 3
expect_err "the AWS SAM CLI (sam) is not on PATH"
expect_no_call "aws "
end

begin "preflight: no cargo-lambda"
without_tool cargo-lambda
deploy events --stage prod --dry-run
expect_exit 3
expect_err "pip install cargo-lambda"
end

begin "preflight: no zig"
without_tool zig
deploy events --stage prod --dry-run
expect_exit 3
expect_err "zig is not on PATH"
end

begin "preflight: build tools other than the pinned versions are refused, with the fix and the override"
echo 1.8.0 >"$STATE/cargo-lambda-version"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
expect_exit 3
expect_err "cargo-lambda 1.8.0 (pinned: $(sed -nE 's/^cargo-lambda==([^ ]+).*$/\1/p' "$ROOT/tools/requirements-sam.txt"))"
expect_err "make sam-venv"
expect_err "AWSMP_ANY_TOOL_VERSIONS=1"
no_changes
AWSMP_ANY_TOOL_VERSIONS=1 deploy all $MAIN_ARGS --dry-run
expect_exit 0
rm -f "$STATE/cargo-lambda-version"
end

begin "page bucket: deploy.sh passes the publisher it runs as, and the logo's origin from config.js"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --dry-run
expect_exit 0
expect_out "PagePublisherArn=arn:aws:iam::123456789012:role/deployer"
grep -qF "PageLogoOrigin" "$WORK/out" && fail "a relative or empty logoUrl needs no PageLogoOrigin"
mkdir -p "$WORK/page"
sed 's#logoUrl: ""#logoUrl: "https://cdn.example.com/brand/logo.svg"#' "$ROOT/web/config.js" >"$WORK/page/config.js"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --page-dir "$WORK/page" --dry-run
expect_exit 0
expect_out "PageLogoOrigin=https://cdn.example.com"
echo "arn:aws:iam::123456789012:user/alice" >"$STATE/caller-arn"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --parameter ProfileKey=shared --dry-run
expect_exit 0
expect_out "PagePublisherArn=arn:aws:iam::123456789012:user/alice"
rm -f "$STATE/caller-arn"
end

begin "preflight: no credentials"
touch "$STATE/no-credentials"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
expect_exit 3
expect_err "no usable AWS credentials"
expect_err "Unable to locate credentials"
expect_err "aws sso login"
no_changes
end

begin "preflight: a Region without BatchMeterUsage is refused, with the list and the override"
deploy main --product-code abc123 --region ap-southeast-7 --stage prod --dry-run
expect_exit 2
expect_err "BatchMeterUsage is not offered in ap-southeast-7"
expect_err "eu-central-2"
expect_err "--allow-unlisted-region"
expect_no_call "aws "
end

begin "preflight: --allow-unlisted-region deploys there with a warning"
existing_events
deploy main --product-code abc123 --region ap-southeast-7 --stage prod --allow-unlisted-region --dry-run
expect_exit 0
expect_err "deploying anyway"
expect_out "main stack awsmp-main-abc123-prod (ap-southeast-7): CREATE (first deploy)"
end

begin "preflight: not a Region name"
deploy main --product-code abc123 --region uswest2 --stage prod --dry-run
expect_exit 2
expect_err "'uswest2' is not an AWS Region name"
end

begin "preflight: product code format"
deploy main --product-code Bad-Code --region us-west-2 --stage prod --dry-run
expect_exit 2
expect_err "product code 'Bad-Code' is not valid"
deploy main --region us-west-2 --stage prod --dry-run
expect_exit 2
expect_err "--product-code is required"
deploy events --product-code abc123 --stage prod --dry-run
expect_exit 2
expect_err "--product-code is for 'main' and 'all'"
end

begin "preflight: stage name format"
deploy events --stage Prod --dry-run
expect_exit 2
expect_err "stage 'Prod' is not valid"
deploy events --stage a-stage-name-too-long --dry-run
expect_exit 2
deploy events --dry-run
expect_exit 2
expect_err "--stage is required"
deploy events --stage --dry-run
expect_exit 2
expect_err "--stage needs a value"
end

begin "preflight: main needs the events stack"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --yes
expect_exit 4
expect_err "the events stack awsmp-events-prod does not exist in us-east-1"
expect_err "./deploy.sh events --stage prod"
no_changes
end

begin "preflight: a busy stack is left alone"
existing_events UPDATE_IN_PROGRESS
deploy events --stage prod --yes
expect_exit 4
expect_err "is busy (UPDATE_IN_PROGRESS)"
no_changes
end

begin "preflight: a failed first create is never deleted or recreated by deploy.sh"
existing_events ROLLBACK_COMPLETE
deploy events --stage prod --yes
expect_exit 4
expect_err "deploy.sh never deletes a stack"
expect_err "aws cloudformation describe-stack-events --stack-name awsmp-events-prod --region us-east-1"
no_changes
end

begin "preflight: UPDATE_ROLLBACK_FAILED needs continue-update-rollback"
existing_events
existing_main us-west-2 UPDATE_ROLLBACK_FAILED
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --yes
expect_exit 4
expect_err "aws cloudformation continue-update-rollback --stack-name awsmp-main-abc123-prod --region us-west-2"
no_changes
end

begin "preflight: a retained subscribers table without its stack stops the create"
mkdir -p "$STATE/tables/us-east-1"
touch "$STATE/tables/us-east-1/awsmp-subscribers-prod"
deploy events --stage prod --yes
expect_exit 4
expect_err "table awsmp-subscribers-prod already exists in us-east-1, and stack awsmp-events-prod does not"
expect_err "--change-set-type IMPORT"
no_changes
end

begin "preflight: another stage's customer-profile table stops a second stage in the Region"
existing_events
mkdir -p "$STATE/tables/us-west-2"
touch "$STATE/tables/us-west-2/awsmp-abc123-customer-profile"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --yes
expect_exit 4
expect_err "table awsmp-abc123-customer-profile already exists in us-west-2"
no_changes
end

begin "preflight: too little Lambda concurrency for the reserved functions"
existing_events
mkdir -p "$STATE/lambda-unreserved"
echo 10 >"$STATE/lambda-unreserved/us-west-2"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --yes
expect_exit 3
expect_err "Lambda concurrency in us-west-2 is too low"
expect_err "Service Quotas"
no_changes
end

begin "not on a terminal and no --yes: the plan is printed, nothing deployed"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS
expect_exit 2
expect_out "awsmp-metering deploy plan"
expect_err "re-run with --yes"
no_changes
end

# ------------------------------------------------------------------ --review
# A change set with one change of each kind, over two pages.
main_change_set() {
  mkdir -p "$STATE/changes"
  cat >"$STATE/changes/awsmp-main-abc123-prod.json" <<'EOF'
{"Status": "CREATE_COMPLETE", "NextToken": "page2", "Changes": [
 {"Type": "Resource", "ResourceChange": {"Action": "Add", "LogicalResourceId": "HeartbeatAlarm", "ResourceType": "AWS::CloudWatch::Alarm"}},
 {"Type": "Resource", "ResourceChange": {"Action": "Modify", "LogicalResourceId": "UsageTable", "ResourceType": "AWS::DynamoDB::Table", "Replacement": "True", "PolicyAction": "ReplaceAndRetain"}},
 {"Type": "Resource", "ResourceChange": {"Action": "Modify", "LogicalResourceId": "SubmitQueue", "ResourceType": "AWS::SQS::Queue", "Replacement": "Conditional"}},
 {"Type": "Resource", "ResourceChange": {"Action": "Modify", "LogicalResourceId": "SubmitterFunction", "ResourceType": "AWS::Lambda::Function", "Replacement": "False"}}]}
EOF
  cat >"$STATE/changes/awsmp-main-abc123-prod.page2.json" <<'EOF'
{"Status": "CREATE_COMPLETE", "Changes": [
 {"Type": "Resource", "ResourceChange": {"Action": "Remove", "LogicalResourceId": "OldDashboard", "ResourceType": "AWS::CloudWatch::Dashboard", "PolicyAction": "Delete"}}]}
EOF
}

begin "--review: the change set is shown, replacements and removals marked, and executed on yes"
existing_events
existing_main us-west-2
main_change_set
# shellcheck disable=SC2086
answering y main $MAIN_ARGS --review
expect_exit 0
expect_out "--review: each stack's change set is created and shown"
expect_in_call "sam deploy" "--no-execute-changeset"
expect_out "change set for awsmp-main-abc123-prod (us-west-2): 5 resource change(s)"
grep -Eq '^ +!! Modify +UsageTable +AWS::DynamoDB::Table +REPLACED .*the old resource is retained' "$WORK/out" || fail "UsageTable not marked REPLACED"
grep -Eq '^ +! +Modify +SubmitQueue .*MAY BE REPLACED' "$WORK/out" || fail "SubmitQueue not marked as maybe replaced"
grep -Eq '^ +!! Remove +OldDashboard .*REMOVED; the old resource is deleted' "$WORK/out" || fail "OldDashboard (second page) not marked REMOVED"
grep -Eq '^ +Modify +SubmitterFunction .*in place' "$WORK/out" || fail "SubmitterFunction not shown as in place"
grep -Eq '^ +Add +HeartbeatAlarm' "$WORK/out" || fail "HeartbeatAlarm not shown as added"
expect_out "1 to add, 3 to modify (1 replaced, 1 may be replaced), 1 to remove"
expect_out "Execute this change set on awsmp-main-abc123-prod (us-west-2)? [y/N]"
expect_call "aws cloudformation describe-change-set --change-set-name arn:aws:cloudformation:us-west-2:123456789012:changeSet/samcli-deploy1700000000/awsmp-main-abc123-prod --region us-west-2 --output json --next-token page2"
expect_order "describe-change-set" "execute-change-set"
expect_call "aws cloudformation execute-change-set --change-set-name arn:aws:cloudformation:us-west-2:123456789012:changeSet/samcli-deploy1700000000/awsmp-main-abc123-prod --stack-name awsmp-main-abc123-prod --region us-west-2"
expect_order "execute-change-set" "aws cloudformation wait stack-update-complete --stack-name awsmp-main-abc123-prod --region us-west-2"
expect_order "aws cloudformation wait" "update-termination-protection"
expect_no_call "delete-change-set"
expect_out "us-west-2: Fulfillment URL https://page-us-west-2.cloudfront.net/fulfillment"
end

begin "--review: no (or no answer) deletes the change set and deploys nothing after it"
# shellcheck disable=SC2086
answering n all $MAIN_ARGS --review
expect_exit 0
expect_calls "sam deploy" 1
expect_in_call "sam deploy" "--stack-name awsmp-events-prod"
expect_call "aws cloudformation delete-change-set --change-set-name arn:aws:cloudformation:us-east-1:123456789012:changeSet/samcli-deploy1700000000/awsmp-events-prod --region us-east-1"
expect_no_call "execute-change-set"
expect_no_call "update-termination-protection"
expect_out "Change set deleted; awsmp-events-prod in us-east-1 is unchanged, and nothing after it was deployed."
expect_no_out "Done."
[ ! -e "$STATE/stacks/us-east-1/awsmp-events-prod" ] || fail "the events stack was created"
: >"$LOG"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --review
expect_exit 0
expect_call "delete-change-set"
expect_no_call "execute-change-set"
end

begin "--review: each stack is asked for in turn (yes to events, no to main)"
# shellcheck disable=SC2086
answering "y
n" all $MAIN_ARGS --review
expect_exit 0
expect_call "aws cloudformation execute-change-set --change-set-name arn:aws:cloudformation:us-east-1:123456789012:changeSet/samcli-deploy1700000000/awsmp-events-prod"
expect_call "aws cloudformation wait stack-create-complete --stack-name awsmp-events-prod --region us-east-1"
expect_call "update-termination-protection --enable-termination-protection --stack-name awsmp-events-prod"
expect_call "delete-change-set --change-set-name arn:aws:cloudformation:us-west-2:123456789012:changeSet/samcli-deploy1700000000/awsmp-main-abc123-prod"
expect_no_call "update-termination-protection --enable-termination-protection --stack-name awsmp-main-abc123-prod"
[ "$(cat "$STATE/stacks/us-east-1/awsmp-events-prod/status" 2>/dev/null)" = CREATE_COMPLETE ] || fail "the events stack was not created"
end

begin "--review: a stack without changes is not asked about"
existing_events
mkdir -p "$STATE/no-changes"
touch "$STATE/no-changes/awsmp-events-prod"
deploy events --stage prod --review
expect_exit 0
expect_out "awsmp-events-prod (us-east-1) is up to date: no change set to review."
expect_no_call "describe-change-set"
expect_no_out "[y/N]"
expect_out "Done."
end

begin "--review: a change set that fails to apply stops with where to look"
existing_events
touch "$STATE/wait-fails"
answering y events --stage prod --review
expect_exit 4
expect_err "the change set on awsmp-events-prod in us-east-1 did not complete"
expect_err "aws cloudformation describe-stack-events --stack-name awsmp-events-prod --region us-east-1"
expect_err "UPDATE_ROLLBACK_COMPLETE"
end

begin "--review: refused with --yes; the dry run prints the change-set-only commands"
deploy events --stage prod --review --yes
expect_exit 2
expect_err "--review asks before executing each change set and --yes says never ask"
deploy events --stage prod --review --dry-run
expect_exit 0
expect_out "--no-execute-changeset"
no_changes
end

begin "the main stacks get the events stack's DataKmsKeyArn as SubscribersKmsKeyArn, in this run and later ones"
KEY=arn:aws:kms:us-east-1:123456789012:key/events-data
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --parameter "DataKmsKeyArn=$KEY" --yes
expect_exit 0
expect_in_call "sam deploy --template-file .aws-sam/build-events" "DataKmsKeyArn=$KEY"
expect_in_call "sam deploy --template-file .aws-sam/build-main" "SubscribersKmsKeyArn=$KEY"
: >"$LOG"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --yes
expect_exit 0
expect_in_call "sam deploy --template-file .aws-sam/build-main" "SubscribersKmsKeyArn=$KEY"
end

begin "without DataKmsKeyArn the main stacks' SubscribersKmsKeyArn is empty, unless given"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
expect_exit 0
expect_in_call "sam deploy --template-file .aws-sam/build-main" 'SubscribersKmsKeyArn=""'
: >"$LOG"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --parameter SubscribersKmsKeyArn=arn:aws:kms:us-east-1:123456789012:key/other --yes
expect_exit 0
expect_in_call "sam deploy --template-file .aws-sam/build-main" "SubscribersKmsKeyArn=arn:aws:kms:us-east-1:123456789012:key/other"
end

begin "deploy summary: the buyer-profile advice goes once ProfileAccessRoleArn is set, and stays on an update that keeps it"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --parameter "ProfileAccessRoleArn=arn:aws:iam::123456789012:role/pii-reader" --yes
expect_exit 0
expect_in_call "sam deploy --template-file .aws-sam/build-main" "ProfileAccessRoleArn=arn:aws:iam::123456789012:role/pii-reader"
expect_no_out "buyer profiles: only the register function"
# shellcheck disable=SC2086
deploy main $MAIN_ARGS --yes
expect_exit 0
expect_no_out "buyer profiles: only the register function"
end

# ------------------------------------------------------------------ --cfn-role (docs/deployer.md)
CFN_ROLE=arn:aws:iam::123456789012:role/CloudFormation-awsmp-metering
BOUNDARY=arn:aws:iam::123456789012:policy/Boundary-awsmp-metering

begin "--cfn-role: both stacks' sam deploy get --role-arn, and nothing else changes; without it, no --role-arn"
deploy --help
expect_out "--cfn-role ARN"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --parameter "PermissionsBoundaryArn=$BOUNDARY" --yes
expect_exit 0
expect_calls "sam deploy" 2
expect_no_call "--role-arn"
expect_no_out "CloudFormation role"
# Without it, the main stack's created profile key is narrowed to the caller's role.
expect_in_call "sam deploy --template-file .aws-sam/build-main" "DeployerRoleArn=arn:aws:iam::123456789012:role/deployer"
grep -F "sam deploy " "$LOG" | sed -e "s| DeployerRoleArn=arn:aws:iam::123456789012:role/deployer||" >"$WORK/without-role"
rm -rf "$STATE/stacks"
: >"$LOG"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --parameter "PermissionsBoundaryArn=$BOUNDARY" --cfn-role "$CFN_ROLE" --yes
expect_exit 0
expect_out "CloudFormation role: $CFN_ROLE"
expect_calls "sam deploy" 2
expect_calls "--role-arn $CFN_ROLE " 2
expect_in_call "sam deploy --template-file .aws-sam/build-events" "--role-arn $CFN_ROLE"
expect_in_call "sam deploy --template-file .aws-sam/build-main" "--role-arn $CFN_ROLE"
expect_in_call "sam deploy --template-file .aws-sam/build-events" "PermissionsBoundaryArn=$BOUNDARY"
expect_in_call "sam deploy --template-file .aws-sam/build-main" "PermissionsBoundaryArn=$BOUNDARY"
# The main stack's profile key is narrowed to the role (DeployerRoleArn); the events
# stack has no such parameter.
expect_in_call "sam deploy --template-file .aws-sam/build-main" "DeployerRoleArn=$CFN_ROLE"
grep -F "sam deploy --template-file .aws-sam/build-events" "$LOG" | grep -qF DeployerRoleArn &&
  fail "the events stack was given DeployerRoleArn"
grep -F "sam deploy " "$LOG" | sed -e "s| --role-arn $CFN_ROLE||" -e "s| DeployerRoleArn=$CFN_ROLE||" >"$WORK/with-role"
diff "$WORK/without-role" "$WORK/with-role" >/dev/null ||
  fail "--cfn-role changed more than --role-arn and DeployerRoleArn: $(diff "$WORK/without-role" "$WORK/with-role")"
end

begin "ProfileKey=create: a first deploy passes the caller's role as DeployerRoleArn; an IAM user must name one; shared needs none"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
expect_exit 0
expect_in_call "sam deploy --template-file .aws-sam/build-main" "DeployerRoleArn=arn:aws:iam::123456789012:role/deployer"
rm -rf "$STATE/stacks"
: >"$LOG"
echo "arn:aws:iam::123456789012:user/alice" >"$STATE/caller-arn"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
expect_exit 2
expect_err "ProfileKey=create (the default) needs DeployerRoleArn"
expect_calls "sam deploy" 0
: >"$LOG"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --parameter ProfileKey=shared --yes
expect_exit 0
grep -F "sam deploy --template-file .aws-sam/build-main" "$LOG" | grep -qF DeployerRoleArn &&
  fail "ProfileKey=shared was given DeployerRoleArn"
rm -rf "$STATE/stacks"
: >"$LOG"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --parameter DeployerRoleArn=arn:aws:iam::123456789012:role/ci/deployer --yes
expect_exit 0
expect_in_call "sam deploy --template-file .aws-sam/build-main" "DeployerRoleArn=arn:aws:iam::123456789012:role/ci/deployer"
end

begin "ProfileKey=create: an update of a stack without DeployerRoleArn passes the caller's role; one that has it keeps it"
existing_events
existing_main us-west-2
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
expect_exit 0
expect_in_call "sam deploy --template-file .aws-sam/build-main" "DeployerRoleArn=arn:aws:iam::123456789012:role/deployer"
: >"$LOG"
echo "arn:aws:iam::123456789012:role/awsmp-cfn" >"$STATE/stacks/us-west-2/awsmp-main-abc123-prod/params/DeployerRoleArn"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
expect_exit 0
grep -F "sam deploy --template-file .aws-sam/build-main" "$LOG" | grep -qF DeployerRoleArn &&
  fail "a stack with DeployerRoleArn was given another"
end

begin "--cfn-role: AWSMP_CFN_ROLE_ARN sets it; the dry run and --review carry it too"
printf '#!/bin/bash\nAWSMP_CFN_ROLE_ARN=%s exec bash %q "$@"\n' "$CFN_ROLE" "$ROOT/deploy.sh" >"$WORK/with-role-env.sh"
DEPLOY_SH="$WORK/with-role-env.sh"
deploy events --stage prod --parameter "PermissionsBoundaryArn=$BOUNDARY" --dry-run
expect_exit 0
[ "$(grep -cF -- "  sam deploy --template-file .aws-sam/build-events/template.yaml --stack-name awsmp-events-prod --region us-east-1 --config-file samconfig.toml --config-env prod-events --capabilities CAPABILITY_IAM --resolve-s3 --no-fail-on-empty-changeset --no-confirm-changeset --role-arn $CFN_ROLE " "$WORK/out")" = 1 ] ||
  fail "the dry run does not print sam deploy with --role-arn"
no_changes
answering y events --stage prod --parameter "PermissionsBoundaryArn=$BOUNDARY" --review
expect_exit 0
expect_in_call "sam deploy" "--role-arn $CFN_ROLE"
expect_in_call "sam deploy" "--no-execute-changeset"
expect_call "execute-change-set"
end

begin "--cfn-role: refused when not a role ARN, of another account, or for a create without PermissionsBoundaryArn"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --cfn-role arn:aws:iam::123456789012:policy/not-a-role --dry-run
expect_exit 2
expect_err "must be an IAM role ARN"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --cfn-role arn:aws:iam::999999999999:role/CloudFormation-awsmp-metering --dry-run
expect_exit 3
expect_err "belongs to another account than these credentials' (123456789012)"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --cfn-role "$CFN_ROLE" --yes
expect_exit 2
expect_err "stack awsmp-events-prod (us-east-1) would be created without PermissionsBoundaryArn"
no_changes
# An update keeps the stack's own PermissionsBoundaryArn: nothing to check.
existing_events
existing_main us-west-2
: >"$LOG"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --cfn-role "$CFN_ROLE" --yes
expect_exit 0
expect_calls "--role-arn $CFN_ROLE " 2
end

# ------------------------------------------------------------------ failures while deploying
begin "a failing events deploy stops before any main stack"
touch "$STATE/sam-deploy-fails"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
[ "$RC" != 0 ] || fail "exit 0 after a failed sam deploy"
expect_calls "sam deploy" 1
expect_no_call "sam deploy --template-file .aws-sam/build-main"
expect_no_out "Done."
end

begin "a failing build deploys nothing"
touch "$STATE/sam-build-fails"
# shellcheck disable=SC2086
deploy all $MAIN_ARGS --yes
[ "$RC" != 0 ] || fail "exit 0 after a failed sam build"
expect_no_call "sam deploy"
end

# ------------------------------------------------------------------ the local stack
# local_checkout [real]: a copy of deploy.sh with a scripts/check-prereqs.sh that
# records its call and fails when $FAKE_STATE/prereqs-missing exists (or, with
# "real", the checkout's own check).
local_checkout() {
  rm -rf "$WORK/checkout"
  mkdir -p "$WORK/checkout/scripts"
  cp "$ROOT/deploy.sh" "$ROOT/rust-toolchain.toml" "$WORK/checkout/"
  if [ "${1:-}" = real ]; then
    cp "$ROOT/scripts/check-prereqs.sh" "$WORK/checkout/scripts/"
  else
    cat >"$WORK/checkout/scripts/check-prereqs.sh" <<'EOF'
printf 'check-prereqs %s\n' "$*" >>"$FAKE_LOG"
if [ -e "$FAKE_STATE/prereqs-missing" ]; then
  echo "check-prereqs: missing: Rust (rustup and cargo)" >&2
  exit 3
fi
EOF
  fi
  DEPLOY_SH="$WORK/checkout/deploy.sh"
}

begin "--local checks the prerequisites, then runs awsmp local up with its options"
local_checkout
deploy --local --serve
expect_exit 0
expect_call "check-prereqs --for local"
expect_order "check-prereqs" "cargo run"
# The debug build make test uses, not the Lambda artifacts' release profile (full LTO).
expect_call "cargo run -p awsmp-cli --features local --bin awsmp -- local up --serve"
expect_not_in_call "cargo run" "--release"
expect_no_call "aws "
expect_no_call "sam "
end

begin "--local stops on a missing prerequisite before building"
local_checkout
touch "$STATE/prereqs-missing"
deploy --local
expect_exit 3
expect_err "missing: Rust (rustup and cargo)"
expect_no_call "cargo "
end

begin "--local without Rust says how to get it"
local_checkout real
without_tool cargo
deploy --local
expect_exit 3
expect_err "check-prereqs: missing: Rust (rustup and cargo)"
expect_err "https://sh.rustup.rs"
expect_no_call "cargo "
end

# ------------------------------------------------------------------ prerequisites
# scripts/check-prereqs.sh on a PATH of stand-ins: prq_tool NAME writes one, the
# defaults are a machine with everything (as root); prereqs ARGS runs the check.
PINNED=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$ROOT/rust-toolchain.toml")
prq_tool() {
  printf '#!/bin/bash\n%s\n' "$2" >"$WORK/prq/$1"
  chmod +x "$WORK/prq/$1"
}
prq_machine() {
  rm -rf "$WORK/prq"
  mkdir -p "$WORK/prq"
  prq_tool rustup "[ \"\$1 \$2\" = 'toolchain list' ] && printf '%s\n' stable-x86_64-unknown-linux-gnu '$PINNED-x86_64-unknown-linux-gnu (active)'"
  prq_tool cargo "exit 0"
  prq_tool rustc "echo 'rustc $PINNED (fake)'"
  prq_tool cc "exit 0"
  prq_tool make "exit 0"
  prq_tool node "echo 20"
  prq_tool npm "exit 0"
  prq_tool apt-get "exit 0"
  prq_tool id "echo 0"
  prq_tool chromium "exit 0"
  if [ -n "${PYTHON3:-}" ]; then ln -s "$PYTHON3" "$WORK/prq/python3"; fi
  PRQ_PYTHON=python3
}
prereqs() {
  : >"$LOG"
  env -i HOME="$WORK" PATH="$WORK/prq:$SYSBIN_NO_PYTHON" AWSMP_CHROMIUM="$WORK/prq/chromium" PYTHON="$PRQ_PYTHON" \
    bash "$ROOT/scripts/check-prereqs.sh" "$@" </dev/null >"$WORK/out" 2>"$WORK/err"
  RC=$?
}

begin "prerequisites: a machine with everything passes"
prq_machine
prereqs
expect_exit 0
expect_out "check-prereqs: everything make test needs is here"
prereqs --for local
expect_exit 0
expect_out "everything ./deploy.sh --local needs is here"
end

begin "prerequisites: no Rust at all, or rustup without the pinned toolchain"
prq_machine
rm "$WORK/prq/rustup" "$WORK/prq/cargo" "$WORK/prq/rustc"
prereqs --for local
expect_exit 3
expect_err "missing: Rust (rustup and cargo)"
expect_err "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh"
expect_err "rustup toolchain install $PINNED --profile minimal --component rustfmt,clippy"
expect_err "1 prerequisite(s) of ./deploy.sh --local missing"
prq_machine
prq_tool rustup "[ \"\$1 \$2\" = 'toolchain list' ] && echo stable-x86_64-unknown-linux-gnu"
prereqs
expect_exit 3
expect_err "missing: Rust toolchain $PINNED (pinned in rust-toolchain.toml)"
expect_err "get it:     rustup toolchain install $PINNED"
prq_machine
rm "$WORK/prq/rustup"
prq_tool rustc "echo 'rustc 1.63.0 (debian)'"
prereqs --for local
expect_exit 3
expect_err "missing: rustup (cargo 1.63.0 is not rustup's, and rust-toolchain.toml pins $PINNED)"
end

begin "prerequisites: no linker, an old Python, a Python without venv (python3-venv)"
prq_machine
rm "$WORK/prq/cc"
prereqs --for local
expect_exit 3
expect_err "missing: a C compiler and linker (cc)"
expect_err "get it:     apt-get install -y build-essential"
prq_machine
prq_tool oldpython 'case "$2" in *print*) echo 3.9 ;; *) exit 1 ;; esac'
PRQ_PYTHON="$WORK/prq/oldpython"
prereqs --for local
expect_exit 3
expect_err "missing: Python 3.11+ ($WORK/prq/oldpython is 3.9)"
prq_machine
prq_tool nopip "case \"\$2\" in *ensurepip*) echo 'No module named ensurepip' >&2; exit 1 ;; *) exec '$PYTHON3' \"\$@\" ;; esac"
PRQ_PYTHON="$WORK/prq/nopip"
prereqs --for local
expect_exit 3
expect_err "missing: Python's venv with ensurepip (Debian/Ubuntu package python3-venv)"
expect_err "apt-get install -y python3-venv"
prq_machine
rm "$WORK/prq/python3"
prereqs --for local
expect_exit 3
expect_err "missing: Python 3.11+ (python3)"
expect_err "apt-get install -y python3 python3-venv"
end

begin "prerequisites: make test also needs Node and npm, and Chromium or root to install it"
prq_machine
rm "$WORK/prq/node" "$WORK/prq/chromium"
prq_tool id "echo 1000"
prereqs
expect_exit 3
expect_err "missing: Node.js 18+ and npm"
expect_err "get it:     as root: apt-get install -y nodejs npm"
expect_err "missing: Chromium at $WORK/prq/chromium (make test installs it with apt-get, which needs root; you are not root and there is no sudo)"
expect_err "as root: apt-get install -y chromium fonts-liberation"
expect_err "2 prerequisite(s) of make test missing"
# With sudo, make test installs Chromium itself; the commands say sudo.
prq_tool sudo "exit 0"
prereqs
expect_exit 3
expect_err "get it:     sudo apt-get install -y nodejs npm"
expect_err "1 prerequisite(s) of make test missing"
prq_tool node "echo 16"
prereqs
expect_exit 3
expect_err "missing: Node.js 18+ (node is"
# None of that is needed locally.
prereqs --for local
expect_exit 0
end

begin "prerequisites: --install installs what apt-get and rustup can, says each command, then checks again"
prq_machine
rm "$WORK/prq/cc" "$WORK/prq/make" "$WORK/prq/node"
# apt-get and rustup as stand-ins that log their calls and "install" what they are asked
# for (a copy of an executable stand-in: the stand-ins' PATH has cp, not chmod).
printf '#!/bin/bash\necho 20\n' >"$WORK/prq-installed"
chmod +x "$WORK/prq-installed"
prq_tool apt-get "printf 'apt-get %s\n' \"\$*\" >>'$LOG'; for p in \"\$@\"; do case \$p in build-essential) n=cc ;; nodejs) n=node ;; -*|install|update) continue ;; *) n=\$p ;; esac; cp '$WORK/prq-installed' '$WORK/prq/'\$n; done"
prereqs --install
expect_exit 0
expect_err "check-prereqs: installing: apt-get install -y build-essential make nodejs npm"
expect_err "check-prereqs: checking again"
expect_call "apt-get install -y -qq build-essential make nodejs npm"
expect_out "check-prereqs: everything make test needs is here"
# The pinned toolchain through rustup.
prq_machine
prq_tool rustup "printf 'rustup %s\n' \"\$*\" >>'$LOG'; if [ -f '$WORK/prq/.installed' ] || [ \"\$1\" = toolchain -a \"\$2\" = install ]; then : >'$WORK/prq/.installed'; echo '$PINNED-x86_64-unknown-linux-gnu'; else echo stable-x86_64-unknown-linux-gnu; fi"
prereqs --for local --install
expect_exit 0
expect_call "rustup toolchain install $PINNED --profile minimal --component rustfmt,clippy"
expect_out "everything ./deploy.sh --local needs is here"
# ./deploy.sh --local installs make too, for make test after it.
prq_machine
rm "$WORK/prq/make"
prq_tool apt-get "printf 'apt-get %s\n' \"\$*\" >>'$LOG'; for p in \"\$@\"; do case \$p in -*|install|update) continue ;; esac; cp '$WORK/prq-installed' '$WORK/prq/'\$p; done"
prereqs --for local --install
expect_exit 0
expect_call "apt-get install -y -qq make"
# Not root and no sudo: nothing is run, the list says what to do.
prq_machine
rm "$WORK/prq/make"
prq_tool id "echo 1000"
prereqs --install
expect_exit 3
expect_err "apt-get needs root, and you are not root and there is no sudo"
expect_err "get it:     as root: apt-get install -y make"
expect_no_call "apt-get install"
# Without --install, nothing is installed.
prq_machine
rm "$WORK/prq/make"
prereqs
expect_exit 3
expect_no_call "apt-get"
end

# ------------------------------------------------------------------ the venv
begin "ensure-venv rebuilds a venv left without pip, and cleans up after a failed python3 -m venv"
: >"$LOG"
printf '# nothing to install\n' >"$WORK/requirements.txt"
RC=0
# What a failed `python3 -m venv` (no python3-venv) leaves: a venv without pip.
python3 -m venv --without-pip "$WORK/venv" && [ ! -e "$WORK/venv/bin/pip" ] || fail "could not make a venv without pip"
bash "$ROOT/scripts/ensure-venv.sh" "$WORK/venv" "$WORK/requirements.txt" >"$WORK/out" 2>"$WORK/err" || RC=$?
expect_exit 0
expect_out "has no working python or pip (left by a failed python3 -m venv?); rebuilding it"
"$WORK/venv/bin/python" -m pip --version >/dev/null 2>&1 || fail "the rebuilt venv has no pip"
[ -f "$WORK/venv/.requirements.sha256" ] || fail "no stamp after the rebuild"
# A second run has nothing to do.
bash "$ROOT/scripts/ensure-venv.sh" "$WORK/venv" "$WORK/requirements.txt" >"$WORK/out" 2>"$WORK/err" || RC=$?
expect_exit 0
[ ! -s "$WORK/out" ] || fail "a ready venv was touched again: $(cat "$WORK/out")"
# python3 -m venv failing (as on Debian without python3-venv): the install command, no half venv.
printf '#!/bin/bash\nmkdir -p "$3/bin"; touch "$3/pyvenv.cfg"\necho "The virtual environment was not created successfully because ensurepip is not available." >&2\nexit 1\n' >"$WORK/badpython"
chmod +x "$WORK/badpython"
RC=0
PYTHON="$WORK/badpython" bash "$ROOT/scripts/ensure-venv.sh" "$WORK/venv2" "$WORK/requirements.txt" >"$WORK/out" 2>"$WORK/err" || RC=$?
expect_exit 1
expect_err "ensurepip is not available"
expect_err "apt-get install -y python3-venv"
[ ! -e "$WORK/venv2" ] || fail "the half-made venv was left behind"
# A folder that is not a venv is never removed.
mkdir -p "$WORK/notavenv"
touch "$WORK/notavenv/precious"
RC=0
bash "$ROOT/scripts/ensure-venv.sh" "$WORK/notavenv" "$WORK/requirements.txt" >"$WORK/out" 2>"$WORK/err" || RC=$?
expect_exit 1
expect_err "exists but is not a Python venv"
[ -e "$WORK/notavenv/precious" ] || fail "a folder that is not a venv was removed"
end

# ------------------------------------------------------------------ templates
begin "templates match the environment contract and docs/design.md (environment, wiring, tables, IAM, alarms)"
RC=0
if command -v python3 >/dev/null 2>&1; then
  python3 "$HERE/check_templates.py" "$ROOT" >"$WORK/out" 2>"$WORK/err" || RC=$?
  : >"$LOG"
  expect_exit 0
  if [ "$CURRENT_FAILED" = 1 ]; then grep -v '^ok' "$WORK/out" | sed 's/^/    /'; fi
  tail -1 "$WORK/out" | sed 's/^/    /'
else
  fail "python3 is needed for the template checks"
fi
end

begin "deployer policy: the service role covers both templates, makes roles only under the boundary (deploy-policy/)"
RC=0
python3 "$HERE/check_deployer_policy.py" "$ROOT" >"$WORK/out" 2>"$WORK/err" || RC=$?
: >"$LOG"
expect_exit 0
if [ "$CURRENT_FAILED" = 1 ]; then grep -v '^ok' "$WORK/out" | sed 's/^/    /'; fi
tail -1 "$WORK/out" | sed 's/^/    /'
end

# ------------------------------------------------------------------ Lambda artifacts
begin "sam build's root build (no -p) resolves only what a Lambda needs: no SSO, no test ports, no server"
if command -v cargo >/dev/null 2>&1; then
  # `cargo lambda build --bin NAME` at CodeUri ./ unifies features over the default
  # members; the operator CLI's aws-config SSO must not ride along into every Lambda.
  (cd "$ROOT" && cargo tree -e features,normal,build -i aws-config) >"$WORK/out" 2>"$WORK/err" ||
    fail "cargo tree failed: $(head -3 "$WORK/err")"
  expect_no_out 'aws-config feature "sso"'
  expect_no_out 'aws-config feature "credentials-process"'
  (cd "$ROOT" && cargo tree -e features,normal,build -i awsmp-core) >"$WORK/out" 2>"$WORK/err" ||
    fail "cargo tree failed: $(head -3 "$WORK/err")"
  expect_no_out 'awsmp-core feature "test-util"'
  (cd "$ROOT" && cargo tree -e features,normal,build -i hyper) >"$WORK/out" 2>"$WORK/err" ||
    fail "cargo tree failed: $(head -3 "$WORK/err")"
  expect_no_out 'hyper feature "server"'
else
  fail "cargo is needed for this check"
fi
end

begin "crate boundaries: the seller's awsmp-usage links no Lambda runtime, SQS or Metering SDK; no Lambda links the operator's code; the operator tool links no Lambda or dev crate"
if command -v cargo >/dev/null 2>&1; then
  # awsmp-usage writes one row: core and the DynamoDB adapter (awsmp-aws without its
  # sqs and metering features), never the Lambda skeleton (awsmp-lambda).
  (cd "$ROOT" && cargo tree -p awsmp-usage -e normal --prefix none) >"$WORK/out" 2>"$WORK/err" ||
    fail "cargo tree failed: $(head -3 "$WORK/err")"
  expect_out 'aws-sdk-dynamodb'
  expect_no_out 'lambda_runtime'
  expect_no_out 'aws-sdk-sqs'
  expect_no_out 'aws-sdk-marketplacemetering'
  expect_no_out 'tracing-subscriber'
  expect_no_out 'awsmp-lambda'
  expect_no_out 'awsmp-operate'
  # A Lambda: the skeleton and its adapters, never the operator's crate (csv, reports).
  (cd "$ROOT" && cargo tree -p awsmp-submitter -e normal --prefix none) >"$WORK/out" 2>"$WORK/err" ||
    fail "cargo tree failed: $(head -3 "$WORK/err")"
  expect_out 'awsmp-lambda'
  expect_no_out 'awsmp-operate'
  expect_no_out 'csv v'
  expect_no_out 'schemars'
  # The operator tool a seller installs: no function crate, no emulator, simulator or
  # local stack (`awsmp local up` is behind the `local` feature).
  (cd "$ROOT" && cargo tree -p awsmp-cli -e normal --prefix none) >"$WORK/out" 2>"$WORK/err" ||
    fail "cargo tree failed: $(head -3 "$WORK/err")"
  expect_out 'awsmp-operate'
  for crate in awsmp-local-stack awsmp-local-aws awsmp-marketplace-sim awsmp-apigw-local \
    awsmp-subscription awsmp-register awsmp-usage-api awsmp-discoverer awsmp-aggregator \
    awsmp-cleanup awsmp-submitter awsmp-deprovision-cleanup awsmp-outcome-events awsmp-buyer-events \
    awsmp-lambda lambda_runtime; do
    expect_no_out "$crate v"
  done
else
  fail "cargo is needed for this check"
fi
end

begin "sam build's root build resolves no tokio process or signal support for the Lambdas"
if command -v cargo >/dev/null 2>&1; then
  # Each crate names the tokio features it uses; only the simulator, the operator CLI
  # and tests spawn processes or wait for signals, and none of them is a default member.
  # `net` stays: hyper-util's client (`client-legacy`, the SDK's HTTP client and
  # lambda_runtime's Runtime API client) turns it on, and every Lambda talks TCP. So do
  # `fs` (aws-smithy-types' `rt-tokio`, ByteStream from a file) and `io-util` (h2).
  (cd "$ROOT" && cargo tree -e features,normal,build -i tokio) >"$WORK/out" 2>"$WORK/err" ||
    fail "cargo tree failed: $(head -3 "$WORK/err")"
  expect_out 'tokio feature "rt-multi-thread"'
  expect_no_out 'tokio feature "process"'
  expect_no_out 'tokio feature "signal"'
else
  fail "cargo is needed for this check"
fi
end

begin "sam build's root build has one TLS stack, rustls on ring: no aws-lc, no SDK default HTTPS client"
if command -v cargo >/dev/null 2>&1; then
  # The SDK's `default-https-client` is rustls on aws-lc (C code, the largest part of a
  # bootstrap); the Lambdas set their own client on ring (awsmp_lambda::sdk::https_client),
  # so no default member may turn it, or rustls's aws-lc provider, on. For the deployed
  # architecture (the templates' arm64), whole tree, no -i: aws-lc must not appear at all.
  (cd "$ROOT" && cargo tree -e features,normal,build --target aarch64-unknown-linux-gnu \
    --prefix none) >"$WORK/out" 2>"$WORK/err" ||
    fail "cargo tree failed: $(head -3 "$WORK/err")"
  expect_no_out 'aws-lc-rs'
  expect_no_out 'aws-lc-sys'
  expect_no_out 'aws-smithy-runtime feature "default-https-client"'
  expect_no_out 'rustls feature "aws_lc_rs"'
  expect_out 'aws-smithy-http-client feature "rustls-ring"'
  expect_out 'rustls feature "ring"'
else
  fail "cargo is needed for this check"
fi
end

echo
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
