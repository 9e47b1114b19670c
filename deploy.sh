#!/usr/bin/env bash
# deploy.sh — deploy awsmp-metering to AWS with SAM, or run it on this machine.
#
#   ./deploy.sh events --stage S                                   events stack (us-east-1, once)
#   ./deploy.sh main   --product-code P --region R [--region R2] --stage S
#   ./deploy.sh all    --product-code P --region R --stage S       both, events first
#   ./deploy.sh --local [--serve]                                  the local stack (no AWS account)
#
# It checks everything it can before changing anything, prints the plan (what it will
# create or update, where), and only then builds once and deploys. With --review, each
# stack's change set is created first, shown (resources added, modified, replaced,
# removed) and executed only when you say so. Existing stacks are
# updated in place; the data tables are retained and never replaced or dropped.
# Written for bash 3.2+ (macOS) with `set -u`: no associative arrays, no mapfile.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EVENTS_TEMPLATE="template-events.yaml"
MAIN_TEMPLATE="template-main.yaml"
SAMCONFIG="samconfig.toml"
# AWS Marketplace sends agreement/license events only to us-east-1's default bus.
EVENTS_REGION="us-east-1"
# AWS CLI v2 would page long output through `less` on a terminal.
export AWS_PAGER=""

# Commercial Regions where BatchMeterUsage is offered, from the AWS Marketplace docs
# "Supported AWS Regions for the AWS Marketplace Metering API" (BatchMeterUsage,
# Commercial Regions). China (cn-northwest-1) is left out: it is another partition, so
# it cannot share the us-east-1 subscribers table. --allow-unlisted-region skips the
# check for a Region added after this list was written.
METERING_REGIONS="eu-north-1 me-south-1 ap-south-1 eu-west-3 ap-southeast-3 us-east-2
af-south-1 eu-west-1 me-central-1 eu-central-1 sa-east-1 ap-east-1 ap-south-2 us-east-1
ap-northeast-2 ap-northeast-3 eu-west-2 ap-southeast-4 eu-south-1 ap-northeast-1
us-west-2 us-west-1 ap-southeast-1 ap-southeast-2 il-central-1 ca-central-1 eu-south-2
eu-central-2"

# Same patterns as the templates' AllowedPattern (they name tables, queues and alarms).
STAGE_PATTERN='^[a-z][a-z0-9-]{0,15}$'
PRODUCT_CODE_PATTERN='^[a-z0-9]{1,32}$'
REGION_PATTERN='^[a-z]{2}(-[a-z]+)+-[0-9]$'
ACCOUNTS_PATTERN='^[0-9]{12}(,[0-9]{12})*$'

# Lambda keeps 100 units of account concurrency unreserved; reservations beyond that fail.
LAMBDA_UNRESERVED_FLOOR=100

# Exit codes: 2 = bad arguments, 3 = a preflight check failed, 4 = a stack or table is
# in a state this script will not touch; a failing aws/sam command keeps its own code.

usage() {
  cat <<'EOF'
Usage:
  ./deploy.sh events --stage STAGE [options]
  ./deploy.sh main   --product-code CODE --region REGION [--region REGION ...] --stage STAGE [options]
  ./deploy.sh all    --product-code CODE --region REGION [--region REGION ...] --stage STAGE [options]
  ./deploy.sh --local [--serve] [local-up options]
  ./deploy.sh --help

Commands:
  events   the events stack (subscribers table, Marketplace event rule, subscription and
           deprovision-cleanup Lambdas) in us-east-1, once per stage
  main     the main stack (usage pipeline, submitter, registration API and page) in each
           metering Region; needs the events stack of the same stage
  all      events, then main
  --local  run the whole system on this machine (cargo run -p awsmp-cli --features local -- local up);
           everything after --local is passed to `awsmp local up` (e.g. --serve)

Options:
  --stage STAGE              lowercase letter, then up to 15 lowercase letters, digits, '-'
  --product-code CODE        AWS Marketplace product code (lowercase letters and digits)
  --region REGION            a metering Region (repeat for several); BatchMeterUsage must be offered there
  --config-env NAME          samconfig.toml environment (default: the stage's section if there is one, else default);
                             the events stack uses NAME-events when samconfig.toml has it
  --deployment-mode MODE     full | direct-submit
  --metering-mode MODE       live | dry-run (dry-run needs --test-accounts)
  --test-accounts LIST       comma-separated 12-digit buyer accounts metered in dry-run mode
  --alerts-topic-arn ARN     SNS topic for every alarm
  --parameter KEY=VALUE      any other template parameter (repeatable)
  --page-dir DIR             registration page files to upload (default: web/ when present)
  --cfn-role ARN             CloudFormation service role both stacks are created and changed with
                             (sam deploy --role-arn; default: $AWSMP_CFN_ROLE_ARN). The stacks then
                             need PermissionsBoundaryArn; see docs/deployer.md
  --allow-unlisted-region    deploy to a Region missing from the BatchMeterUsage list (you checked it)
  --dry-run                  check everything and print the plan; change nothing
  --review                   create each stack's change set, show what it adds, modifies,
                             REPLACES and REMOVES, and execute it only if you answer y
                             (the answer is read from stdin, terminal or not)
  --yes                      do not ask for confirmation (required when not on a terminal,
                             unless --review)
  -h, --help                 this help

Precedence of parameter values: template defaults < samconfig.toml [default] <
samconfig.toml [<config-env>] (for the events stack [<config-env>-events], if there is
one) < command-line options. On an update, parameters given nowhere keep the stack's
current values. samconfig.toml's parameter_overrides may be a list or the one string
`sam deploy --guided` writes; the same file deploys by hand (see its comments).
EOF
}

say() { printf '%s\n' "$*"; }
warn() { printf 'deploy.sh: warning: %s\n' "$*" >&2; }
die() {
  local code=$1
  shift
  printf 'deploy.sh: error: %s\n' "$1" >&2
  shift
  local line
  for line in "$@"; do printf '  %s\n' "$line" >&2; done
  exit "$code"
}

matches() { printf '%s' "$1" | grep -Eq "$2"; }

# ------------------------------------------------------------------ the local stack
if [ "${1:-}" = "--local" ]; then
  shift
  cd "$ROOT"
  # Rust (the pinned toolchain), a linker, Python with venv: what is missing is
  # installed where it can be (apt-get as root or with sudo, rustup), each command said
  # first; anything left is listed with its install command, before any build starts.
  bash "$ROOT/scripts/check-prereqs.sh" --for local --install || exit $?
  export PATH="$PATH:$HOME/.cargo/bin"
  command -v cargo >/dev/null 2>&1 ||
    die 3 "cargo is not on PATH; the local stack is built from this workspace." \
      "Install Rust (https://rustup.rs); rust-toolchain.toml picks the version."
  # The debug profile, as `make test` builds: one compile serves both, and the release
  # profile's full LTO is for the Lambda artifacts (sam build), not for this machine.
  exec cargo run -p awsmp-cli --features local --bin awsmp -- local up "$@"
fi

# ------------------------------------------------------------------ arguments
COMMAND=""
STAGE=""
PRODUCT_CODE=""
REGIONS=""
CONFIG_ENV=""
DRY_RUN=0
ASSUME_YES=0
REVIEW=0
ALLOW_UNLISTED=0
PAGE_DIR=""
# --cfn-role: the CloudFormation service role (deploy-policy/deployer.json) every sam
# deploy passes as --role-arn; empty = CloudFormation acts with the caller's credentials.
CFN_ROLE_ARN=${AWSMP_CFN_ROLE_ARN:-}
# Overrides from the command line, one KEY=VALUE a line.
CLI_OVERRIDES=""

need_value() {
  if [ $# -lt 2 ] || [ -z "$2" ] || [ "${2#--}" != "$2" ]; then
    die 2 "$1 needs a value (see --help)."
  fi
}

add_cli_override() {
  CLI_OVERRIDES=$(kv_set "$CLI_OVERRIDES" "$1" "$2")
}

# kv_set LIST KEY VALUE: LIST (KEY=VALUE lines) with KEY set to VALUE, order kept.
# VALUE reaches awk through the environment: -v would turn its backslashes into escapes.
kv_set() {
  printf '%s\n' "$1" | KV_VALUE=$3 awk -v k="$2" '
    BEGIN { done = 0; v = ENVIRON["KV_VALUE"] }
    $0 == "" { next }
    { split($0, p, "="); if (p[1] == k) { print k "=" v; done = 1 } else print }
    END { if (!done) print k "=" v }'
}

# kv_get LIST KEY: the value, or nothing (exit 1) when KEY is absent.
kv_get() {
  printf '%s\n' "$1" | awk -v k="$2" '
    { i = index($0, "="); if (i > 0 && substr($0, 1, i - 1) == k) { print substr($0, i + 1); found = 1 } }
    END { exit found ? 0 : 1 }'
}

if [ $# -eq 0 ]; then
  usage >&2
  exit 2
fi

case "$1" in
  -h | --help)
    usage
    exit 0
    ;;
  events | main | all)
    COMMAND=$1
    shift
    ;;
  *) die 2 "unknown command '$1': use events, main, all or --local (see --help)." ;;
esac

while [ $# -gt 0 ]; do
  case "$1" in
    --stage)
      need_value "$@"
      STAGE=$2
      shift 2
      ;;
    --product-code)
      need_value "$@"
      PRODUCT_CODE=$2
      shift 2
      ;;
    --region)
      need_value "$@"
      case " $REGIONS " in
        *" $2 "*) warn "Region $2 given twice; deploying it once." ;;
        *) REGIONS="${REGIONS:+$REGIONS }$2" ;;
      esac
      shift 2
      ;;
    --config-env)
      need_value "$@"
      CONFIG_ENV=$2
      shift 2
      ;;
    --deployment-mode)
      need_value "$@"
      case "$2" in full | direct-submit) ;; *) die 2 "--deployment-mode must be full or direct-submit, not '$2'." ;; esac
      add_cli_override DeploymentMode "$2"
      shift 2
      ;;
    --metering-mode)
      need_value "$@"
      case "$2" in live | dry-run) ;; *) die 2 "--metering-mode must be live or dry-run, not '$2'." ;; esac
      add_cli_override MeteringMode "$2"
      shift 2
      ;;
    --test-accounts)
      need_value "$@"
      matches "$2" "$ACCOUNTS_PATTERN" ||
        die 2 "--test-accounts must be comma-separated 12-digit AWS account ids without spaces, not '$2'."
      add_cli_override TestAccountAllowlist "$2"
      shift 2
      ;;
    --alerts-topic-arn)
      need_value "$@"
      add_cli_override AlertsTopicArn "$2"
      shift 2
      ;;
    --parameter)
      need_value "$@"
      case "$2" in
        *=*) ;;
        *) die 2 "--parameter takes KEY=VALUE, got '$2'." ;;
      esac
      key=${2%%=*}
      value=${2#*=}
      matches "$key" '^[A-Za-z0-9]+$' || die 2 "--parameter: '$key' is not a template parameter name."
      case "$value" in
        *$'\n'* | *$'\t'*) die 2 "--parameter $key: a value may not hold a line break or tab." ;;
      esac
      case "$key" in
        StageName | ProductCode | SubscribersTableName | SubscribersTableRegion)
          die 2 "--parameter $key is set by deploy.sh itself (use --stage / --product-code; the subscribers table comes from the events stack)."
          ;;
      esac
      add_cli_override "$key" "$value"
      shift 2
      ;;
    --page-dir)
      need_value "$@"
      PAGE_DIR=$2
      shift 2
      ;;
    --cfn-role)
      need_value "$@"
      CFN_ROLE_ARN=$2
      shift 2
      ;;
    --allow-unlisted-region)
      ALLOW_UNLISTED=1
      shift
      ;;
    --dry-run)
      DRY_RUN=1
      shift
      ;;
    --yes | -y)
      ASSUME_YES=1
      shift
      ;;
    --review)
      REVIEW=1
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    --local) die 2 "--local is a command of its own: ./deploy.sh --local [--serve]." ;;
    *) die 2 "unknown option '$1' (see --help)." ;;
  esac
done

# ------------------------------------------------------------------ argument checks
[ -n "$STAGE" ] || die 2 "--stage is required (e.g. --stage prod)."
if [ "$REVIEW" = 1 ] && [ "$ASSUME_YES" = 1 ]; then
  die 2 "--review asks before executing each change set and --yes says never ask: give one of them."
fi
matches "$STAGE" "$STAGE_PATTERN" ||
  die 2 "stage '$STAGE' is not valid: a lowercase letter, then up to 15 lowercase letters, digits or '-' (it names tables and stacks)."

WANT_EVENTS=0
WANT_MAIN=0
case "$COMMAND" in
  events) WANT_EVENTS=1 ;;
  main) WANT_MAIN=1 ;;
  all)
    WANT_EVENTS=1
    WANT_MAIN=1
    ;;
esac

if [ "$WANT_MAIN" = 1 ]; then
  [ -n "$PRODUCT_CODE" ] || die 2 "--product-code is required for '$COMMAND' (the code AWS Marketplace gave your product)."
  matches "$PRODUCT_CODE" "$PRODUCT_CODE_PATTERN" ||
    die 2 "product code '$PRODUCT_CODE' is not valid: AWS Marketplace product codes are lowercase letters and digits (1 to 32 here)." \
      "Copy it from the AWS Marketplace Management Portal (Products > SaaS > your product > Product code)."
  [ -n "$REGIONS" ] || die 2 "--region is required for '$COMMAND' (a Region to meter in; repeat it for several)."
  for region in $REGIONS; do
    matches "$region" "$REGION_PATTERN" || die 2 "'$region' is not an AWS Region name (like us-west-2)."
    case " $(printf '%s' "$METERING_REGIONS" | tr '\n' ' ') " in
      *" $region "*) ;;
      *)
        [ "$ALLOW_UNLISTED" = 1 ] ||
          die 2 "BatchMeterUsage is not offered in $region (not in the AWS Marketplace list of metering Regions)." \
            "Metering Regions: $(printf '%s' "$METERING_REGIONS" | tr '\n' ' ')" \
            "Meter in one of them. If AWS has added $region since, re-run with --allow-unlisted-region."
        warn "$region is not in the known BatchMeterUsage Regions; deploying anyway (--allow-unlisted-region). A DisabledApiException there raises the MeteringApiDisabled alarm."
        ;;
    esac
  done
else
  [ -z "$PRODUCT_CODE" ] || die 2 "--product-code is for 'main' and 'all'; the events stack is shared by every product of the stage."
  [ -z "$REGIONS" ] || die 2 "--region is for 'main' and 'all'; the events stack always goes to $EVENTS_REGION."
fi

MODE=$(kv_get "$CLI_OVERRIDES" MeteringMode || true)
ACCOUNTS=$(kv_get "$CLI_OVERRIDES" TestAccountAllowlist || true)
if [ "$MODE" = "dry-run" ] && [ -z "$ACCOUNTS" ]; then
  die 2 "--metering-mode dry-run meters only test accounts: give them with --test-accounts 111122223333[,...]."
fi
if [ "$MODE" = "live" ] && [ -n "$ACCOUNTS" ]; then
  die 2 "--metering-mode live bills every buyer; --test-accounts is only for dry-run."
fi
if [ "$MODE" = "live" ] && [ "$WANT_MAIN" = 1 ]; then
  # Switching a dry-run stack back to live must clear the allowlist, or its Rules refuse.
  add_cli_override TestAccountAllowlist ""
fi

if [ -n "$CFN_ROLE_ARN" ]; then
  matches "$CFN_ROLE_ARN" '^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$' ||
    die 2 "--cfn-role (or AWSMP_CFN_ROLE_ARN) must be an IAM role ARN, not '$CFN_ROLE_ARN'." \
      "The deployer stack's ServiceRoleArn output (docs/deployer.md), e.g. arn:aws:iam::111122223333:role/CloudFormation-awsmp-metering."
fi
# The main stack's profile key then lets only that role select it for the table
# (DeployerRoleArn), unless --parameter names another.
if [ -n "$CFN_ROLE_ARN" ] && [ "$WANT_MAIN" = 1 ] && ! kv_get "$CLI_OVERRIDES" DeployerRoleArn >/dev/null; then
  add_cli_override DeployerRoleArn "$CFN_ROLE_ARN"
fi

if [ -n "$PAGE_DIR" ] && [ ! -d "$PAGE_DIR" ]; then
  die 2 "--page-dir $PAGE_DIR is not a directory."
fi

cd "$ROOT"
for template in $EVENTS_TEMPLATE $MAIN_TEMPLATE $SAMCONFIG; do
  [ -f "$template" ] || die 3 "$ROOT/$template is missing; run deploy.sh from a complete checkout."
done

# ------------------------------------------------------------------ samconfig.toml
# samconfig.toml is read with a real TOML parser (Python 3.11+ tomllib), and its
# parameter_overrides with the grammar `sam deploy` itself applies, in both forms:
#   parameter_overrides = ["Key=value", "Other=\"two words\""]     (a list, one pair each)
#   parameter_overrides = "Key=\"value\" Other=\"two words\""      (what `sam deploy --guided` writes)
# so deploy.sh and `sam deploy --config-env ENV` by hand read the same values. Anything
# sam would read differently from how it looks (an unquoted value cut at a space, `Key=`
# with nothing, which sam silently drops) is refused with the fix, never guessed at.
DEPLOY_PY=$(
  cat <<'PY'
import re, sys

def fail(message, *lines, code=2):
    sys.stderr.write("deploy.sh: error: %s\n" % message)
    for line in lines:
        sys.stderr.write("  %s\n" % line)
    sys.exit(code)

try:
    import tomllib
except ImportError:
    try:
        import tomli as tomllib
    except ImportError:
        fail("deploy.sh reads samconfig.toml with Python 3.11+ (tomllib); this python3 is %d.%d." % sys.version_info[:2],
             "Install Python 3.11 or later (Debian/Ubuntu: apt-get install -y python3), or pip install tomli.", code=3)

# The --parameter-overrides grammar of the SAM CLI (samcli/cli/types.py,
# CfnParameterOverridesType): ` Key=value` or ` Key="value"`, backslash escapes inside;
# or, when the text has any, only `ParameterKey=Key,ParameterValue=value` pairs.
PAIR = re.compile(r'(?: )([A-Za-z0-9"]+)=("(?:\\.|[^"\\]+)*"|(?:\\.|[^ "\\]+)+)')
LONG_PAIR = re.compile(r'(?:ParameterKey=([A-Za-z0-9"]+),ParameterValue=("(?:\\.|[^"\\]+)*"|(?:\\.|[^ ,"\\]+)+))')

def sam_unquote(value):
    if value and value[0] == value[-1] == '"':
        value = value.strip('"')
    return value.replace("\\ ", " ").replace('\\"', '"')

def sam_parse(text):
    """[(key, value)] as sam reads TEXT, and the parts of TEXT it ignores."""
    text = " " + text.strip()
    pairs, ignored, end = [], [], 0
    pattern = LONG_PAIR if LONG_PAIR.search(text) else PAIR
    for match in pattern.finditer(text):
        if text[end:match.start()].strip():
            ignored.append(text[end:match.start()].strip())
        pairs.append((sam_unquote(match.group(1)), sam_unquote(match.group(2))))
        end = match.end()
    if text[end:].strip():
        ignored.append(text[end:].strip())
    return pairs, ignored

def sam_quote(key, value):
    if value and not re.search(r'[\s"\\]', value):
        return "%s=%s" % (key, value)
    return '%s="%s"' % (key, value.replace('"', '\\"'))

def load(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        fail("%s is not valid TOML: %s" % (path, e), "Fix the file (https://toml.io), then re-run.")

def check_pair(where, key, value):
    if not re.fullmatch(r"[A-Za-z0-9]+", key):
        fail("%s: '%s' is not a template parameter name." % (where, key))
    if "\n" in value or "\t" in value or "\r" in value:
        fail("%s: the value of %s holds a line break or tab, which deploy.sh cannot pass to sam." % (where, key))

def overrides(config, path, env):
    section = config.get(env, {}).get("deploy", {}).get("parameters", {})
    where = "%s [%s.deploy.parameters] parameter_overrides" % (path, env)
    raw = section.get("parameter_overrides")
    if raw is None:
        return
    if isinstance(raw, str):
        entries = [raw]
    elif isinstance(raw, list) and all(isinstance(e, str) for e in raw):
        entries = raw
    else:
        fail("%s must be a string or a list of strings." % where)
    for entry in entries:
        pairs, ignored = sam_parse(entry)
        if isinstance(raw, list) and len(pairs) > 1:
            fail("%s: the entry '%s' holds %d pairs; give one KEY=VALUE per list entry." % (where, entry, len(pairs)))
        if ignored or not pairs:
            seen = " ".join(sam_quote(k, v) for k, v in pairs) or "nothing"
            fail("%s: sam reads '%s' as %s and ignores '%s'." % (where, entry, seen, "' '".join(ignored) or entry),
                 'Quote a value that has spaces (Key="two words"), write an empty value as Key="" and separate pairs by spaces.')
        for key, value in pairs:
            check_pair(where, key, value)
            print("%s=%s" % (key, value))

def resolve(path, requested, stage):
    """The environments deploy.sh uses and their parameter_overrides, in parts."""
    config = load(path)
    has = lambda env: isinstance(config.get(env), dict)
    if requested:
        if not has(requested):
            fail("%s has no [%s.*] sections (--config-env %s)." % (path, requested, requested))
        env = requested
    else:
        env = stage if has(stage) else "default"
    events_env = env + "-events" if has(env + "-events") else env
    print("--- config-env\n%s\n--- events-config-env\n%s" % (env, events_env))
    print("--- default")
    overrides(config, path, "default")
    print("--- env")
    if env != "default":
        overrides(config, path, env)
    print("--- events")
    if events_env != "default":
        overrides(config, path, events_env)

def encode(where):
    """KEY=VALUE lines on stdin -> sam --parameter-overrides arguments, one a line;
    refuses a value sam would not read back unchanged."""
    for line in sys.stdin.read().splitlines():
        if not line:
            continue
        key, _, value = line.partition("=")
        arg = sam_quote(key, value)
        if sam_parse(arg) != ([(key, value)], []):
            fail("%s: the value of %s (%r) cannot be passed through sam's --parameter-overrides unchanged." % (where, key, value),
                 "sam drops a backslash before a space or quote, a trailing backslash and quotes that open or close the value; change the value.")
        print(arg)

def next_token():
    import json
    print(json.load(sys.stdin).get("NextToken") or "")

def show_changes(stack, region, pages):
    """The change set's resource changes (every page), one a line, replacements and
    removals marked, then a count of each kind."""
    import json
    changes = []
    for page in pages:
        with open(page) as f:
            changes += [c.get("ResourceChange", {}) for c in json.load(f).get("Changes", [])]
    print("  change set for %s (%s): %d resource change(s)" % (stack, region, len(changes)))
    width = max([len(c.get("LogicalResourceId", "")) for c in changes] + [8])
    replaced = maybe = removed = 0
    for c in changes:
        action, replacement = c.get("Action", "?"), c.get("Replacement", "")
        policy = c.get("PolicyAction", "")
        note, mark = "", "  "
        if action == "Remove":
            removed += 1
            mark, note = "!!", "REMOVED"
        elif action == "Modify" and replacement == "True":
            replaced += 1
            mark, note = "!!", "REPLACED by a new resource"
        elif action == "Modify" and replacement == "Conditional":
            maybe += 1
            mark, note = "! ", "MAY BE REPLACED (Replacement: Conditional)"
        elif action == "Modify":
            note = "in place"
        if mark != "  ":
            if policy in ("Retain", "ReplaceAndRetain"):
                note += "; the old resource is retained"
            elif policy in ("Delete", "ReplaceAndDelete"):
                note += "; the old resource is deleted"
            elif policy == "Snapshot" or policy == "ReplaceAndSnapshot":
                note += "; the old resource is deleted after a snapshot"
        print("   %s %-7s %-*s %-40s %s" % (mark, action, width, c.get("LogicalResourceId", "?"),
                                           c.get("ResourceType", "?"), note))
    counts = {}
    for c in changes:
        counts[c.get("Action", "?")] = counts.get(c.get("Action", "?"), 0) + 1
    print("  %d to add, %d to modify (%d replaced, %d may be replaced), %d to remove" % (
        counts.get("Add", 0), counts.get("Modify", 0), replaced, maybe, removed))
    if replaced or maybe or removed:
        print("  !! Replacing or removing a resource deletes it and what it holds (a table's rows,"
              " a queue's messages) unless it is retained; read the lines marked !! before answering.")

command = sys.argv[1]
if command == "resolve":
    resolve(sys.argv[2], sys.argv[3], sys.argv[4])
elif command == "next-token":
    next_token()
elif command == "show-changes":
    show_changes(sys.argv[2], sys.argv[3], sys.argv[4:])
elif command == "overrides":
    overrides(load(sys.argv[2]), sys.argv[2], sys.argv[3])
elif command == "encode":
    encode(sys.argv[2])
PY
)
deploy_py() { python3 -c "$DEPLOY_PY" "$@"; }

command -v python3 >/dev/null 2>&1 ||
  die 3 "python3 is not on PATH; deploy.sh reads samconfig.toml with Python 3.11+ (tomllib)." \
    "Install it (Debian/Ubuntu: apt-get install -y python3; macOS: brew install python), then re-run."
# One python3 run picks the environments and reads their parameter_overrides (so a
# mistake in the file stops deploy.sh here, before anything runs):
#   the main stack's: --config-env, else a section named after the stage, else default;
#   the events stack's: <that>-events when samconfig.toml has it (so that
#   `sam deploy --config-env prod-events` works by hand), else the same.
SAMCONFIG_READ=$(deploy_py resolve "$SAMCONFIG" "$CONFIG_ENV" "$STAGE")
# samconfig_part NAME: one part of that answer (the lines under "--- NAME").
samconfig_part() { printf '%s\n' "$SAMCONFIG_READ" | awk -v p="--- $1" '/^--- / { inside = ($0 == p); next } inside'; }
CONFIG_ENV=$(samconfig_part config-env)
EVENTS_CONFIG_ENV=$(samconfig_part events-config-env)
SAMCONFIG_DEFAULT_OVERRIDES=$(samconfig_part default)
SAMCONFIG_ENV_OVERRIDES=$(samconfig_part env)
SAMCONFIG_EVENTS_OVERRIDES=$(samconfig_part events)

# template_parameters FILE: the names under the template's top-level Parameters.
template_parameters() {
  awk '
    /^[A-Za-z]/ { inside = ($0 ~ /^Parameters:/); next }
    inside && /^  [A-Za-z0-9]+:/ { sub(/^  /, ""); sub(/:.*/, ""); print }' "$1"
}

EVENTS_PARAMS=$(template_parameters "$EVENTS_TEMPLATE")
MAIN_PARAMS=$(template_parameters "$MAIN_TEMPLATE")

# A samconfig.toml override that neither template declares is ignored, here as by sam:
# say so, it is most likely a typo.
warn_unknown_overrides() {
  local env=$1 line key
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    key=${line%%=*}
    printf '%s\n%s\n' "$EVENTS_PARAMS" "$MAIN_PARAMS" | grep -qx "$key" ||
      warn "samconfig.toml [$env.deploy.parameters] sets $key, which neither template declares; it is ignored."
  done <<EOF
$2
EOF
}
warn_unknown_overrides default "$SAMCONFIG_DEFAULT_OVERRIDES"
[ "$CONFIG_ENV" = default ] || warn_unknown_overrides "$CONFIG_ENV" "$SAMCONFIG_ENV_OVERRIDES"
if [ "$WANT_EVENTS" = 1 ] && [ "$EVENTS_CONFIG_ENV" != "$CONFIG_ENV" ]; then
  warn_unknown_overrides "$EVENTS_CONFIG_ENV" "$SAMCONFIG_EVENTS_OVERRIDES"
fi

# Every --parameter must belong to a template being deployed.
while IFS= read -r line; do
  [ -n "$line" ] || continue
  key=${line%%=*}
  known=0
  if [ "$WANT_EVENTS" = 1 ] && printf '%s\n' "$EVENTS_PARAMS" | grep -qx "$key"; then known=1; fi
  if [ "$WANT_MAIN" = 1 ] && printf '%s\n' "$MAIN_PARAMS" | grep -qx "$key"; then known=1; fi
  [ "$known" = 1 ] || die 2 "'$key' is not a parameter of the template(s) '$COMMAND' deploys." \
    "Events parameters: $(printf '%s' "$EVENTS_PARAMS" | tr '\n' ' ')" \
    "Main parameters: $(printf '%s' "$MAIN_PARAMS" | tr '\n' ' ')"
done <<EOF
$CLI_OVERRIDES
EOF

# overrides_for PARAM_NAMES EXTRA [ENV_OVERRIDES]: samconfig default < samconfig env
# (ENV_OVERRIDES, default the main stack's) < command line < EXTRA (deploy.sh's own),
# kept to the template's parameters.
overrides_for() {
  local names=$1 extra=$2 env_overrides=${3-$SAMCONFIG_ENV_OVERRIDES} merged="" line key value source
  for source in "$SAMCONFIG_DEFAULT_OVERRIDES" "$env_overrides" "$CLI_OVERRIDES" "$extra"; do
    while IFS= read -r line; do
      [ -n "$line" ] || continue
      key=${line%%=*}
      value=${line#*=}
      printf '%s\n' "$names" | grep -qx "$key" || continue
      merged=$(kv_set "$merged" "$key" "$value")
    done <<EOF
$source
EOF
  done
  printf '%s\n' "$merged" | grep -v '^$' || true
}

# sam_override_args OVERRIDES: sam's --parameter-overrides arguments, one a line: KEY=VALUE,
# or KEY="VALUE" (inner quotes escaped) for an empty value or one with spaces, quotes or
# backslashes (the same rule as sam_quote in DEPLOY_PY).
sam_override_args() {
  local line key value
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    key=${line%%=*}
    value=${line#*=}
    case "$value" in
      "" | *[[:space:]\"\\]*) printf '%s="%s"\n' "$key" "${value//\"/\\\"}" ;;
      *) printf '%s\n' "$line" ;;
    esac
  done <<EOF
$1
EOF
}
# check_overrides OVERRIDES: stops deploy.sh (exit 2) on a value sam would not read back
# unchanged (only quotes and backslashes can do that); run at top level, before the plan.
check_overrides() {
  case "$1" in
    *[\"\\]*) printf '%s\n' "$1" | deploy_py encode "parameters" >/dev/null ;;
  esac
}

# ------------------------------------------------------------------ preflight: tools
command -v aws >/dev/null 2>&1 ||
  die 3 "the AWS CLI (aws) is not on PATH." \
    "Install AWS CLI v2: https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"
command -v sam >/dev/null 2>&1 ||
  die 3 "the AWS SAM CLI (sam) is not on PATH." \
    "Install it: pip install aws-sam-cli (or 'make sam-venv' and add .venv-sam/bin to PATH)."
command -v cargo >/dev/null 2>&1 ||
  die 3 "cargo is not on PATH; sam build compiles the Lambdas from this workspace." \
    "Install Rust: https://rustup.rs"
command -v cargo-lambda >/dev/null 2>&1 ||
  die 3 "cargo-lambda is not on PATH; sam build uses it for BuildMethod rust-cargolambda." \
    "Install it: pip install cargo-lambda (it brings zig too)."
if ! command -v zig >/dev/null 2>&1; then
  # pip's ziglang package ships zig inside the package folder, not on PATH.
  zig_dir=""
  if command -v python3 >/dev/null 2>&1; then
    zig_dir=$(python3 -c 'import os, ziglang; print(os.path.dirname(ziglang.__file__))' 2>/dev/null || true)
  fi
  if [ -n "$zig_dir" ] && [ -x "$zig_dir/zig" ]; then
    PATH="$zig_dir:$PATH"
    export PATH
  else
    die 3 "zig is not on PATH; cargo-lambda cross-compiles the arm64 Lambdas with it." \
      "Install it: pip install ziglang (pip install cargo-lambda brings it)."
  fi
fi

# ------------------------------------------------------------------ preflight: tool versions
# The artifacts are built and deployed with the versions tools/requirements-sam.txt pins
# (hash-checked; `make sam-venv` installs them): another SAM CLI, cargo-lambda or zig
# may build different artifacts than the ones tested. AWSMP_ANY_TOOL_VERSIONS=1 deploys
# with what is on PATH.
tool_pin() { sed -nE "s/^$1==([^ ]+).*$/\1/p" "$ROOT/tools/requirements-sam.txt" | head -n 1; }
if [ "${AWSMP_ANY_TOOL_VERSIONS:-}" != 1 ]; then
  [ -f "$ROOT/tools/requirements-sam.txt" ] ||
    die 3 "tools/requirements-sam.txt, which pins the build tools, is missing beside deploy.sh." \
      "Run deploy.sh from a whole checkout, or set AWSMP_ANY_TOOL_VERSIONS=1 to deploy with the tools on PATH."
  mismatched=""
  for tool in aws-sam-cli cargo-lambda ziglang; do
    want=$(tool_pin "$tool")
    case "$tool" in
      aws-sam-cli) got=$(sam --version 2>/dev/null | sed -nE 's/^.*version ([0-9][^ ]*).*$/\1/p') ;;
      cargo-lambda) got=$(cargo-lambda --version 2>/dev/null | awk 'NR == 1 { print $2 }') ;;
      # pip's ziglang 0.13.0.post1 ships zig 0.13.0.
      ziglang) got=$(zig version 2>/dev/null) want=${want%%.post*} ;;
    esac
    [ "$got" = "$want" ] || mismatched="$mismatched $tool ${got:-unknown} (pinned: $want);"
  done
  [ -z "$mismatched" ] ||
    die 3 "these build tools are not the versions tools/requirements-sam.txt pins:$mismatched" \
      "Run 'make sam-venv' and put .venv-sam/bin first on PATH (it installs the pinned, hash-checked versions), or set AWSMP_ANY_TOOL_VERSIONS=1 to deploy with these."
fi

# ------------------------------------------------------------------ preflight: AWS
# aws_query ARGS...: runs aws and prints its output; its stderr goes to a file that
# aws_error prints (a file, not a variable: callers often run inside $(...) subshells).
AWS_ERROR_FILE=$(mktemp)
trap 'rm -f "$AWS_ERROR_FILE"' EXIT
aws_query() { aws "$@" 2>"$AWS_ERROR_FILE"; }
aws_error() { cat "$AWS_ERROR_FILE"; }

if ! ACCOUNT=$(aws_query sts get-caller-identity --query Account --output text); then
  die 3 "no usable AWS credentials (aws sts get-caller-identity failed):" \
    "$(aws_error)" \
    "Configure them (aws configure, aws sso login, or AWS_PROFILE=...) for the account that published the product, then re-run."
fi
[ -n "$ACCOUNT" ] || die 3 "aws sts get-caller-identity returned no account; check your AWS CLI configuration."
# CloudFormation can only use a service role of the stack's own account.
if [ -n "$CFN_ROLE_ARN" ] && [ "$(printf '%s' "$CFN_ROLE_ARN" | cut -d: -f5)" != "$ACCOUNT" ]; then
  die 3 "--cfn-role $CFN_ROLE_ARN belongs to another account than these credentials' ($ACCOUNT)." \
    "Use the ServiceRoleArn of the deployer stack in account $ACCOUNT (docs/deployer.md)."
fi

# check_boundary_for_role OVERRIDES ACTION STACK REGION: with --cfn-role, a stack created
# without PermissionsBoundaryArn would fail at its first IAM role (the service role creates
# roles only under the boundary) and leave its retained tables behind: refuse it here.
# An update keeps the stack's current value, so only a create is checked.
check_boundary_for_role() {
  [ -n "$CFN_ROLE_ARN" ] && [ "$2" = CREATE ] || return 0
  [ -z "$(kv_get "$1" PermissionsBoundaryArn || true)" ] || return 0
  die 2 "--cfn-role: stack $3 ($4) would be created without PermissionsBoundaryArn, and the service role creates IAM roles only under its boundary." \
    "Add --parameter PermissionsBoundaryArn=<the deployer stack's PermissionsBoundaryArn output> (or set it in samconfig.toml); docs/deployer.md."
}

# stack_status NAME REGION: the status, or ABSENT.
stack_status() {
  local status
  if status=$(aws_query cloudformation describe-stacks --stack-name "$1" --region "$2" --query 'Stacks[0].StackStatus' --output text); then
    printf '%s' "$status"
  else
    case "$(aws_error)" in
      *"does not exist"*) printf 'ABSENT' ;;
      *) die 3 "cannot read stack $1 in $2:" "$(aws_error)" ;;
    esac
  fi
}

stack_output() {
  aws_query cloudformation describe-stacks --stack-name "$1" --region "$2" \
    --query "Stacks[0].Outputs[?OutputKey=='$3'].OutputValue" --output text ||
    die 3 "cannot read output $3 of stack $1 in $2:" "$(aws_error)"
}

# stack_action NAME REGION STATUS: CREATE or UPDATE, or stops with what to do.
stack_action() {
  local name=$1 region=$2 status=$3
  case "$status" in
    ABSENT | REVIEW_IN_PROGRESS) printf 'CREATE' ;;
    CREATE_COMPLETE | UPDATE_COMPLETE | UPDATE_ROLLBACK_COMPLETE | IMPORT_COMPLETE | IMPORT_ROLLBACK_COMPLETE)
      printf 'UPDATE'
      ;;
    *_IN_PROGRESS)
      die 4 "stack $name in $region is busy ($status); nothing was changed." \
        "Wait for it to finish (aws cloudformation describe-stacks --stack-name $name --region $region), then re-run."
      ;;
    ROLLBACK_COMPLETE | ROLLBACK_FAILED | CREATE_FAILED)
      die 4 "stack $name in $region failed its first creation ($status); deploy.sh never deletes a stack." \
        "See why: aws cloudformation describe-stack-events --stack-name $name --region $region" \
        "Then delete it yourself (aws cloudformation delete-stack --stack-name $name --region $region)." \
        "Tables it created are retained: delete or import them before re-running (deploy.sh stops if they exist)."
      ;;
    UPDATE_ROLLBACK_FAILED)
      die 4 "stack $name in $region is stuck in UPDATE_ROLLBACK_FAILED; nothing was changed." \
        "Fix the cause, then: aws cloudformation continue-update-rollback --stack-name $name --region $region"
      ;;
    DELETE_FAILED | DELETE_COMPLETE)
      die 4 "stack $name in $region is being or was deleted ($status); its retained tables remain." \
        "Finish or undo the deletion yourself; deploy.sh does not recreate stacks over retained data."
      ;;
    *) die 4 "stack $name in $region is in state $status, which deploy.sh does not handle; nothing was changed." ;;
  esac
}

# Refuses to create a stack over a table that already exists (retained from an earlier
# stack, or owned by another stage): CloudFormation would fail half-way.
check_table_free() {
  local table=$1 region=$2 stack=$3
  if aws_query dynamodb describe-table --table-name "$table" --region "$region" --query 'Table.TableStatus' --output text >/dev/null; then
    die 4 "table $table already exists in $region, and stack $stack does not." \
      "It is retained data (from a deleted stack) or belongs to another deployment; deploy.sh never drops or overwrites it." \
      "Import it into the stack (aws cloudformation create-change-set --change-set-type IMPORT ...), deploy another stage, or remove it yourself after a backup."
  fi
  case "$(aws_error)" in
    *ResourceNotFoundException* | *"not found"*) ;;
    *) die 3 "cannot check table $table in $region:" "$(aws_error)" ;;
  esac
}

# Reserved concurrency fails when it would leave fewer than 100 unreserved executions.
check_concurrency() {
  local region=$1 needed=$2 unreserved
  unreserved=$(aws_query lambda get-account-settings --region "$region" --query 'AccountLimit.UnreservedConcurrentExecutions' --output text) ||
    die 3 "cannot read Lambda account settings in $region:" "$(aws_error)"
  matches "$unreserved" '^[0-9]+$' || die 3 "unexpected Lambda UnreservedConcurrentExecutions '$unreserved' in $region."
  if [ $((unreserved - needed)) -lt "$LAMBDA_UNRESERVED_FLOOR" ]; then
    die 3 "Lambda concurrency in $region is too low: the stacks reserve $needed execution(s), and $unreserved are unreserved (Lambda keeps $LAMBDA_UNRESERVED_FLOOR free)." \
      "Request a higher 'Concurrent executions' quota for Lambda in $region (Service Quotas console), then re-run."
  fi
}

EVENTS_STACK="awsmp-events-$STAGE"
SUBSCRIBERS_TABLE="awsmp-subscribers-$STAGE"
main_stack_name() { printf 'awsmp-main-%s-%s' "$PRODUCT_CODE" "$STAGE"; }

# --- events stack state
EVENTS_STATUS=$(stack_status "$EVENTS_STACK" "$EVENTS_REGION")
EVENTS_ACTION=""
if [ "$WANT_EVENTS" = 1 ]; then
  EVENTS_ACTION=$(stack_action "$EVENTS_STACK" "$EVENTS_REGION" "$EVENTS_STATUS")
  if [ "$EVENTS_ACTION" = CREATE ]; then
    check_table_free "$SUBSCRIBERS_TABLE" "$EVENTS_REGION" "$EVENTS_STACK"
  fi
elif [ "$WANT_MAIN" = 1 ]; then
  case "$EVENTS_STATUS" in
    ABSENT | REVIEW_IN_PROGRESS)
      die 4 "the events stack $EVENTS_STACK does not exist in $EVENTS_REGION; main stacks read its subscribers table." \
        "Deploy it first: ./deploy.sh events --stage $STAGE (or ./deploy.sh all ... to do both)."
      ;;
  esac
  stack_action "$EVENTS_STACK" "$EVENTS_REGION" "$EVENTS_STATUS" >/dev/null
  SUBSCRIBERS_TABLE=$(stack_output "$EVENTS_STACK" "$EVENTS_REGION" SubscribersTableName)
  if [ -z "$SUBSCRIBERS_TABLE" ] || [ "$SUBSCRIBERS_TABLE" = None ]; then
    die 4 "the events stack $EVENTS_STACK has no SubscribersTableName output; update it first: ./deploy.sh events --stage $STAGE"
  fi
fi

# CloudWatch alarms notify only an SNS topic in their own Region.
check_topic_region() {
  local overrides=$1 region=$2 stack=$3 topic topic_region
  topic=$(kv_get "$overrides" AlertsTopicArn || true)
  [ -n "$topic" ] || return 0
  topic_region=$(printf '%s' "$topic" | cut -d: -f4)
  if [ "$topic_region" != "$region" ]; then
    die 2 "AlertsTopicArn $topic is in ${topic_region:-no Region}, but stack $stack is in $region; alarms can only notify a topic in their own Region." \
      "Give a topic in $region (deploy one Region per run with --alerts-topic-arn, or set it per environment in samconfig.toml)."
  fi
}

EVENTS_OVERRIDES=""
if [ "$WANT_EVENTS" = 1 ]; then
  EVENTS_OVERRIDES=$(overrides_for "$EVENTS_PARAMS" "StageName=$STAGE" "$SAMCONFIG_EVENTS_OVERRIDES")
  check_overrides "$EVENTS_OVERRIDES"
  check_topic_region "$EVENTS_OVERRIDES" "$EVENTS_REGION" "$EVENTS_STACK"
  check_boundary_for_role "$EVENTS_OVERRIDES" "$EVENTS_ACTION" "$EVENTS_STACK" "$EVENTS_REGION"
fi

# The subscribers table's KMS key (the events stack's DataKmsKeyArn): every main stack's
# readers of that table need kms:Decrypt on it (SubscribersKmsKeyArn), or registration
# and metering fail on AccessDenied. What this run gives the events stack, else what it
# has (an update keeps its value); none when it has no key or predates the output.
EVENTS_DATA_KEY=""
if [ "$WANT_EVENTS" = 1 ] && kv_get "$EVENTS_OVERRIDES" DataKmsKeyArn >/dev/null; then
  EVENTS_DATA_KEY=$(kv_get "$EVENTS_OVERRIDES" DataKmsKeyArn)
elif [ "$WANT_MAIN" = 1 ] && [ "$EVENTS_STATUS" != ABSENT ]; then
  EVENTS_DATA_KEY=$(stack_output "$EVENTS_STACK" "$EVENTS_REGION" DataKmsKeyArn)
fi
case "$EVENTS_DATA_KEY" in none | None) EVENTS_DATA_KEY="" ;; esac

# --- main stacks' state, one line per Region: REGION ACTION STATUS
MAIN_PLAN=""
CONCURRENCY_IN_EVENTS_REGION=0
if [ "$WANT_EVENTS" = 1 ] && [ "$EVENTS_ACTION" = CREATE ]; then
  # deprovision-cleanup reserves 1.
  CONCURRENCY_IN_EVENTS_REGION=1
fi
if [ "$WANT_MAIN" = 1 ]; then
  base_main=$(overrides_for "$MAIN_PARAMS" "StageName=$STAGE
ProductCode=$PRODUCT_CODE
SubscribersTableName=$SUBSCRIBERS_TABLE
SubscribersTableRegion=$EVENTS_REGION")
  mode=$(kv_get "$base_main" DeploymentMode || printf 'full')
  discoverer=$(kv_get "$base_main" DiscovererReservedConcurrency || printf '2')
  for region in $REGIONS; do
    stack=$(main_stack_name)
    status=$(stack_status "$stack" "$region")
    action=$(stack_action "$stack" "$region" "$status")
    if [ "$action" = CREATE ]; then
      check_table_free "awsmp-$PRODUCT_CODE-usage-$STAGE" "$region" "$stack"
      check_table_free "awsmp-$PRODUCT_CODE-aggregated-usage-$STAGE" "$region" "$stack"
      check_table_free "awsmp-$PRODUCT_CODE-customer-profile" "$region" "$stack"
      needed=1
      [ "$mode" = direct-submit ] || needed=$((needed + discoverer))
      if [ "$region" = "$EVENTS_REGION" ]; then
        needed=$((needed + CONCURRENCY_IN_EVENTS_REGION))
        CONCURRENCY_IN_EVENTS_REGION=0
      fi
      check_concurrency "$region" "$needed"
    fi
    MAIN_PLAN="${MAIN_PLAN}${region} ${action} ${status}
"
  done
fi
if [ "$CONCURRENCY_IN_EVENTS_REGION" -gt 0 ]; then
  check_concurrency "$EVENTS_REGION" "$CONCURRENCY_IN_EVENTS_REGION"
fi

if [ -z "$PAGE_DIR" ] && [ -d "$ROOT/web" ]; then
  PAGE_DIR="$ROOT/web"
fi

# page_publisher: the IAM role or user these credentials are, which uploads the page
# (the page bucket then takes object writes from it and the deployer only). An assumed
# role's session ARN names its role without the role's path: a role with a path must
# be named with --parameter PagePublisherArn=ARN.
page_publisher() {
  aws_query sts get-caller-identity --query Arn --output text |
    sed -nE -e 's#^arn:(aws[a-z-]*):sts::([0-9]{12}):assumed-role/([^/]+)/.*$#arn:\1:iam::\2:role/\3#p' \
      -e 's#^(arn:aws[a-z-]*:iam::[0-9]{12}:user/.+)$#\1#p'
}

# page_logo_origin: the https origin of the page's logoUrl (web/config.js) when it is
# on another host; empty for a relative logo or none.
page_logo_origin() {
  [ -n "$PAGE_DIR" ] && [ -f "$PAGE_DIR/config.js" ] || return 0
  sed -nE 's#^[[:space:]]*logoUrl:[[:space:]]*"(https://[A-Za-z0-9.-]+(:[0-9]{1,5})?)(/[^"]*)?".*$#\1#p' "$PAGE_DIR/config.js" | head -n 1
}

# main_overrides REGION ACTION: the full override list for one Region's stack.
main_overrides() {
  local region=$1 action=$2 extra role logo
  extra="StageName=$STAGE
ProductCode=$PRODUCT_CODE
SubscribersTableName=$SUBSCRIBERS_TABLE
SubscribersTableRegion=$EVENTS_REGION"
  if ! kv_get "$CLI_OVERRIDES" ApiGatewayLoggingRole >/dev/null; then
    if [ "$action" = CREATE ]; then
      # One account-wide API Gateway logging role per Region: create it only if unset.
      role=$(aws_query apigateway get-account --region "$region" --query cloudwatchRoleArn --output text) ||
        die 3 "cannot read API Gateway account settings in $region:" "$(aws_error)"
      case "$role" in
        "" | None | null) extra="$extra
ApiGatewayLoggingRole=create" ;;
        *) extra="$extra
ApiGatewayLoggingRole=existing" ;;
      esac
    fi
    # On an update the stack keeps its current value (sam deploy passes the previous one).
  fi
  # ProfileKey=create makes a key whose policy only DeployerRoleArn may change (the
  # template refuses it empty): on a create, or an update of a stack that has none,
  # without --cfn-role or a DeployerRoleArn, the role these credentials are (an IAM
  # user, or a role with a path, must name it).
  local current=""
  if [ "$action" != CREATE ]; then
    current=$(aws_query cloudformation describe-stacks --stack-name "$(main_stack_name)" --region "$region" \
      --query "Stacks[0].Parameters[?ParameterKey=='DeployerRoleArn'].ParameterValue" --output text) || current=""
    case "$current" in None | null) current="" ;; esac
  fi
  if [ -z "$current" ] && ! kv_get "$(overrides_for "$MAIN_PARAMS" "$extra")" DeployerRoleArn >/dev/null &&
    [ "$(kv_get "$(overrides_for "$MAIN_PARAMS" "$extra")" ProfileKey 2>/dev/null || echo create)" != shared ]; then
    role=$(aws_query sts get-caller-identity --query Arn --output text |
      sed -nE 's#^arn:(aws[a-z-]*):sts::([0-9]{12}):assumed-role/([^/]+)/.*$#arn:\1:iam::\2:role/\3#p') || role=""
    [ -n "$role" ] ||
      die 2 "ProfileKey=create (the default) needs DeployerRoleArn, the role that deploys the main stack, and these credentials are no assumed role." \
        "Pass --cfn-role ARN, --parameter DeployerRoleArn=ROLE_ARN (your role, with its path), or --parameter ProfileKey=shared (docs/deploy.md)."
    extra="$extra
DeployerRoleArn=$role"
  fi
  # Only who uploads the page (these credentials) and the deployer may write its files.
  if ! kv_get "$(overrides_for "$MAIN_PARAMS" "$extra")" PagePublisherArn >/dev/null; then
    role=$(page_publisher) || role=""
    if [ -n "$role" ]; then
      extra="$extra
PagePublisherArn=$role"
    else
      warn "these credentials are neither an assumed role nor an IAM user, so the page bucket's writers are not narrowed to them; pass --parameter PagePublisherArn=ARN (docs/deploy.md)."
    fi
  fi
  # A logo on another host: the page's Content-Security-Policy allows that origin only.
  if ! kv_get "$(overrides_for "$MAIN_PARAMS" "$extra")" PageLogoOrigin >/dev/null; then
    logo=$(page_logo_origin)
    [ -z "$logo" ] || extra="$extra
PageLogoOrigin=$logo"
  fi
  # The subscribers table's key follows the events stack unless set here.
  if ! kv_get "$(overrides_for "$MAIN_PARAMS" "")" SubscribersKmsKeyArn >/dev/null; then
    extra="$extra
SubscribersKmsKeyArn=$EVENTS_DATA_KEY"
  fi
  # The BatchMeterUsage quota (10 requests/s) is per account and Region, whatever the
  # product: unless set, this stack's share is 10 / (the main stacks in the Region).
  if ! kv_get "$(overrides_for "$MAIN_PARAMS" "$extra")" MeteringRequestsPerSecond >/dev/null; then
    extra="$extra
MeteringRequestsPerSecond=$(quota_share "$region")"
  fi
  overrides_for "$MAIN_PARAMS" "$extra"
}

# quota_share REGION: 10 requests/s divided among this stack and the other awsmp main
# stacks in REGION (at least 1). Warns that the others keep the share they were given.
quota_share() {
  local region=$1 names others=0 name share
  names=$(aws_query cloudformation list-stacks --region "$region" \
    --stack-status-filter CREATE_COMPLETE UPDATE_COMPLETE UPDATE_ROLLBACK_COMPLETE \
    --query "StackSummaries[?starts_with(StackName, 'awsmp-main-')].StackName" --output text) ||
    die 3 "cannot list the stacks in $region (to share the metering quota):" "$(aws_error)"
  for name in $names; do
    [ "$name" = "$(main_stack_name)" ] || others=$((others + 1))
  done
  share=$((10 / (others + 1)))
  [ "$share" -ge 1 ] || share=1
  if [ "$others" -gt 0 ]; then
    warn "$others other awsmp main stack(s) in $region share the account's 10 BatchMeterUsage requests/s: this one gets MeteringRequestsPerSecond=$share; redeploy the others with --parameter MeteringRequestsPerSecond=$share so together they stay within the quota."
  fi
  printf '%s' "$share"
}

MAIN_OVERRIDES_BY_REGION=""
if [ "$WANT_MAIN" = 1 ]; then
  while read -r region action status; do
    [ -n "$region" ] || continue
    overrides=$(main_overrides "$region" "$action")
    check_topic_region "$overrides" "$region" "$(main_stack_name)"
    check_overrides "$overrides"
    check_boundary_for_role "$overrides" "$action" "$(main_stack_name)" "$region"
    MAIN_OVERRIDES_BY_REGION="${MAIN_OVERRIDES_BY_REGION}$(printf '%s\n' "$overrides" | sed "s/^/$region	/")
"
  done <<EOF
$MAIN_PLAN
EOF
fi

# ------------------------------------------------------------------ the plan
# sam_deploy_args TEMPLATE STACK REGION COMPONENT OVERRIDES: the `sam deploy` command
# line, one argument a line (the dry run prints exactly what a real run executes).
sam_deploy_args() {
  local env=$CONFIG_ENV
  [ "$4" != events ] || env=$EVENTS_CONFIG_ENV
  printf '%s\n' deploy --template-file "$1" --stack-name "$2" --region "$3" \
    --config-file "$SAMCONFIG" --config-env "$env" \
    --capabilities CAPABILITY_IAM --resolve-s3 --no-fail-on-empty-changeset --no-confirm-changeset
  # --cfn-role: CloudFormation creates and changes the stack's resources as this role.
  [ -z "$CFN_ROLE_ARN" ] || printf '%s\n' --role-arn "$CFN_ROLE_ARN"
  # --review: sam only creates the change set; deploy.sh shows it and executes it.
  [ "$REVIEW" = 0 ] || printf '%s\n' --no-execute-changeset
  printf '%s\n' --tags "awsmp:stage=$STAGE" "awsmp:component=$4" --parameter-overrides
  sam_override_args "$5"
}

# region_overrides REGION: that Region's main-stack overrides, one KEY=VALUE a line
# (MAIN_OVERRIDES_BY_REGION holds REGION<tab>KEY=VALUE lines).
region_overrides() {
  printf '%s' "$MAIN_OVERRIDES_BY_REGION" | awk -F '\t' -v r="$1" '$1 == r { print substr($0, length(r) + 2) }'
}

describe_action() {
  case "$1" in
    CREATE) printf 'CREATE (first deploy)' ;;
    UPDATE) printf 'UPDATE in place (now %s)' "$2" ;;
  esac
}

say "awsmp-metering deploy plan"
say "  account:     $ACCOUNT"
say "  stage:       $STAGE"
say "  config env:  $CONFIG_ENV ($SAMCONFIG)"
if [ -n "$CFN_ROLE_ARN" ]; then
  say "  CloudFormation role: $CFN_ROLE_ARN (every stack change runs as it)"
fi
if [ "$WANT_EVENTS" = 1 ] && [ "$EVENTS_CONFIG_ENV" != "$CONFIG_ENV" ]; then
  say "  events env:  $EVENTS_CONFIG_ENV"
fi
step=1
if [ "$WANT_EVENTS" = 1 ]; then
  say "  $step. sam build $EVENTS_TEMPLATE once -> .aws-sam/build-events"
  step=$((step + 1))
fi
if [ "$WANT_MAIN" = 1 ]; then
  say "  $step. sam build $MAIN_TEMPLATE once -> .aws-sam/build-main (used for every Region)"
  step=$((step + 1))
fi
if [ "$WANT_EVENTS" = 1 ]; then
  say "  $step. events stack $EVENTS_STACK ($EVENTS_REGION): $(describe_action "$EVENTS_ACTION" "$EVENTS_STATUS")"
  say "       subscribers table $SUBSCRIBERS_TABLE (retained; never replaced or dropped)"
  say "       parameters: $(sam_override_args "$EVENTS_OVERRIDES" | tr '\n' ' ')"
  step=$((step + 1))
fi
if [ "$WANT_MAIN" = 1 ]; then
  while read -r region action status; do
    [ -n "$region" ] || continue
    say "  $step. main stack $(main_stack_name) ($region): $(describe_action "$action" "$status")"
    say "       reads subscribers table $SUBSCRIBERS_TABLE in $EVENTS_REGION"
    say "       tables awsmp-$PRODUCT_CODE-usage-$STAGE, awsmp-$PRODUCT_CODE-aggregated-usage-$STAGE, awsmp-$PRODUCT_CODE-customer-profile (retained)"
    say "       parameters: $(sam_override_args "$(region_overrides "$region")" | tr '\n' ' ')"
    if [ -n "$PAGE_DIR" ]; then
      say "       then upload the registration page from $PAGE_DIR (+ config.json) and invalidate CloudFront"
    else
      say "       no page files (no web/ folder, no --page-dir): the page bucket stays empty"
    fi
    step=$((step + 1))
  done <<EOF
$MAIN_PLAN
EOF
fi
say "  Every deployed stack gets termination protection. Tables are retained on delete."
say "  Before real billing: review every resource this creates (templates, IAM grants, tables,"
say "  queues, alarms), put it through your own change process, and test the whole flow on a"
say "  test listing (docs/operate.md); a successful deploy does not make it production-ready."
if [ "$REVIEW" = 1 ]; then
  say "  --review: each stack's change set is created and shown; it is executed only if you answer y."
fi

if [ "$DRY_RUN" = 1 ]; then
  say ""
  say "Commands it would run:"
  if [ "$WANT_EVENTS" = 1 ]; then
    say "  sam build --template-file $EVENTS_TEMPLATE --build-dir .aws-sam/build-events --config-file $SAMCONFIG --config-env $EVENTS_CONFIG_ENV"
  fi
  if [ "$WANT_MAIN" = 1 ]; then
    say "  sam build --template-file $MAIN_TEMPLATE --build-dir .aws-sam/build-main --config-file $SAMCONFIG --config-env $CONFIG_ENV"
  fi
  if [ "$WANT_EVENTS" = 1 ]; then
    say "  sam $(sam_deploy_args .aws-sam/build-events/template.yaml "$EVENTS_STACK" "$EVENTS_REGION" events "$EVENTS_OVERRIDES" | tr '\n' ' ')"
  fi
  if [ "$WANT_MAIN" = 1 ]; then
    while read -r region _; do
      [ -n "$region" ] || continue
      say "  sam $(sam_deploy_args .aws-sam/build-main/template.yaml "$(main_stack_name)" "$region" main "$(region_overrides "$region")" | tr '\n' ' ')"
    done <<EOF
$MAIN_PLAN
EOF
  fi
  say ""
  say "Dry run: nothing was built or changed."
  exit 0
fi

# ------------------------------------------------------------------ confirmation
# (--review asks before each change set instead.)
if [ "$ASSUME_YES" != 1 ] && [ "$REVIEW" != 1 ]; then
  if [ -t 0 ]; then
    printf 'Proceed with this plan? [y/N] '
    read -r answer
    case "$answer" in
      y | Y | yes | YES) ;;
      *)
        say "Nothing was changed."
        exit 0
        ;;
    esac
  else
    die 2 "not on a terminal, so no confirmation can be asked: re-run with --yes to deploy this plan (or --dry-run to only print it)."
  fi
fi

# ------------------------------------------------------------------ build once
run() {
  say "+ $*"
  "$@"
}

if [ "$WANT_EVENTS" = 1 ]; then
  run sam build --template-file "$EVENTS_TEMPLATE" --build-dir .aws-sam/build-events --config-file "$SAMCONFIG" --config-env "$EVENTS_CONFIG_ENV"
fi
if [ "$WANT_MAIN" = 1 ]; then
  run sam build --template-file "$MAIN_TEMPLATE" --build-dir .aws-sam/build-main --config-file "$SAMCONFIG" --config-env "$CONFIG_ENV"
fi

# ask QUESTION: 0 when the answer on deploy.sh's stdin is yes; no answer (end of input)
# is no. It reads fd 3, a copy of that stdin: the loops over Regions read a here-document.
exec 3<&0
ask() {
  local answer=""
  printf '%s [y/N] ' "$1"
  read -r answer <&3 || true
  case "$answer" in
    y | Y | yes | YES) return 0 ;;
    *) return 1 ;;
  esac
}

# show_change_set ARN STACK REGION: every page of describe-change-set, as a plan.
show_change_set() {
  local arn=$1 stack=$2 region=$3 token="" n=0 pages
  pages=$(mktemp -d)
  while :; do
    n=$((n + 1))
    if [ -z "$token" ]; then
      aws_query cloudformation describe-change-set --change-set-name "$arn" --region "$region" --output json >"$pages/$(printf '%04d' "$n").json" ||
        die 3 "cannot read change set $arn:" "$(aws_error)"
    else
      aws_query cloudformation describe-change-set --change-set-name "$arn" --region "$region" --output json --next-token "$token" >"$pages/$(printf '%04d' "$n").json" ||
        die 3 "cannot read change set $arn:" "$(aws_error)"
    fi
    token=$(deploy_py next-token <"$pages/$(printf '%04d' "$n").json")
    [ -n "$token" ] || break
  done
  deploy_py show-changes "$stack" "$region" "$pages"/*.json
  rm -rf "$pages"
}

# review_and_execute STACK REGION ACTION SAM_OUTPUT: finds the change set sam created,
# shows it, and executes it when the answer is yes; a no deletes it and stops here.
review_and_execute() {
  local stack=$1 region=$2 action=$3 output=$4 arn
  if grep -q "No changes to deploy" "$output"; then
    say "  $stack ($region) is up to date: no change set to review."
    return 0
  fi
  arn=$(grep -Eo 'arn:aws[a-z-]*:cloudformation:[a-z0-9-]+:[0-9]{12}:changeSet/[A-Za-z0-9-]+/[A-Za-z0-9-]+' "$output" | tail -1 || true)
  [ -n "$arn" ] || die 3 "sam deploy --no-execute-changeset printed no change set ARN for $stack in $region; nothing was executed." \
    "See the change sets: aws cloudformation list-change-sets --stack-name $stack --region $region"
  say ""
  show_change_set "$arn" "$stack" "$region"
  if ! ask "Execute this change set on $stack ($region)?"; then
    run aws cloudformation delete-change-set --change-set-name "$arn" --region "$region"
    say "Change set deleted; $stack in $region is unchanged, and nothing after it was deployed."
    exit 0
  fi
  run aws cloudformation execute-change-set --change-set-name "$arn" --stack-name "$stack" --region "$region"
  local waiter=stack-update-complete
  [ "$action" = CREATE ] && waiter=stack-create-complete
  run aws cloudformation wait "$waiter" --stack-name "$stack" --region "$region" ||
    die 4 "the change set on $stack in $region did not complete ($waiter failed); nothing after it was deployed." \
      "See why: aws cloudformation describe-stack-events --stack-name $stack --region $region"
}

# sam_deploy TEMPLATE STACK REGION COMPONENT OVERRIDES ACTION
sam_deploy() {
  local args=() line output
  while IFS= read -r line; do
    [ -n "$line" ] && args+=("$line")
  done <<EOF
$(sam_deploy_args "$@")
EOF
  if [ "$REVIEW" = 1 ]; then
    output=$(mktemp)
    say "+ sam ${args[*]}"
    sam "${args[@]}" | tee "$output"
    review_and_execute "$2" "$3" "$6" "$output"
    rm -f "$output"
  else
    run sam "${args[@]}"
  fi
  run aws cloudformation update-termination-protection --enable-termination-protection \
    --stack-name "$2" --region "$3" >/dev/null
}

if [ "$WANT_EVENTS" = 1 ]; then
  say ""
  say "== events stack $EVENTS_STACK ($EVENTS_REGION): $EVENTS_ACTION"
  sam_deploy .aws-sam/build-events/template.yaml "$EVENTS_STACK" "$EVENTS_REGION" events "$EVENTS_OVERRIDES" "$EVENTS_ACTION"
  deployed_table=$(stack_output "$EVENTS_STACK" "$EVENTS_REGION" SubscribersTableName)
  if [ -n "$deployed_table" ] && [ "$deployed_table" != None ] && [ "$deployed_table" != "$SUBSCRIBERS_TABLE" ]; then
    die 4 "the events stack reports subscribers table $deployed_table, not $SUBSCRIBERS_TABLE as planned; no main stack was deployed."
  fi
fi

# upload_page REGION STACK: the page's files, its config.json, and a CloudFront refresh.
upload_page() {
  local region=$1 stack=$2 bucket distribution register_url fulfillment_url config
  bucket=$(stack_output "$stack" "$region" PageBucketName)
  distribution=$(stack_output "$stack" "$region" PageDistributionId)
  register_url=$(stack_output "$stack" "$region" RegisterUrl)
  fulfillment_url=$(stack_output "$stack" "$region" FulfillmentUrl)
  # WafRegisterChallenge=enabled: the page loads the WebACL's integration SDK from the
  # WebACL's ApplicationIntegrationURL (no stack output can carry it).
  waf_url=""
  acl=$(stack_output "$stack" "$region" RegisterChallengeWebAcl)
  if [ -n "$acl" ] && [ "$acl" != none ] && [ "$acl" != None ]; then
    say "+ aws wafv2 get-web-acl --name ${acl%%|*} (the challenge's integration SDK URL)"
    waf_url=$(aws_query wafv2 get-web-acl --scope REGIONAL --region "$region" \
      --name "${acl%%|*}" --id "$(printf '%s' "$acl" | cut -d'|' -f2)" \
      --query ApplicationIntegrationURL --output text) ||
      die 3 "cannot read WebACL ${acl%%|*} in $region, whose integration SDK the page needs for WafRegisterChallenge:" "$(aws_error)" \
        "Grant wafv2:GetWebACL on it, or deploy with --parameter WafRegisterChallenge=disabled."
    case "$waf_url" in
      https://*) ;;
      *) die 3 "WebACL ${acl%%|*} in $region gave no integration SDK URL (got '$waf_url'), so the page could not pass its challenge." \
        "Deploy with --parameter WafRegisterChallenge=disabled, and report this." ;;
    esac
  fi
  run aws s3 sync "$PAGE_DIR" "s3://$bucket/" --region "$region" --delete \
    --exclude "test/*" --exclude "node_modules/*" --exclude ".*" --exclude "*.md" --exclude "package*.json" ||
    die 4 "could not upload the registration page to s3://$bucket (stack $stack, $region)." \
      "The bucket takes object writes only from PagePublisherArn and DeployerRoleArn: an AccessDenied means these credentials are neither (a role with a path: pass --parameter PagePublisherArn=ARN with the path)."
  config=$(mktemp)
  printf '{"registerUrl":"%s","fulfillmentUrl":"%s","productCode":"%s","stage":"%s","region":"%s","wafIntegrationUrl":"%s"}\n' \
    "$register_url" "$fulfillment_url" "$PRODUCT_CODE" "$STAGE" "$region" "$waf_url" >"$config"
  run aws s3 cp "$config" "s3://$bucket/config.json" --region "$region" \
    --content-type application/json --cache-control no-cache
  rm -f "$config"
  run aws cloudfront create-invalidation --distribution-id "$distribution" --paths "/*" >/dev/null
}

SUMMARY=""
if [ "$WANT_MAIN" = 1 ]; then
  while read -r region action _; do
    [ -n "$region" ] || continue
    stack=$(main_stack_name)
    say ""
    say "== main stack $stack ($region): $action"
    sam_deploy .aws-sam/build-main/template.yaml "$stack" "$region" main "$(region_overrides "$region")" "$action"
    if [ -n "$PAGE_DIR" ]; then
      upload_page "$region" "$stack"
    fi
    fulfillment=$(stack_output "$stack" "$region" FulfillmentUrl)
    page=$(stack_output "$stack" "$region" RegistrationPageUrl)
    usage_api=$(stack_output "$stack" "$region" UsageApiUrl)
    SUMMARY="${SUMMARY}  $region: Fulfillment URL $fulfillment
      registration page $page
"
    # UsageApi=disabled: no output.
    if [ -n "$usage_api" ] && [ "$usage_api" != None ]; then
      SUMMARY="${SUMMARY}      usage API $usage_api/usage/events (docs/usage-api.md)
"
    fi
    # Buyer profiles are closed to every role but the register function's and this one.
    if [ "$(stack_output "$stack" "$region" ProfileAccessRole)" = none ]; then
      SUMMARY="${SUMMARY}      buyer profiles: only the register function can read them; to read or erase one (awsmp profile), redeploy with --parameter ProfileAccessRoleArn=<role ARN> (docs/deploy.md, \"Buyer data\")
"
    fi
  done <<EOF
$MAIN_PLAN
EOF
fi

say ""
say "Done."
if [ "$WANT_EVENTS" = 1 ]; then
  say "  events: $EVENTS_STACK in $EVENTS_REGION, subscribers table $SUBSCRIBERS_TABLE"
fi
if [ -n "$SUMMARY" ]; then
  printf '%s' "$SUMMARY"
  say "Enter the Fulfillment URL in the AWS Marketplace Management Portal (product > Fulfillment options)."
  say "Review every resource before real billing traffic flows: metering errors are revenue errors."
fi
