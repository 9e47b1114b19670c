#!/usr/bin/env python3
"""Checks the SAM templates' wiring against the environment contract (crates/lambda/src/vars.rs) and the design (docs/design.md), with the standard library only.

The templates are CloudFormation YAML with short-form tags (!Ref, !Sub, ...), which the
standard library cannot parse, so this reads them by indentation: a resource is the block
under its two-space key in Resources, a property the block under its key. That is enough
for the contracts checked here, and each failure names the resource and what differs.

Usage: check_templates.py REPO_ROOT   (prints one line per check, exits 1 if any failed)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
RESULTS: list[tuple[bool, str]] = []


def check(ok: bool, name: str, detail: str = "") -> None:
    """Records one check's outcome."""
    RESULTS.append((ok, name if ok or not detail else f"{name}: {detail}"))


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def significant(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def block(lines: list[str], start: int) -> list[str]:
    """The lines nested under lines[start] (deeper indentation), comments kept."""
    base = indent_of(lines[start])
    out = []
    for line in lines[start + 1 :]:
        if significant(line) and indent_of(line) <= base:
            break
        out.append(line)
    return out


def section(lines: list[str], key: str, indent: int) -> list[str] | None:
    """The block under `key:` at exactly `indent` spaces (first match), or None."""
    pattern = re.compile(rf"^ {{{indent}}}{re.escape(key)}:(\s|$)")
    for i, line in enumerate(lines):
        if pattern.match(line):
            return block(lines, i)
    return None


def scalar(lines: list[str], key: str, indent: int) -> str | None:
    """The inline value of `key:` at `indent` spaces, unquoted, or None."""
    pattern = re.compile(rf"^ {{{indent}}}{re.escape(key)}:\s*(.*?)\s*$")
    for line in lines:
        m = pattern.match(line)
        if m:
            value = m.group(1)
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            return value
    return None


def keys(lines: list[str], indent: int) -> list[str]:
    """Mapping keys at exactly `indent` spaces."""
    pattern = re.compile(rf"^ {{{indent}}}([A-Za-z0-9_:/-]+):")
    return [m.group(1) for line in lines if (m := pattern.match(line))]


class Template:
    """One template file, read by indentation."""

    def __init__(self, path: Path):
        self.path = path
        self.name = path.name
        self.lines = path.read_text().splitlines()
        self.resources: dict[str, list[str]] = {}
        res = section(self.lines, "Resources", 0) or []
        current = None
        for line in res:
            m = re.match(r"^  ([A-Za-z0-9]+):\s*$", line)
            if m:
                current = m.group(1)
                self.resources[current] = []
            elif current:
                self.resources[current].append(line)

    def of_type(self, ty: str) -> dict[str, list[str]]:
        return {k: v for k, v in self.resources.items() if scalar(v, "Type", 4) == ty}

    def top_level(self) -> list[str]:
        return [m.group(1) for line in self.lines if (m := re.match(r"^([A-Za-z]+):", line))]


def architecture_env_table() -> dict[str, set[str]]:
    """binary -> the environment variables the contract table (the module documentation
    of crates/lambda/src/vars.rs) says it reads."""
    text = (ROOT / "crates/lambda/src/vars.rs").read_text()
    part = text.split("## Environment variables", 1)[1].split("\n\nuse ", 1)[0]
    readers: dict[str, set[str]] = {}
    for line in part.splitlines():
        m = re.match(r"^//! \|\s*`([A-Z0-9_]+)`\s*\|\s*([^|]+)\|", line)
        if not m:
            continue
        for reader in m.group(2).split(","):
            readers.setdefault(reader.strip(), set()).add(m.group(1))
    return readers


def main() -> int:
    events = Template(ROOT / "template-events.yaml")
    main_t = Template(ROOT / "template-main.yaml")
    templates = [events, main_t]

    # ---- every function reads exactly the variables the environment contract (crates/lambda/src/vars.rs) lists for it
    expected = architecture_env_table()
    check(len(expected) == 11, "the environment contract lists readers for the eleven functions", f"found {sorted(expected)}")
    seen: dict[str, str] = {}
    for t in templates:
        global_fn = section(section(t.lines, "Globals", 0) or [], "Function", 2) or []
        check(section(global_fn, "Environment", 4) is None, f"{t.name}: no Environment in Globals (each function's is its own)")
        for key, value in [("Runtime", "provided.al2023"), ("Handler", "bootstrap"), ("Architectures", "[arm64]")]:
            check(scalar(global_fn, key, 4) == value, f"{t.name}: Globals.Function.{key} {value}", f"got {scalar(global_fn, key, 4)}")
        global_logging = section(global_fn, "LoggingConfig", 4) or []
        check(scalar(global_logging, "LogFormat", 6) == "JSON", f"{t.name}: Globals.Function.LoggingConfig.LogFormat JSON")
        for logical, body in t.of_type("AWS::Serverless::Function").items():
            binary = scalar(body, "Binary", 8)
            where = f"{t.name} {logical}"
            if binary is None:
                check(False, f"{where}: Metadata.BuildProperties.Binary set")
                continue
            check(binary not in seen, f"{where}: binary {binary} deployed by one function only", f"also {seen.get(binary)}")
            seen[binary] = where
            props = section(body, "Properties", 4) or []
            variables = section(props, "Variables", 8) or []
            got = set(keys(variables, 10))
            want = expected.get(binary, set())
            check(
                got == want,
                f"{where}: environment is exactly what {binary} reads",
                f"missing {sorted(want - got)}, extra {sorted(got - want)}",
            )
            for key, value in [
                ("Runtime", "provided.al2023"),
                ("Handler", "bootstrap"),
                ("CodeUri", "./"),
                ("Architectures", "[arm64]"),
            ]:
                # The function's own value, else the one it gets from Globals.
                actual = scalar(props, key, 6) or scalar(global_fn, key, 4)
                check(actual == value, f"{where}: {key} {value}", f"got {actual}")
            check(scalar(body, "BuildMethod", 6) == "rust-cargolambda", f"{where}: BuildMethod rust-cargolambda")
            logging = section(props, "LoggingConfig", 6) or []
            log_format = scalar(logging, "LogFormat", 8) or scalar(global_logging, "LogFormat", 6)
            check(log_format == "JSON", f"{where}: LoggingConfig.LogFormat JSON", f"got {log_format}")
            check(scalar(logging, "LogGroup", 8) is not None, f"{where}: logs to its own log group (retention, KMS)")
            check(scalar(props, "Role", 6) is not None, f"{where}: has its own least-privilege role")
    check(set(seen) == set(expected), "every function in the environment contract is deployed", f"deployed {sorted(seen)}")

    # ---- event sources
    def function_by_binary(binary: str) -> list[str]:
        for t in templates:
            for body in t.of_type("AWS::Serverless::Function").values():
                if scalar(body, "Binary", 8) == binary:
                    return body
        return []

    def event_blocks(body: list[str]) -> dict[str, list[str]]:
        props = section(body, "Properties", 4) or []
        events_block = section(props, "Events", 6) or []
        return {name: section(events_block, name, 8) or [] for name in keys(events_block, 8)}

    for binary, queues in [
        ("subscription", {"SubscriptionEventsQueue"}),
        ("aggregator", {"WorkQueue", "DeprovisionWorkQueue"}),
        ("cleanup", {"CleanupQueue"}),
    ]:
        found = set()
        for name, ev in event_blocks(function_by_binary(binary)).items():
            if scalar(ev, "Type", 10) != "SQS":
                continue
            queue = scalar(ev, "Queue", 12) or ""
            found.add(queue.replace("!GetAtt ", "").replace(".Arn", ""))
            text = "\n".join(ev)
            check(scalar(ev, "BatchSize", 12) == "10", f"{binary} {name}: BatchSize 10")
            check("- ReportBatchItemFailures" in text, f"{binary} {name}: FunctionResponseTypes [ReportBatchItemFailures]")
            if binary != "subscription":
                check("MaximumConcurrency:" in text, f"{binary} {name}: ScalingConfig.MaximumConcurrency")
        check(found == queues, f"{binary} consumes {sorted(queues)}", f"got {sorted(found)}")

    for binary, rate in [
        ("deprovision-cleanup", "rate(15 minutes)"),
        ("agreement-reconcile", "rate(1 day)"),
        ("discoverer", "rate(15 minutes)"),
        ("submitter", "rate(1 minute)"),
    ]:
        schedules = [scalar(ev, "Schedule", 12) for ev in event_blocks(function_by_binary(binary)).values()]
        check(schedules == [rate], f"{binary} runs on {rate}", f"got {schedules}")
    submitter_props = section(function_by_binary("submitter"), "Properties", 4) or []
    check(scalar(submitter_props, "ReservedConcurrentExecutions", 6) == "1", "submitter ReservedConcurrentExecutions 1")
    # RegisterApi's OpenAPI body names the register function by its fixed name (an Api
    # event would make the API depend on the function, and so on the page's distribution,
    # which routes to the API: a cycle). tests/deploy/check_sam_graph.py checks the
    # transformed template has none, and that the permission exists.
    register_props = section(function_by_binary("register"), "Properties", 4) or []
    register_name = scalar(register_props, "FunctionName", 6) or ""
    paths = section(section(section(main_t.resources.get("RegisterApi", []), "Properties", 4) or [], "DefinitionBody", 6) or [], "paths", 8) or []
    routes = sorted((method, path) for path in keys(paths, 10) for method in keys(section(paths, path, 10) or [], 12))
    uris = [line.split("uri:", 1)[1].strip() for line in paths if line.strip().startswith("uri:")]
    want_uri = (
        '!Sub "arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2015-03-31/functions/'
        "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:"
        + register_name.removeprefix("!Sub ").strip('"') + '/invocations"'
    )
    check(
        routes == [("post", "/fulfillment"), ("post", "/register")] and not event_blocks(function_by_binary("register"))
        and register_name.startswith('!Sub "awsmp-') and len(uris) == 2 and set(uris) == {want_uri}
        and "\n".join(paths).count("type: aws_proxy") == 2,
        "RegisterApi serves POST /register and POST /fulfillment, each a proxy to the register function by its FunctionName",
        f"got {routes}, {uris}",
    )

    # ---- the Marketplace events rule
    rule = events.resources.get("MarketplaceEventsRule", [])
    pattern = section(rule, "EventPattern", 6) or []
    detail_types = {line.strip()[2:] for line in (section(pattern, "detail-type", 8) or []) if line.strip().startswith("- ")}
    check(
        detail_types
        == {
            "License Updated - Manufacturer",
            "License Deprovisioned - Manufacturer",
            "Purchase Agreement Ended - Manufacturer",
            "Purchase Agreement Ended - Proposer",
            "Purchase Agreement Amended - Manufacturer",
            "Purchase Agreement Amended - Proposer",
        },
        "events rule matches exactly the consumed detail-types",
        f"got {sorted(detail_types)}",
    )
    check("- aws.agreement-marketplace" in "\n".join(pattern), "events rule source aws.agreement-marketplace")
    policy = "\n".join(events.resources.get("SubscriptionEventsQueuePolicy", []))
    check("aws:SourceArn: !GetAtt MarketplaceEventsRule.Arn" in policy, "events queue policy scoped by aws:SourceArn of the rule")

    # ---- tables: keys, indexes, PITR, SSE, retained
    def table(t: Template, logical: str, name: str, hash_key: str, range_key: str, indexes: dict[str, tuple[str, str, str]]) -> None:
        body = t.resources.get(logical, [])
        where = f"{t.name} {logical}"
        props = section(body, "Properties", 4) or []
        check(scalar(props, "TableName", 6) == f'!Sub "{name}"', f"{where}: named {name}", f"got {scalar(props, 'TableName', 6)}")
        check(scalar(body, "DeletionPolicy", 4) == "Retain", f"{where}: DeletionPolicy Retain")
        check(scalar(body, "UpdateReplacePolicy", 4) == "Retain", f"{where}: UpdateReplacePolicy Retain")
        text = "\n".join(props)
        check("PointInTimeRecoveryEnabled: true" in text, f"{where}: point-in-time recovery")
        check("SSEEnabled: true" in text, f"{where}: server-side encryption")
        key_schema = "\n".join(section(props, "KeySchema", 6) or [])
        check(
            re.search(rf"AttributeName: {hash_key}\n\s+KeyType: HASH", key_schema) is not None
            and re.search(rf"AttributeName: {range_key}\n\s+KeyType: RANGE", key_schema) is not None,
            f"{where}: keys {hash_key} / {range_key}",
        )
        gsis = "\n".join(section(props, "GlobalSecondaryIndexes", 6) or [])
        names = re.findall(r"- IndexName: (\S+)", gsis)
        check(sorted(names) == sorted(indexes), f"{where}: indexes {sorted(indexes)}", f"got {names}")
        for index, (h, r, projection) in indexes.items():
            part = gsis.split(f"- IndexName: {index}", 1)[-1].split("- IndexName:", 1)[0]
            ok = (
                re.search(rf"AttributeName: {h}\n\s+KeyType: HASH", part) is not None
                and re.search(rf"AttributeName: {r}\n\s+KeyType: RANGE", part) is not None
                and projection in part.replace("\n", " ").replace("  ", " ")
            )
            check(ok, f"{where}: index {index} HASH {h} RANGE {r} {projection}")

    table(events, "SubscribersTable", "awsmp-subscribers-${StageName}", "licenseArn", "customerAWSAccountId", {
        "agreement": ("agreementId", "licenseArn", "ProjectionType: KEYS_ONLY"),
        "deprovisioning": ("deprovisioningIndex", "deprovisioningExpiry", "ProjectionType: ALL"),
    })
    table(main_t, "UsageTable", "awsmp-${ProductCode}-usage-${StageName}", "licenseArn", "customerAWSAccountId_dimension_timestamp", {
        "metering_pending": ("meteringPending", "licenseArn", "ProjectionType: INCLUDE"),
    })
    usage_gsi = "\n".join(section(section(main_t.resources["UsageTable"], "Properties", 4) or [], "GlobalSecondaryIndexes", 6) or [])
    check(
        re.search(r"NonKeyAttributes:\s*\n\s+- customerAWSAccountId\n\s+- dimension", usage_gsi) is not None,
        "usage metering_pending projects customerAWSAccountId and dimension",
    )
    usage_props = "\n".join(section(main_t.resources["UsageTable"], "Properties", 4) or [])
    check(
        re.search(r"ResourcePolicy: !If\n\s+- IsFullMode\n\s+- !Ref \"AWS::NoValue\"\n\s+- PolicyDocument:", usage_props) is not None
        and re.search(r"Effect: Deny\n\s+Principal: \"\*\"\n\s+Action:\n\s+- dynamodb:PutItem\n\s+- dynamodb:UpdateItem\n\s+- dynamodb:BatchWriteItem", usage_props) is not None,
        "usage table refuses every write in direct-submit mode (raw usage would stay pending unbilled)",
    )
    table(main_t, "AggregatedUsageTable", "awsmp-${ProductCode}-aggregated-usage-${StageName}", "licenseArn", "account_dimension_hour", {
        "metering_pending": ("meteringPending", "licenseArn", "ProjectionType: ALL"),
    })
    table(main_t, "CustomerProfileTable", "awsmp-${ProductCode}-customer-profile", "licenseArn", "customerAWSAccountId", {})

    # ---- IAM: "*" only for the Marketplace actions without resource-level permissions
    for t in templates:
        for i, line in enumerate(t.lines):
            if re.match(r'^\s+Resource:\s*"\*"\s*$', line):
                statement = []
                for back in range(i, 0, -1):
                    statement.insert(0, t.lines[back])
                    if re.match(r"^\s+- (Sid|Effect):", t.lines[back]):
                        break
                at = next((n for n, l in enumerate(statement) if re.match(r"^\s+Action:", l)), None)
                action = statement[at].split(":", 1)[1].strip() if at is not None else ""
                # A list of actions: every one of them must be allowed "*".
                actions = [action] if action else [
                    l.strip()[2:].strip() for l in statement[at + 1:] if re.match(r"^\s+- [a-z0-9-]+:[A-Za-z]+\s*$", l)
                ] if at is not None else [""]
                if any(re.match(r"^\s+Principal:", l) for l in statement):
                    continue  # a key policy's statement: "*" is the key itself
                check(
                    bool(actions) and all(a in ("aws-marketplace:BatchMeterUsage", "aws-marketplace:ResolveCustomer", "aws-marketplace:SearchAgreements", "aws-marketplace:DescribeAgreement", "aws-marketplace:GetAgreementTerms") for a in actions),
                    f"{t.name} line {i + 1}: Resource \"*\" only for the Marketplace actions without resource-level permissions (BatchMeterUsage, ResolveCustomer, SearchAgreements, DescribeAgreement, GetAgreementTerms)",
                    f"actions {actions!r}",
                )
    # ---- no stack may refund: billing adjustments are the operator's alone (awsmp adjust)
    refunds = [
        f"{t.name} line {i + 1}: {line.strip()}"
        for t in templates
        for i, line in enumerate(t.lines)
        if re.search(r"aws-marketplace:(\*|BatchCreateBillingAdjustmentRequest|SendAgreementCancellationRequest)", line)
    ]
    check(
        not refunds,
        "no stack role may file billing adjustments or cancel agreements (the operator's role alone, docs/operate.md)",
        "; ".join(refunds),
    )
    for binary, action in [("submitter", "aws-marketplace:BatchMeterUsage"), ("register", "aws-marketplace:ResolveCustomer")]:
        roles = "\n".join(main_t.resources.get(binary.capitalize() + "Role", []))
        check(f"Action: {action}" in roles, f"{binary} role allows {action}")
    register_role = "\n".join(main_t.resources.get("RegisterRole", []))
    check(
        "arn:${AWS::Partition}:dynamodb:${SubscribersTableRegion}:${AWS::AccountId}:table/${Name}" in register_role,
        "cross-Region subscribers ARN built from SubscribersTableRegion and the table name",
    )

    # ---- parameters
    params = keys(section(main_t.lines, "Parameters", 0) or [], 2)
    for p in [
        "ProductCode", "StageName", "MeteringLockHours", "DeploymentMode", "MeteringMode", "TestAccountAllowlist",
        "AllowedRegistrationFields", "ResolveCustomerRegion", "SubscribersTableName", "SubscribersTableRegion",
        "PermissionsBoundaryArn", "LogRetentionInDays", "LogsKmsKeyArn", "AlertsTopicArn", "CreateDashboard",
        "ZeroQuantityPolicy", "FlushMarginMinutes", "WebAclArn",
    ]:
        check(p in params, f"template-main.yaml parameter {p}")
    lock = section(section(main_t.lines, "Parameters", 0) or [], "MeteringLockHours", 2) or []
    check(scalar(lock, "MinValue", 4) == "1" and scalar(lock, "MaxValue", 4) == "20", "MeteringLockHours MinValue 1, MaxValue 20")
    mode = section(section(main_t.lines, "Parameters", 0) or [], "DeploymentMode", 2) or []
    check(scalar(mode, "AllowedValues", 4) == "[full, direct-submit]", "DeploymentMode full | direct-submit")

    # ---- direct-submit leaves out the aggregation stage (and everything that names it)
    full_only = {
        "DiscovererFunction", "AggregatorFunction", "CleanupFunction", "WorkQueue", "WorkDlq",
        "DeprovisionWorkQueue", "DeprovisionWorkDlq", "CleanupQueue", "CleanupDlq",
        "DiscovererRole", "AggregatorRole", "CleanupRole", "DiscovererLogGroup", "AggregatorLogGroup", "CleanupLogGroup",
    }
    for logical in sorted(full_only):
        check(scalar(main_t.resources.get(logical, []), "Condition", 4) == "IsFullMode", f"{logical}: Condition IsFullMode")
    ref = re.compile(r"(?:!Ref |!GetAtt |\$\{)(" + "|".join(sorted(full_only)) + r")\b")
    # An inline !If on a condition that implies full mode names them safely.
    implies_full = re.compile(r"!If \[(?:IsFullMode|DiscovererExpiresProfiles), [^\]]*\]")
    check(
        "DiscovererExpiresProfiles: !And [!Condition HasProfileRetention, !Condition IsFullMode]" in "\n".join(main_t.lines),
        "DiscovererExpiresProfiles implies IsFullMode",
    )
    for logical, body in main_t.resources.items():
        if logical == "MainDashboard" or scalar(body, "Condition", 4) == "IsFullMode":
            continue
        names = sorted(set(ref.findall(implies_full.sub("", "\n".join(body)))))
        check(not names, f"{logical}: names no full-mode-only resource unconditionally", f"names {names}")
    for metric in ["UsageRecordRejected", "UsageAggregationExpired", "LateUsageAfterSubmission"]:
        check(scalar(main_t.resources.get(metric + "Alarm", []), "Condition", 4) == "IsFullMode", f"{metric} alarm only in full mode")

    # ---- alarms
    alarm_text = "\n".join("\n".join(b) for b in main_t.of_type("AWS::CloudWatch::Alarm").values())
    for metric in [
        "UsageRecordRejected", "UsageRecordUnprocessed", "UsageAggregationExpired", "UsageSubmissionExpired",
        "BatchMeterUsageException", "CustomerNotSubscribed", "BisectDepthExceeded", "MeteringApiDisabled",
        "UnexpectedDuplicateRecord", "IncompleteRun", "MalformedItem", "LateUsageAfterSubmission",
        "AmbiguousSubmission", "ProfileExpiryFailed", "BatchMeterUsageRefused",
        "UnpricedUsage", "UnpricedUsageUnchecked",
    ]:
        check(f'SELECT SUM({metric}) FROM \\"AwsMarketplace/Metering\\"' in alarm_text, f"alarm on EMF metric {metric}")
    check(scalar(main_t.resources.get("ProfileExpiryFailedAlarm", []), "Condition", 4) == "DiscovererExpiresProfiles",
          "ProfileExpiryFailed alarm only where the discoverer expires profiles")
    for t, function_ids in [(events, ["DeprovisionCleanupFunction", "AgreementReconcileFunction"]), (main_t, ["DiscovererFunction", "SubmitterFunction"])]:
        for fid in function_ids:
            found = [
                body for body in t.of_type("AWS::CloudWatch::Alarm").values()
                if f"Value: !Ref {fid}" in "\n".join(body) and scalar(body, "MetricName", 6) == "Invocations"
            ]
            ok = len(found) == 1 and scalar(found[0], "TreatMissingData", 6) == "breaching" and scalar(found[0], "ComparisonOperator", 6) == "LessThanThreshold"
            check(ok, f"{t.name}: did-not-run alarm for {fid} (Invocations < 1, missing data breaching)")

    # ---- every EMF query and metric is this deployment's: ProductCode and Stage
    # The handlers put both dimensions on every metric (crates/aws/src/metrics.rs); a
    # query without them would add up every stage and product in the account.
    scope = "WHERE ProductCode = '${ProductCode}' AND Stage = '${StageName}'"
    for t in templates:
        text = "\n".join(t.lines)
        quoted_uses = len(re.findall(r'\\?"AwsMarketplace/Metering\\?"', text))
        queries = re.findall(r'(SELECT [^\n]*?FROM \\?"AwsMarketplace/Metering\\?")([^"\n]*)', text)
        check(
            len(queries) == quoted_uses,
            f"{t.name}: every quoted AwsMarketplace/Metering is a Metrics Insights query this check reads",
            f"{quoted_uses} uses, {len(queries)} queries",
        )
        for select, rest in queries:
            check(rest.strip() == scope, f"{t.name}: {select.split(' FROM')[0]} filtered by ProductCode and Stage", f"got {rest.strip()!r}")
        for i, line in enumerate(t.lines):
            if re.match(r"^\s+Expression:", line) and "${" in line:
                check(": !Sub " in line, f"{t.name} line {i + 1}: an expression naming parameters is a !Sub")
    for logical, body in main_t.of_type("AWS::CloudWatch::Alarm").items():
        text = "\n".join(body)
        for m in re.finditer(r"Namespace: AwsMarketplace/Metering\n((?:\s+.*\n?)*?)\s+(?:Stat|Period):", text):
            dims = m.group(1)
            ok = re.search(r"- Name: ProductCode\n\s+Value: !Ref ProductCode", dims) and re.search(r"- Name: Stage\n\s+Value: !Ref StageName", dims)
            check(bool(ok), f"{logical}: metric in AwsMarketplace/Metering has dimensions ProductCode and Stage", dims.strip())

    # ---- every metric a template names is one the code emits (crates/core/src/ports/metrics.rs)
    ports = (ROOT / "crates/core/src/ports/metrics.rs").read_text()
    emitted = set(re.findall(r'pub const [A-Z_]+: &str = "([A-Za-z]+)";', ports.split("pub mod metric", 1)[1].split("\n}", 1)[0]))
    for t in templates:
        text = "\n".join(t.lines)
        named = set(re.findall(r"SELECT SUM\((\w+)\)", text))
        named |= {
            scalar(body[i + 1 :], "MetricName", indent_of(line))
            for body in t.resources.values()
            for i, line in enumerate(body)
            if re.match(r"^\s+Namespace: AwsMarketplace/Metering\s*$", line)
        }
        check(named <= emitted, f"{t.name}: every AwsMarketplace/Metering metric it names is emitted", f"unknown {sorted(named - emitted)}")

    # ---- the heartbeat: records pending past their lock while nothing is submitted
    heartbeat = main_t.resources.get("SubmissionHeartbeatAlarm", [])
    text = "\n".join(heartbeat)
    check(
        "MetricName: PendingPastLock" in text and "MetricName: UsageRecordSubmitted" in text
        and re.search(r"MetricName: PendingPastLock\n(?:.*\n)*?\s+Stat: Minimum", text) is not None
        and "IF(due > 0 AND FILL(submitted, 0) == 0, 1, 0)" in text,
        "heartbeat alarm: PendingPastLock found by every run of the hour while UsageRecordSubmitted is 0",
    )
    check(scalar(heartbeat, "Condition", 4) is None, "heartbeat alarm in both deployment modes")

    # ---- log levels: a line without `level` (every EMF line) counts as INFO under JSON
    # logs, so WARN and above would drop every metric and quiet every alarm.
    for t in templates:
        param = section(section(t.lines, "Parameters", 0) or [], "ApplicationLogLevel", 2) or []
        allowed = (scalar(param, "AllowedValues", 4) or "").strip("[]").replace(" ", "").split(",")
        check(
            bool(param) and set(allowed) <= {"TRACE", "DEBUG", "INFO"} and scalar(param, "Default", 4) == "INFO",
            f"{t.name}: ApplicationLogLevel offers only TRACE, DEBUG, INFO (default INFO)",
            f"got {allowed}",
        )
        levels = [line.split(":", 1)[1].strip() for line in t.lines if re.match(r"^\s+ApplicationLogLevel:\s*\S", line)]
        check(
            bool(levels) and all(v in ("!Ref ApplicationLogLevel", "TRACE", "DEBUG", "INFO") for v in levels),
            f"{t.name}: every function logs at ApplicationLogLevel (or TRACE/DEBUG/INFO)",
            f"got {levels}",
        )

    # ---- the page's files are code buyers' browsers run: only the publisher
    # (PagePublisherArn, what deploy.sh runs as) and the deployer write or delete them
    page_policy = "\n".join(main_t.resources.get("PageBucketPolicy", []))
    guard = page_policy.split("Sid: OnlyThePublisherWritesThePage", 1)[-1].split("- !Ref \"AWS::NoValue\"\n", 1)[0] \
        if "Sid: OnlyThePublisherWritesThePage" in page_policy else ""
    check(
        "- GuardPageWrites" in page_policy and "Effect: Deny" in guard and 'Principal: "*"' in guard
        and all(f"- s3:{a}" in guard for a in ("PutObject", "PutObjectAcl", "DeleteObject", "DeleteObjectVersion"))
        and 'Resource: !Sub "${PageBucket.Arn}/*"' in guard
        and "ArnNotEquals:" in guard
        and '- !If [HasPagePublisher, !Ref PagePublisherArn, !Ref "AWS::NoValue"]' in guard
        and '- !If [HasDeployerRole, !Ref DeployerRoleArn, !Ref "AWS::NoValue"]' in guard,
        "PageBucketPolicy: object writes and deletes denied to all but PagePublisherArn and DeployerRoleArn",
    )
    deploy_sh = (ROOT / "deploy.sh").read_text()
    check("PagePublisherArn" in deploy_sh and "PageLogoOrigin" in deploy_sh,
          "deploy.sh passes PagePublisherArn (its own credentials) and PageLogoOrigin (from logoUrl)")

    # ---- the registration page's security headers: a strict CSP that still allows
    # exactly what web/ loads, no framing, HSTS
    policy = main_t.resources.get("PageResponseHeadersPolicy", [])
    check(scalar(policy, "Type", 4) == "AWS::CloudFront::ResponseHeadersPolicy", "page has its own response headers policy")
    distribution = "\n".join(main_t.resources.get("PageDistribution", []))
    check("ResponseHeadersPolicyId: !Ref PageResponseHeadersPolicy" in distribution, "page distribution serves the policy's headers")
    csp_line = scalar(section(policy, "ContentSecurityPolicy", 10) or [], "ContentSecurityPolicy", 12) or ""
    # !Sub ["<policy>", {Sdk: !If [ChallengeRegister, " https://*.awswaf.com", ""]}]:
    # the checks below read the policy without the challenge; the challenge's own after.
    sdk = " https://*.awswaf.com"
    csp_form = re.fullmatch(
        r'!Sub \["(.*)", \{Sdk: !If \[ChallengeRegister, "(.*)", ""\], '
        r'Logo: !If \[HasPageLogoOrigin, !Join \["", \[" ", !Ref PageLogoOrigin\]\], ""\]\}\]', csp_line)
    check(csp_form is not None and csp_form.group(2) == sdk,
          "CSP: one policy, naming WafRegisterChallenge's SDK hosts (https://*.awswaf.com) only with it, "
          "and PageLogoOrigin only when set", csp_line)
    csp_template = csp_form.group(1) if csp_form else ""

    def csp_directives(sdk_value: str, logo: str = "") -> dict[str, list[str]]:
        return {
            parts[0]: parts[1:]
            for parts in (d.split() for d in csp_template.replace("${Sdk}", sdk_value).replace("${Logo}", logo).split(";"))
            if parts
        }

    directives = csp_directives("")
    with_challenge = csp_directives(sdk)
    check(
        {k: v for k, v in with_challenge.items() if k not in ("script-src", "connect-src")}
        == {k: v for k, v in directives.items() if k not in ("script-src", "connect-src")}
        and with_challenge.get("script-src") == ["'self'", "https://*.awswaf.com"]
        and with_challenge.get("connect-src") == ["'self'", "https://*.awswaf.com"],
        "CSP with WafRegisterChallenge: script-src and connect-src add the SDK's host, nothing else changes",
        f"got {with_challenge}",
    )
    # Images: the page's own files, and the one logo origin when PageLogoOrigin is set;
    # never any https host (a replaced script could send the form out through an image).
    check(directives.get("img-src") == ["'self'"], "CSP img-src 'self' alone without PageLogoOrigin", f"got {directives.get('img-src')}")
    with_logo = csp_directives("", " https://cdn.example.com")
    check(with_logo.get("img-src") == ["'self'", "https://cdn.example.com"]
          and {k: v for k, v in with_logo.items() if k != "img-src"} == {k: v for k, v in directives.items() if k != "img-src"},
          "CSP with PageLogoOrigin: img-src adds that origin, nothing else changes", f"got {with_logo}")
    logo_param = "\n".join(section(section(main_t.lines, "Parameters", 0) or [], "PageLogoOrigin", 2) or [])
    check('AllowedPattern: "^$|^https://' in logo_param and "(:[0-9]{1,5})?$" in logo_param,
          "PageLogoOrigin accepts empty or an https origin with no path", logo_param)
    check(directives.get("default-src") == ["'none'"], "CSP default-src 'none'", f"got {directives.get('default-src')}")
    check(directives.get("frame-ancestors") == ["'none'"], "CSP frame-ancestors 'none'", f"got {directives.get('frame-ancestors')}")
    for name in ("base-uri", "form-action"):
        check(directives.get(name) == ["'none'"], f"CSP {name} 'none'", f"got {directives.get(name)}")
    unsafe = {"'unsafe-inline'", "'unsafe-eval'", "*", "data:", "blob:", "http:", "https:"}
    for name in ("script-src", "style-src", "connect-src"):
        got = directives.get(name, [])
        check(bool(got) and not (set(got) & unsafe), f"CSP {name} names sources, nothing unsafe or open", f"got {got}")
    web = ROOT / "web"
    html = (web / "index.html").read_text()
    app = (web / "app.js").read_text()
    loaded = re.findall(r'<script[^>]*\ssrc="([^"]+)"', html) + re.findall(r'<link[^>]*\shref="([^"]+)"', html)
    check(bool(loaded) and all("//" not in src and ":" not in src for src in loaded),
          "web/index.html loads only its own files (covered by 'self')", f"got {loaded}")
    check("'self'" in directives.get("script-src", []) and "'self'" in directives.get("style-src", []), "CSP script-src and style-src allow the page's own files")
    check(not re.search(r"<script(?![^>]*\ssrc=)[^>]*>", html) and "<style" not in html and " style=" not in html,
          "web/index.html has no inline script or style (the CSP refuses them)")
    code = re.sub(r"^\s*//.*$", "", app, flags=re.M)  # comments may name what the code avoids
    check(not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|eval\(|new Function|setAttribute\(\s*[\"']style", code),
          "web/app.js renders with DOM APIs only (no HTML strings, eval or style attributes)")
    fetched = re.findall(r"fetch\(\s*([^,)]+)", code)
    posted = re.findall(r"(?<!function )\bpost\(\s*([^,)]+)", code)
    check(sorted(f.strip() for f in fetched) == ['"config.json"', "url", "url"] and posted == ["config.registerEndpoint"]
          and "return fetch(url, options);" in code and "return waf.fetch(url, options);" in code,
          "web/app.js fetches config.json and posts to the register endpoint only (through the WAF SDK with the challenge)",
          f"got fetch {fetched}, post {posted}")
    check("'self'" in directives.get("connect-src", []), "CSP connect-src allows config.json ('self')")
    check(directives.get("connect-src") == ["'self'"],
          "CSP connect-src 'self' only: config.json and /register, which the distribution routes to RegisterApi",
          f"got {directives.get('connect-src')}")
    headers = "\n".join(policy)
    check(re.search(r"FrameOption: DENY", headers) is not None, "page X-Frame-Options DENY")
    hsts = section(policy, "StrictTransportSecurity", 10) or []
    max_age = scalar(hsts, "AccessControlMaxAgeSec", 12) or "0"
    check(int(max_age) >= 31536000 and scalar(hsts, "Override", 12) == "true", "page HSTS for at least a year", f"got {max_age}")

    # ---- the page's optional custom domain (PageDomainName + PageCertificateArn): the
    # distribution answers on it with the ACM certificate and requires TLS 1.2, and
    # everything that names the page's origin names it; without it nothing changes.
    page_params = section(main_t.lines, "Parameters", 0) or []
    domain_p = section(page_params, "PageDomainName", 2) or []
    cert_p = section(page_params, "PageCertificateArn", 2) or []
    check(
        scalar(domain_p, "Default", 4) == "" and scalar(cert_p, "Default", 4) == ""
        and (scalar(cert_p, "AllowedPattern", 4) or "").startswith("^$|^arn:aws:acm:us-east-1:"),
        "PageDomainName and PageCertificateArn optional (default empty), the certificate an ACM ARN in us-east-1",
        f"got {scalar(cert_p, 'AllowedPattern', 4)}",
    )
    together = "\n".join(section(section(main_t.lines, "Rules", 0) or [], "PageDomainNeedsCertificate", 2) or [])
    check(
        "RuleCondition" not in together and re.search(r"- Assert: !Or\n", together) is not None
        and '- !And [!Equals [!Ref PageDomainName, ""], !Equals [!Ref PageCertificateArn, ""]]' in together
        and '- !And [!Not [!Equals [!Ref PageDomainName, ""]], !Not [!Equals [!Ref PageCertificateArn, ""]]]' in together,
        "Rule PageDomainNeedsCertificate: PageDomainName and PageCertificateArn both or neither",
    )
    page_conditions = section(main_t.lines, "Conditions", 0) or []
    check(
        scalar(page_conditions, "HasPageDomain", 2)
        == '!And [!Not [!Equals [!Ref PageDomainName, ""]], !Not [!Equals [!Ref PageCertificateArn, ""]]]',
        "Condition HasPageDomain: PageDomainName and PageCertificateArn given",
        f"got {scalar(page_conditions, 'HasPageDomain', 2)}",
    )
    dist_config = section(main_t.resources.get("PageDistribution", []), "DistributionConfig", 6) or []
    check(
        scalar(dist_config, "Aliases", 8) == '!If [HasPageDomain, [!Ref PageDomainName], !Ref "AWS::NoValue"]',
        "page distribution: Aliases [PageDomainName] only with a custom domain",
        f"got {scalar(dist_config, 'Aliases', 8)}",
    )
    # ViewerCertificate: !If [HasPageDomain, {the certificate, TLS 1.2}, AWS::NoValue]
    branches: list[list[str]] = []
    for line in section(dist_config, "ViewerCertificate", 8) or []:
        if re.match(r"^ {10}- ", line):
            branches.append([line.replace("- ", "  ", 1)])
        elif branches and significant(line):
            branches[-1].append(line)
    with_domain = branches[1] if len(branches) == 3 else []
    check(
        scalar(dist_config, "ViewerCertificate", 8) == "!If" and len(branches) == 3
        and [l.strip() for l in branches[0]] == ["HasPageDomain"]
        and [l.strip() for l in branches[2]] == ['!Ref "AWS::NoValue"']
        and keys(with_domain, 12) == ["AcmCertificateArn", "SslSupportMethod", "MinimumProtocolVersion"]
        and scalar(with_domain, "AcmCertificateArn", 12) == "!Ref PageCertificateArn"
        and scalar(with_domain, "SslSupportMethod", 12) == "sni-only"
        and scalar(with_domain, "MinimumProtocolVersion", 12) == "TLSv1.2_2021",
        "page distribution: with a custom domain, its ACM certificate (sni-only) and MinimumProtocolVersion TLSv1.2_2021;"
        " without, CloudFront's default certificate",
        "\n".join("\n".join(b) for b in branches),
    )
    host = "!If [HasPageDomain, !Ref PageDomainName, !GetAtt PageDistribution.DomainName]"
    page_url = f'!Sub ["https://${{Host}}/", {{Host: {host}}}]'
    register_vars = section(section(function_by_binary("register"), "Properties", 4) or [], "Variables", 8) or []
    check(section(section(main_t.resources.get("RegisterApi", []), "Properties", 4) or [], "Cors", 6) is None,
          "RegisterApi has no CORS (the page calls it on its own origin)")
    outputs = section(main_t.lines, "Outputs", 0) or []
    for where, got, want in [
        ("register REGISTRATION_PAGE_URL", scalar(register_vars, "REGISTRATION_PAGE_URL", 10), page_url),
        ("register ALLOWED_ORIGIN", scalar(register_vars, "ALLOWED_ORIGIN", 10), f'!Sub ["https://${{Host}}", {{Host: {host}}}]'),
        ("output RegistrationPageUrl", scalar(section(outputs, "RegistrationPageUrl", 2) or [], "Value", 4), page_url),
        ("output RegisterUrl", scalar(section(outputs, "RegisterUrl", 2) or [], "Value", 4), f'!Sub ["https://${{Host}}/register", {{Host: {host}}}]'),
        ("output FulfillmentUrl", scalar(section(outputs, "FulfillmentUrl", 2) or [], "Value", 4), f'!Sub ["https://${{Host}}/fulfillment", {{Host: {host}}}]'),
    ]:
        check(got == want, f"{where} is the page's origin: PageDomainName when given, else the distribution's name", f"got {got}")
    # Nothing else names the distribution's own domain: every use is inside `host`, but
    # the output the seller points the custom domain's DNS record at.
    dns_output = section(outputs, "PageDistributionDomainName", 2) or []
    check(scalar(dns_output, "Value", 4) == "!GetAtt PageDistribution.DomainName",
          "output PageDistributionDomainName: the distribution's own name (the custom domain's CNAME/alias target)")
    in_outputs = False
    dns_value_line = None
    for i, line in enumerate(main_t.lines):
        in_outputs = in_outputs or line.startswith("Outputs:")
        if in_outputs and line.startswith("  PageDistributionDomainName:"):
            dns_value_line = next((i + 1 + j for j, l in enumerate(block(main_t.lines, i)) if re.match(r"^    Value:", l)), None)
    stray = [
        i + 1 for i, line in enumerate(main_t.lines)
        if significant(line) and i != dns_value_line
        and re.search(r"PageDistribution(\.|\"?\s*,\s*\"?)DomainName", line.replace(host, ""))
    ]
    check(not stray, "template-main.yaml: the page's origin follows PageDomainName everywhere (no other use of PageDistribution.DomainName)",
          f"lines {stray}")

    # ---- the register API on the page's own origin: the distribution routes POST
    # /register and /fulfillment to RegisterApi's stage, never cached, HTTPS only, with
    # the origin header the WebACL trusts and the buyer's address from the edge function.
    edge_value = '!Select [2, !Split ["/", !Ref "AWS::StackId"]]'  # x-awsmp-edge: this stack's id
    origins = section(dist_config, "Origins", 8) or []
    api_origin: list[str] = []
    for line in origins:
        if re.match(r"^ {10}- ", line):
            api_origin = [line] if "Id: register-api" in line else []
        elif api_origin:
            api_origin.append(line)
    api_text = "\n".join(api_origin)
    check(
        'DomainName: !Sub "${RegisterApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}"' in api_text
        and 'OriginPath: !Sub "/${StageName}"' in api_text
        and "OriginProtocolPolicy: https-only" in api_text
        and re.search(r"- HeaderName: x-awsmp-edge\n\s+HeaderValue: (.*)", api_text) is not None
        and re.search(r"- HeaderName: x-awsmp-edge\n\s+HeaderValue: (.*)", api_text).group(1) == edge_value,
        "page distribution: origin register-api is RegisterApi's stage over HTTPS, adding x-awsmp-edge (the value the WebACL matches)",
        api_text,
    )
    behaviors: dict[str, list[str]] = {}
    current = None
    for line in section(dist_config, "CacheBehaviors", 8) or []:
        m = re.match(r"^ {10}- PathPattern: (\S+)", line)
        if m:
            current = m.group(1)
            behaviors[current] = []
        elif current and significant(line):
            behaviors[current].append(line)
    check(sorted(behaviors) == ["/fulfillment", "/register"], "page distribution routes exactly /register and /fulfillment to the API", f"got {sorted(behaviors)}")
    for path, lines in sorted(behaviors.items()):
        text = "\n".join(lines)
        check(
            "TargetOriginId: register-api" in text and "ViewerProtocolPolicy: https-only" in text
            and "POST" in (scalar(lines, "AllowedMethods", 12) or "")
            and "CachePolicyId: 4135ea2d-6df8-44a3-9df3-4b5a84be39ad" in text
            and "OriginRequestPolicyId: !Ref RegisterOriginRequestPolicy" in text
            and "- EventType: viewer-request\n                FunctionARN: !GetAtt PageViewerAddressFunction.FunctionMetadata.FunctionARN" in text,
            f"page distribution {path}: to register-api, POST allowed, CachingDisabled, HTTPS only (no redirect of a POST),"
            " RegisterOriginRequestPolicy, PageViewerAddressFunction on viewer-request",
        )
    forward = "\n".join(main_t.resources.get("RegisterOriginRequestPolicy", []))
    check(
        "CookieBehavior: none" in forward and "QueryStringBehavior: none" in forward and "HeaderBehavior: whitelist" in forward
        and "Headers: [content-type, origin, user-agent, x-aws-waf-token, x-awsmp-viewer-ip]" in forward,
        "RegisterOriginRequestPolicy forwards content-type, origin, user-agent, x-aws-waf-token and x-awsmp-viewer-ip only"
        " (no cookies, no query string)",
    )
    # The edge function, run as CloudFront runs it: node evaluates its FunctionCode on a
    # request that already carries a forged x-awsmp-viewer-ip.
    function = main_t.resources.get("PageViewerAddressFunction", [])
    code_at = next((i for i, line in enumerate(function) if re.match(r"^ {6}FunctionCode: \|", line)), None)
    code = "\n".join(line[8:] for line in block(function, code_at) if line.startswith(" " * 8)) if code_at is not None else ""
    check(scalar(function, "Runtime", 8) == "cloudfront-js-2.0" and scalar(function, "AutoPublish", 6) == "true",
          "PageViewerAddressFunction: cloudfront-js-2.0, published")
    node = shutil.which("node")
    if node is None:
        check(False, "PageViewerAddressFunction runs under node (install Node.js >= 18, as the browser tests need)")
    else:
        probe = code + """
var event = { viewer: { ip: "198.51.100.7" }, request: { method: "POST", uri: "/register",
  headers: { "x-awsmp-viewer-ip": { value: "203.0.113.1" }, "content-type": { value: "application/json" } } } };
var out = handler(event);
process.stdout.write(JSON.stringify(out.headers));
"""
        ran = subprocess.run([node, "-e", probe], capture_output=True, text=True, timeout=30)
        headers = ran.stdout
        check(
            ran.returncode == 0 and '"x-awsmp-viewer-ip":{"value":"198.51.100.7"}' in headers
            and '"content-type":{"value":"application/json"}' in headers,
            "PageViewerAddressFunction writes the viewer's address into x-awsmp-viewer-ip over a forged one, keeping the rest",
            f"got {headers or ran.stderr}",
        )

    # ---- one body-size limit: WAF's common rule set blocks bodies over 8 KB
    # (SizeRestrictions_BODY); the register function must refuse the same size itself
    form = (ROOT / "crates/functions/register/src/form.rs").read_text()
    m = re.search(r"pub const MAX_BODY_BYTES: usize = ([0-9* ]+);", form)
    limit = eval(m.group(1)) if m else None  # digits and * only
    acl = "\n".join(main_t.resources.get("RegisterWebAcl", []))
    if "AWSManagedRulesCommonRuleSet" in acl and "SizeRestrictions_BODY" not in acl.replace("# Blocks request bodies over 8 KB (SizeRestrictions_BODY)", ""):
        check(limit == 8192, "register accepts the bodies WAF's common rule set lets through (8 KB)", f"MAX_BODY_BYTES = {limit}")

    # ---- every queue refuses requests without TLS (a Deny in a queue policy naming it)
    for t in templates:
        denied: set[str] = set()
        for body in t.of_type("AWS::SQS::QueuePolicy").values():
            text = "\n".join(body)
            for statement in text.split("          - Sid: ")[1:]:
                if "Effect: Deny" in statement and 'aws:SecureTransport: "false"' in statement:
                    denied |= set(re.findall(r"- !GetAtt (\w+)\.Arn", statement))
        for logical in t.of_type("AWS::SQS::Queue"):
            check(logical in denied, f"{t.name} {logical}: a queue policy denies requests without TLS")

    # ---- only the Marketplace rule (and the optional admin role) may send lifecycle events
    events_policy = "\n".join(events.resources.get("SubscriptionEventsQueuePolicy", []))
    deny = next((st for st in events_policy.split("          - Sid: ")[1:] if st.startswith("DenySendersButTheRule")), "")
    check(
        "Effect: Deny" in deny and "Action: sqs:SendMessage" in deny
        and "Resource: !GetAtt SubscriptionEventsQueue.Arn" in deny
        and deny.count("aws:SourceArn: !GetAtt MarketplaceEventsRule.Arn") == 2
        and "ArnNotEquals:" in deny and "aws:PrincipalArn: !Ref EventsQueueAdminRoleArn" in deny,
        "template-events.yaml: the subscription queue denies SendMessage to all but the events rule (and EventsQueueAdminRoleArn)",
    )
    dlq_deny = next((st for st in events_policy.split("          - Sid: ")[1:] if st.startswith("DenySendersToTheDlqButTheRule")), "")
    check(
        "Effect: Deny" in dlq_deny and "Action: sqs:SendMessage" in dlq_deny
        and "Resource: !GetAtt SubscriptionEventsDlq.Arn" in dlq_deny
        and "ArnNotEquals:\n                aws:SourceArn: !GetAtt MarketplaceEventsRule.Arn" in dlq_deny
        and "PrincipalArn" not in dlq_deny,
        "template-events.yaml: the subscription DLQ denies SendMessage to all but the events rule's dead-letter deliveries",
    )
    # ---- the main stack's work queues: only the discoverer sends work, the aggregator
    # cleanup (and WorkQueueAdminRoleArn, to redrive); nobody sends to a DLQ
    pipeline = "\n".join(main_t.resources.get("PipelineQueuesPolicy", []))
    statements = {st.split("\n", 1)[0]: st for st in pipeline.split("          - Sid: ")[1:]}
    admin_role = '- !If [HasWorkQueueAdminRole, !Ref WorkQueueAdminRoleArn, !Ref "AWS::NoValue"]'
    for sid, queues, role in [("DenyWorkSendersButTheDiscoverer", ["WorkQueue", "DeprovisionWorkQueue"], "DiscovererRole"),
                              ("DenyCleanupSendersButTheAggregator", ["CleanupQueue"], "AggregatorRole")]:
        st = statements.get(sid, "")
        check(
            "Effect: Deny" in st and 'Principal: "*"' in st and "Action: sqs:SendMessage" in st
            and all(f"!GetAtt {q}.Arn" in st for q in queues) and st.count("!GetAtt") == len(queues) + 1
            and f"ArnNotEquals:\n                aws:PrincipalArn:\n                  - !GetAtt {role}.Arn\n                  {admin_role}" in st,
            f"PipelineQueuesPolicy {sid}: SendMessage to {', '.join(queues)} denied to all but {role} (and WorkQueueAdminRoleArn)",
        )
    st = statements.get("DenyEverySenderToTheDlqs", "")
    check(
        "Effect: Deny" in st and "Action: sqs:SendMessage" in st and "Condition" not in st
        and all(f"!GetAtt {q}.Arn" in st for q in ("WorkDlq", "DeprovisionWorkDlq", "CleanupDlq")),
        "PipelineQueuesPolicy: SendMessage to every DLQ denied to everyone",
    )

    # ---- the events stack can use a customer-managed KMS key (DataKmsKeyArn): the
    # subscribers table, the subscription queue and its DLQ use it when it is given, and
    # only then do its roles get kms grants; empty keeps aws/dynamodb and SSE-SQS.
    def if_value(value: str | None, kms_given: bool) -> str | None:
        """`value` with `!If [HasDataKms, a, b]` decided; None for AWS::NoValue or absent."""
        m = re.fullmatch(r"!If \[HasDataKms, (.+?), (.+?)\]", value or "")
        if m:
            value = m.group(1 if kms_given else 2)
        return None if value in (None, '!Ref "AWS::NoValue"') else value

    data_kms = section(section(events.lines, "Parameters", 0) or [], "DataKmsKeyArn", 2) or []
    check(
        scalar(data_kms, "Type", 4) == "String" and scalar(data_kms, "Default", 4) == ""
        and scalar(data_kms, "AllowedPattern", 4) == "^$|^arn:aws[a-z-]*:kms:us-east-1:[0-9]{12}:key/.+$",
        "template-events.yaml: DataKmsKeyArn optional (default empty), a key ARN in us-east-1",
        f"got {scalar(data_kms, 'AllowedPattern', 4)}",
    )
    check(
        scalar(section(events.lines, "Conditions", 0) or [], "HasDataKms", 2) == '!Not [!Equals [!Ref DataKmsKeyArn, ""]]',
        "template-events.yaml: Condition HasDataKms is DataKmsKeyArn not empty",
    )
    sse = section(section(events.resources.get("SubscribersTable", []), "Properties", 4) or [], "SSESpecification", 6) or []
    check(
        scalar(sse, "SSEEnabled", 8) == "true"
        and [if_value(scalar(sse, k, 8), True) for k in ("SSEType", "KMSMasterKeyId")] == ["KMS", "!Ref DataKmsKeyArn"]
        and [if_value(scalar(sse, k, 8), False) for k in ("SSEType", "KMSMasterKeyId")] == [None, None],
        "SubscribersTable: encrypted with DataKmsKeyArn when given, else aws/dynamodb",
        "\n".join(sse),
    )
    for logical in ("SubscriptionEventsQueue", "SubscriptionEventsDlq"):
        props = section(events.resources.get(logical, []), "Properties", 4) or []
        on = {k: if_value(scalar(props, k, 6), True) for k in ("SqsManagedSseEnabled", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds")}
        off = {k: if_value(scalar(props, k, 6), False) for k in on}
        reuse = on["KmsDataKeyReusePeriodSeconds"] or ""
        check(
            on["KmsMasterKeyId"] == "!Ref DataKmsKeyArn" and on["SqsManagedSseEnabled"] in (None, "false")
            and reuse.isdigit() and 60 <= int(reuse) <= 86400,
            f"{logical}: SSE-KMS under DataKmsKeyArn when given (SSE-SQS off, data key reuse 60..86400 s)",
            f"got {on}",
        )
        check(
            off == {"SqsManagedSseEnabled": "true", "KmsMasterKeyId": None, "KmsDataKeyReusePeriodSeconds": None},
            f"{logical}: SqsManagedSseEnabled and no KMS key when DataKmsKeyArn is empty (the default)",
            f"got {off}",
        )
    # Every kms grant of the events roles is an `!If [HasDataKms, statement, AWS::NoValue]`
    # item: kms:Decrypt on the key only, through the services that call KMS for the role.
    via = {
        "SubscriptionRole": {'!Sub "sqs.${AWS::Region}.amazonaws.com"', '!Sub "dynamodb.${AWS::Region}.amazonaws.com"'},
        "DeprovisionCleanupRole": {'!Sub "dynamodb.${AWS::Region}.amazonaws.com"'},
        "AgreementReconcileRole": {'!Sub "dynamodb.${AWS::Region}.amazonaws.com"'},
        # The subscribers table's stream records are under the table's key.
        "BuyerEventsRole": {'!Sub "dynamodb.${AWS::Region}.amazonaws.com"'},
    }
    for logical, body in events.of_type("AWS::IAM::Role").items():
        guarded: list[int] = []
        services: set[str] = set()
        for i, line in enumerate(body):
            if line.strip() != "- !If":
                continue
            items = block(body, i)
            depth = indent_of(line) + 2
            heads = [l.strip() for l in items if significant(l) and indent_of(l) == depth]
            statement = "\n".join(items)
            if not (heads and heads[0] == "- HasDataKms" and "kms:" in statement):
                continue
            guarded += range(i, i + 1 + len(items))
            found: set[str] = set()
            for j, l in enumerate(items):
                m = re.match(r"^\s+kms:ViaService:[ \t]*(.*?)\s*$", l)
                if m:
                    listed = [v.strip()[2:] for v in block(items, j) if significant(v)]
                    found |= {m.group(1)} if m.group(1) else set(listed)
            services |= found
            sid = re.search(r"- Sid: (\w+)", statement)
            check(
                len(heads) == 3 and heads[2] == '- !Ref "AWS::NoValue"'
                and re.search(r"Action: kms:Decrypt\n", statement) is not None and statement.count("kms:") == 2
                and "Resource: !Ref DataKmsKeyArn" in statement and "StringEquals:" in statement and bool(found),
                f"template-events.yaml {logical} {sid.group(1) if sid else 'statement'}: kms grant only under HasDataKms"
                " (kms:Decrypt on DataKmsKeyArn, kms:ViaService), AWS::NoValue otherwise",
                statement,
            )
        loose = [i + 1 for i, line in enumerate(body) if significant(line) and "kms:" in line and i not in guarded]
        check(not loose, f"template-events.yaml {logical}: no kms grant outside HasDataKms", f"body lines {loose}")
        check(services == via.get(logical, set()), f"template-events.yaml {logical}: kms:Decrypt via {sorted(via.get(logical, set()))} with DataKmsKeyArn",
              f"got {sorted(services)}")

    # ---- the tables can use a customer-managed KMS key (the profile table holds PII)
    for logical in ("UsageTable", "AggregatedUsageTable"):
        sse = section(section(main_t.resources.get(logical, []), "Properties", 4) or [], "SSESpecification", 6) or []
        check(
            scalar(sse, "KMSMasterKeyId", 8) == "!If [HasTablesKms, !Ref TablesKmsKeyArn, !Ref \"AWS::NoValue\"]"
            and scalar(sse, "SSEType", 8) == "!If [HasTablesKms, KMS, !Ref \"AWS::NoValue\"]",
            f"{logical}: encrypted with TablesKmsKeyArn when given",
        )

    # ---- the subscribers table's key (the events stack's DataKmsKeyArn): every main-stack
    # role that reads or writes that table may decrypt with it through DynamoDB, only
    # when it is given.
    for role in ["RegisterRole", "DiscovererRole", "SubmitterRole"]:
        text = "\n".join(main_t.resources.get(role, []))
        check(
            "- HasSubscribersKms\n                - Sid: SubscribersKeyViaDynamoDb" in text
            and "Resource: !Ref SubscribersKmsKeyArn" in text
            and 'kms:ViaService: !Sub "dynamodb.${SubscribersTableRegion}.amazonaws.com"' in text
            and text.count("kms:") == 2,
            f"{role}: kms:Decrypt on SubscribersKmsKeyArn through DynamoDB, only when it is given",
        )

    # ---- the usage API in JWT mode: a token for the audience is not enough; POST needs
    # the write scope, GET the read scope (and a POST's `recorded` too), from an https issuer
    usage_params = section(main_t.lines, "Parameters", 0) or []
    scopes = section(usage_params, "UsageApiJwtScopes", 2) or []
    issuer = section(usage_params, "UsageApiJwtIssuer", 2) or []
    routes = {name: "\n".join(main_t.resources.get(name, [])) for name in ("UsageApiPostEventsRoute", "UsageApiGetEventRoute")}
    variables = section(section(main_t.resources.get("UsageApiFunction", []), "Properties", 4) or [], "Variables", 8) or []
    check(
        re.fullmatch(r"\S+,\S+", (scalar(scopes, "Default", 4) or "")) is not None
        and (scalar(scopes, "AllowedPattern", 4) or "").startswith("^[^,")
        and (scalar(issuer, "AllowedPattern", 4) or "").startswith("^$|^https://")
        and 'AuthorizationScopes: !If [UsageApiUsesJwt, [!Select [0, !Split [",", !Ref UsageApiJwtScopes]]], !Ref "AWS::NoValue"]'
        in routes["UsageApiPostEventsRoute"]
        and 'AuthorizationScopes: !If [UsageApiUsesJwt, [!Select [1, !Split [",", !Ref UsageApiJwtScopes]]], !Ref "AWS::NoValue"]'
        in routes["UsageApiGetEventRoute"]
        and scalar(variables, "USAGE_API_READ_SCOPE", 10) == '!If [UsageApiUsesJwt, !Select [1, !Split [",", !Ref UsageApiJwtScopes]], ""]',
        "usage API (jwt): POST needs the write scope, GET the read scope of UsageApiJwtScopes (the function knows it: "
        "USAGE_API_READ_SCOPE), the issuer is an https:// URL",
    )

    # ---- the usage API is watched: 5xx and 4xx alarms, JWT callers in its access log
    alarms_all = main_t.of_type("AWS::CloudWatch::Alarm")
    for logical, metric in [("UsageApi5xxAlarm", "5xx"), ("UsageApi4xxAlarm", "4xx")]:
        text = "\n".join(alarms_all.get(logical, []))
        check("Namespace: AWS/ApiGateway" in text and f"MetricName: {metric}\n" in text
              and "Value: !Ref UsageHttpApi" in text and "Condition: CreateUsageApi" in text,
              f"{logical}: alarms on the usage API's {metric} answers")
    stage = "\n".join(main_t.resources.get("UsageApiStage", []))
    check('"jwtSub":"$context.authorizer.claims.sub"' in stage, "UsageApiStage: the access log names a JWT caller (claims.sub)")

    # ---- the registration endpoint: POST /register is limited per IP far below the
    # rest, and capped for all addresses together; refusals and blocks are alarmed.
    acl = "\n".join(main_t.resources.get("RegisterWebAcl", []))
    def acl_rule(rule: str) -> str:
        return acl.split(f"- Name: {rule}\n", 1)[-1].split("\n        - Name:", 1)[0] if f"- Name: {rule}\n" in acl else ""

    for rule, key, limit in [
        ("register-rate-per-ip", "IP", "WafRegisterLimitPerIp"),
        ("register-rate-per-viewer", "FORWARDED_IP", "WafRegisterLimitPerIp"),
        ("register-rate-total", "CONSTANT", "WafRegisterLimitTotal"),
    ]:
        body = acl_rule(rule)
        check(
            "Block: {}" in body and f"Limit: !Ref {limit}" in body and f"AggregateKeyType: {key}" in body
            and "SearchString: POST" in body and "SearchString: /register" in body and "PositionalConstraint: ENDS_WITH" in body,
            f"RegisterWebAcl: {rule} blocks POST /register over {limit} ({key})",
        )
    # Through the page's distribution every request's source is a CloudFront address: a
    # per-address rule counts those by x-awsmp-viewer-ip (PageViewerAddressFunction's),
    # trusted only with the origin header x-awsmp-edge the distribution adds; every other
    # request by its own source address, never the header a caller could write.

    def names_edge(body: str, negated: bool) -> bool:
        """`body` matches x-awsmp-edge against this stack's id once, under a NotStatement or not."""
        found = re.search(r"((?:- )?NotStatement:\n\s*Statement:\n\s*)?(?:- )?ByteMatchStatement:\n\s*FieldToMatch:\n\s*SingleHeader:\n"
                          r"\s*Name: x-awsmp-edge\n\s*PositionalConstraint: EXACTLY\n\s*SearchString: (.*)\n", body)
        return bool(found) and found.group(2) == edge_value and bool(found.group(1)) == negated and body.count("x-awsmp-edge") == 1

    forged = acl_rule("edge-without-viewer-address")
    check(
        "Block: {}" in forged and names_edge(forged, negated=False)
        and re.search(r"- NotStatement:\n\s+Statement:\n\s+SizeConstraintStatement:\n\s+FieldToMatch:\n\s+SingleHeader:\n"
                      r"\s+Name: x-awsmp-viewer-ip\n\s+ComparisonOperator: GT\n\s+Size: 0\n", forged) is not None,
        "RegisterWebAcl: a request with x-awsmp-edge but no x-awsmp-viewer-ip is blocked (it would escape both per-address rules)",
    )
    for by_source, by_viewer in [("rate-limit-per-ip", "rate-limit-per-viewer"), ("register-rate-per-ip", "register-rate-per-viewer")]:
        source, viewer = acl_rule(by_source), acl_rule(by_viewer)
        check(
            "AggregateKeyType: IP" in source and names_edge(source, negated=True)
            and "AggregateKeyType: FORWARDED_IP" in viewer and names_edge(viewer, negated=False)
            and re.search(r"ForwardedIPConfig:\n\s+HeaderName: x-awsmp-viewer-ip\n", viewer) is not None
            and re.search(r"Limit: (.*)", source).group(1) == re.search(r"Limit: (.*)", viewer).group(1),
            f"RegisterWebAcl: {by_source} counts source addresses except through the page's distribution (x-awsmp-edge),"
            f" {by_viewer} those by x-awsmp-viewer-ip at the same limit",
        )
    # WafRegisterChallenge (default disabled): a Challenge rule on POST /register in the
    # created WebACL, tokens of the page's domain, and the WebACL named for deploy.sh.
    challenge = acl.split("- Name: register-challenge\n", 1)[-1].split("\n          - !Ref \"AWS::NoValue\"", 1)[0] if "- Name: register-challenge\n" in acl else ""
    check(
        "        - !If\n          - ChallengeRegister\n          - Name: register-challenge\n" in acl
        and "Challenge: {}" in challenge and "SearchString: POST" in challenge and "SearchString: /register" in challenge
        and "TokenDomains: !If\n        - ChallengeRegister\n        - [!If [HasPageDomain, !Ref PageDomainName, !GetAtt PageDistribution.DomainName]]" in acl
        and scalar(section(main_t.lines, "Conditions", 0) or [], "ChallengeRegister", 2)
        == "!And [!Condition CreateWebAcl, !Equals [!Ref WafRegisterChallenge, enabled]]"
        and scalar(section(section(main_t.lines, "Parameters", 0) or [], "WafRegisterChallenge", 2) or [], "Default", 4) == "disabled"
        and "Assert: !Equals [!Ref WebAclArn, \"\"]" in "\n".join(section(section(main_t.lines, "Rules", 0) or [], "ChallengeNeedsCreatedWebAcl", 2) or [])
        and scalar(section(section(main_t.lines, "Outputs", 0) or [], "RegisterChallengeWebAcl", 2) or [], "Value", 4)
        == "!If [ChallengeRegister, !Ref RegisterWebAcl, none]"
        # GetWebACL's ApplicationIntegrationURL (the SDK) exists only with an intelligent
        # threat rule group: Bot Control, targeted, inspecting POST /register only.
        and re.search(r"- !If\n          - ChallengeRegister\n          - Name: register-bot-control\n(.*\n)*?\s+Name: AWSManagedRulesBotControlRuleSet\n"
                      r"\s+ManagedRuleGroupConfigs:\n\s+- AWSManagedRulesBotControlRuleSet:\n\s+InspectionLevel: TARGETED\n(.*\n)*?"
                      r"\s+ScopeDownStatement:\n(.*\n)*?\s+SearchString: POST\n(.*\n)*?\s+SearchString: /register\n", acl) is not None,
        "WafRegisterChallenge (default disabled, created WebACL only): POST /register challenged, tokens of the page's domain,"
        " Bot Control (targeted) on POST /register for the SDK, the WebACL in output RegisterChallengeWebAcl",
    )
    per_ip = re.search(r"WafRegisterLimitPerIp:\n\s+Type: Number\n\s+Default: (\d+)", "\n".join(main_t.lines))
    page = re.search(r"WafRateLimitPerIp:\n\s+Type: Number\n\s+Default: (\d+)", "\n".join(main_t.lines))
    check(bool(per_ip and page and int(per_ip.group(1)) * 10 <= int(page.group(1))), "WafRegisterLimitPerIp defaults far below WafRateLimitPerIp")
    alarms = main_t.of_type("AWS::CloudWatch::Alarm")
    four = "\n".join(alarms.get("RegisterApi4xxAlarm", []))
    check("MetricName: 4XXError" in four and "Namespace: AWS/ApiGateway" in four, "an alarm on the registration API's 4xx responses")
    for logical, rule in [("RegisterWafCapAlarm", "register-rate-total"), ("RegisterWafBlocksAlarm", "ALL")]:
        text = "\n".join(alarms.get(logical, []))
        check(
            "Namespace: AWS/WAFV2" in text and "MetricName: BlockedRequests" in text and f"Value: {rule}\n" in text + "\n"
            and 'Value: !Sub "awsmp-${ProductCode}-register-${StageName}"' in text and "Condition: CreateWebAcl" in text,
            f"{logical}: alarms on the WebACL's blocks ({rule})",
        )

    # ---- EdgeLogs (default disabled): the created WebACL's request logs go to a log
    # group WAF accepts (aws-waf-logs-...), kept and encrypted like the others, with the
    # headers that could carry a credential redacted; nothing of it exists otherwise.
    edge = section(section(main_t.lines, "Parameters", 0) or [], "EdgeLogs", 2) or []
    check(scalar(edge, "AllowedValues", 4) == "[enabled, disabled]" and scalar(edge, "Default", 4) == "disabled",
          "EdgeLogs: enabled | disabled, default disabled")
    check(
        scalar(section(main_t.lines, "Conditions", 0) or [], "LogWebAcl", 2)
        == "!And [!Condition CreateWebAcl, !Equals [!Ref EdgeLogs, enabled]]",
        "Condition LogWebAcl: EdgeLogs enabled and this stack creates the WebACL",
    )
    edge_rule = "\n".join(section(section(main_t.lines, "Rules", 0) or [], "EdgeLogsNeedCreatedWebAcl", 2) or [])
    check("RuleCondition: !Equals [!Ref EdgeLogs, enabled]" in edge_rule and '- Assert: !Equals [!Ref WebAclArn, ""]' in edge_rule,
          "Rule EdgeLogsNeedCreatedWebAcl: EdgeLogs enabled refuses WebAclArn (nothing would be logged)")
    log_configs = main_t.of_type("AWS::WAFv2::LoggingConfiguration")
    waf_groups = {
        logical: body for logical, body in main_t.of_type("AWS::Logs::LogGroup").items()
        if (scalar(section(body, "Properties", 4) or [], "LogGroupName", 6) or "").removeprefix("!Sub ").strip('"').startswith("aws-waf-logs-")
    }
    check(len(log_configs) == 1, "one WAF logging configuration (the created WebACL's)", f"got {sorted(log_configs)}")
    edge_resources = set(log_configs) | set(waf_groups)
    for logical in sorted(edge_resources):
        check(scalar(main_t.resources[logical], "Condition", 4) == "LogWebAcl", f"{logical}: Condition LogWebAcl")
    edge_ref = re.compile(r"(?:!Ref |!GetAtt |\$\{)(" + "|".join(sorted(edge_resources) or ["-"]) + r")\b")
    unguarded = sorted(
        logical for logical, body in main_t.resources.items()
        if logical not in edge_resources and edge_ref.search("\n".join(body)) and scalar(body, "Condition", 4) != "LogWebAcl"
    )
    check(not unguarded, "template-main.yaml: the WAF logging resources are named only under LogWebAcl", f"named by {unguarded}")
    for name in keys(section(main_t.lines, "Outputs", 0) or [], 2):
        out = section(section(main_t.lines, "Outputs", 0) or [], name, 2) or []
        if edge_ref.search("\n".join(out)):
            check(scalar(out, "Condition", 4) == "LogWebAcl", f"output {name}: only under LogWebAcl")
    check(section(dist_config, "Logging", 8) is None,
          "page distribution: no legacy standard logging (it needs an ACL-enabled bucket; docs/deploy.md)")
    for logical, body in log_configs.items():
        props = section(body, "Properties", 4) or []
        destinations = "\n".join(section(props, "LogDestinationConfigs", 6) or [])
        target = re.search(r"log-group:\$\{(\w+)\}\"?$", destinations.strip())
        group = waf_groups.get(target.group(1) if target else "", [])
        group_props = section(group, "Properties", 4) or []
        group_name = (scalar(group_props, "LogGroupName", 6) or "").removeprefix("!Sub ").strip('"')
        check(
            scalar(props, "ResourceArn", 6) == "!GetAtt RegisterWebAcl.Arn" and bool(group)
            and destinations.strip().startswith('- !Sub "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:'),
            f"{logical}: logs RegisterWebAcl to a log group of this stack named aws-waf-logs-... (by its ARN, without :*)",
            destinations.strip(),
        )
        check(
            group_name.startswith("aws-waf-logs-awsmp-")
            and scalar(group_props, "RetentionInDays", 6) == "!Ref LogRetentionInDays"
            and scalar(group_props, "KmsKeyId", 6) == '!If [HasLogsKms, !Ref LogsKmsKeyArn, !Ref "AWS::NoValue"]',
            f"{logical}: its log group is named aws-waf-logs-awsmp-... (WAF's required prefix), kept LogRetentionInDays, "
            "encrypted with LogsKmsKeyArn when given",
            f"got {group_name!r}",
        )
        redacted = "\n".join(section(props, "RedactedFields", 6) or [])
        headers = {h.strip('"').lower() for h in re.findall(r"- SingleHeader:\n\s+Name: (\S+)", redacted)}
        check({"authorization", "cookie", "x-awsmp-edge", "x-aws-waf-token"} <= headers,
              f"{logical}: redacts the authorization, cookie, x-awsmp-edge (what the WebACL trusts) and x-aws-waf-token headers",
              f"got {sorted(headers)}")

    # ---- buyer PII: only the register function's role and ProfileAccessRoleArn touch
    # the profile table's items (its resource policy) or decrypt them (its own key).
    profile = main_t.resources.get("CustomerProfileTable", [])
    profile_text = "\n".join(profile)
    sse = "\n".join(section(section(profile, "Properties", 4) or [], "SSESpecification", 6) or [])
    check(
        "SSEType: !If [CreateProfileKey, KMS, !If [HasTablesKms, KMS, !Ref \"AWS::NoValue\"]]" in sse
        and "- !GetAtt CustomerProfileKey.Arn" in sse
        and "- !If [ProfileUsesTablesKms, !Ref TablesKmsKeyArn, !Ref \"AWS::NoValue\"]" in sse,
        "CustomerProfileTable: its own key (ProfileKey=create), else TablesKmsKeyArn or aws/dynamodb",
    )
    deny_tls = re.search(r"- Sid: DenyWithoutTls\n\s+Effect: Deny\n\s+Principal: \"\*\"\n\s+Action: \"dynamodb:\*\"\n(.*\n){1,2}\s+Condition:\n\s+Bool:\n\s+aws:SecureTransport: \"false\"", profile_text)
    check(deny_tls is not None, "CustomerProfileTable: its resource policy denies every request without TLS")
    only = profile_text.split("- Sid: OnlyTheRegisterFunctionAndTheProfileRoleTouchBuyerData", 1)
    only = only[1].split("- Sid:", 1)[0] if len(only) == 2 else ""
    item_actions = ["GetItem", "BatchGetItem", "Query", "Scan", "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem",
                    "ConditionCheckItem", "PartiQLSelect", "PartiQLInsert", "PartiQLUpdate", "PartiQLDelete",
                    "ExportTableToPointInTime", "RestoreTableToPointInTime"]
    check(
        "Effect: Deny" in only and "Principal: \"*\"" in only
        and all(f"- dynamodb:{a}\n" in only for a in item_actions)
        and "ArnNotEquals:" in only
        and "- !GetAtt RegisterRole.Arn\n" in only
        and '- !If [HasProfileAccessRole, !Ref ProfileAccessRoleArn, !Ref "AWS::NoValue"]' in only
        and '- !If [DiscovererExpiresProfiles, !GetAtt DiscovererRole.Arn, !Ref "AWS::NoValue"]' in only
        and only.split("ArnNotEquals:", 1)[-1].count("- ") == 3,
        "CustomerProfileTable: every item read, write, export and restore is denied to all but RegisterRole, ProfileAccessRoleArn (and the discoverer with ProfileRetentionDays)",
    )
    key = "\n".join(main_t.resources.get("CustomerProfileKey", []))
    check(
        "Condition: CreateProfileKey" in key and "DeletionPolicy: Retain" in key and "EnableKeyRotation: true" in key,
        "CustomerProfileKey: created with ProfileKey=create, retained like the table, rotated",
    )
    admin = key.split("- Sid: AccountAdministersButCannotUseIt", 1)[-1].split("- Sid:", 1)[0]
    check(
        "kms:Decrypt" not in admin and "kms:*" not in admin and "kms:ReEncrypt" not in admin
        and "kms:CreateGrant" not in admin and "kms:Put" not in admin and "kms:*Policy" not in admin,
        "CustomerProfileKey: the account administers the key but no IAM policy can grant decryption or a new key policy",
    )
    # Changing the key policy is the way past it: the deployer alone, required with the key.
    put_policy = key.split("- Sid: OnlyTheDeployerChangesTheKeyPolicy", 1)[-1].split("- Sid:", 1)[0] \
        if "- Sid: OnlyTheDeployerChangesTheKeyPolicy" in key else ""
    needs_deployer = "\n".join(section(section(main_t.lines, "Rules", 0) or [], "ProfileKeyNeedsDeployerRole", 2) or [])
    check(
        key.count("kms:PutKeyPolicy") == 1 and "AWS: !Ref DeployerRoleArn\n" in put_policy
        and "Action: kms:PutKeyPolicy" in put_policy and "Effect: Allow" in put_policy
        and "RuleCondition: !Equals [!Ref ProfileKey, create]" in needs_deployer
        and '- Assert: !Not [!Equals [!Ref DeployerRoleArn, ""]]' in needs_deployer,
        "CustomerProfileKey: only DeployerRoleArn may change the key policy (kms:PutKeyPolicy), and ProfileKey=create requires it",
    )
    # The table's own policy, and every copy of the table (a backup restores without
    # it and without the key): changed, deleted or made only by the deployer (else only
    # through CloudFormation), and a change alarmed.
    guard = profile_text.split("- Sid: OnlyTheDeployerChangesThisPolicyOrBacksUpTheTable", 1)[-1].split("BillingMode:", 1)[0] \
        if "- Sid: OnlyTheDeployerChangesThisPolicyOrBacksUpTheTable" in profile_text else ""
    check(
        "Effect: Deny" in guard and 'Principal: "*"' in guard
        and all(f"- dynamodb:{a}\n" in guard for a in ("PutResourcePolicy", "DeleteResourcePolicy", "CreateBackup", "StartAwsBackupJob"))
        and re.search(r"Condition: !If\n\s+- HasDeployerRole\n\s+- ArnNotEquals:\n\s+aws:PrincipalArn: !Ref DeployerRoleArn\n"
                      r"\s+- ForAllValues:StringNotEquals:\n\s+aws:CalledVia: cloudformation.amazonaws.com\n", guard) is not None,
        "CustomerProfileTable: its resource policy's change or deletion and every backup denied to all but DeployerRoleArn"
        " (else all but CloudFormation)",
    )
    rule = "\n".join(main_t.resources.get("ProfilePolicyChangesRule", []))
    alarm = "\n".join(main_t.of_type("AWS::CloudWatch::Alarm").get("ProfilePolicyChangedAlarm", []))
    check(
        all(f"- {e}\n" in rule for e in ("PutResourcePolicy", "DeleteResourcePolicy", "PutKeyPolicy"))
        and "- AWS API Call via CloudTrail" in rule and "table/awsmp-${ProductCode}-customer-profile\"" in rule
        and "!GetAtt CustomerProfileKey.Arn" in rule
        and "Namespace: AWS/Events" in alarm and "MetricName: MatchedEvents" in alarm
        and "Value: !Ref ProfilePolicyChangesRule" in alarm and "ComparisonOperator: GreaterThanThreshold" in alarm
        and "Threshold: 0" in alarm and "AlarmActions: !If [HasAlertsTopic" in alarm,
        "ProfilePolicyChangedAlarm: alarms on PutResourcePolicy/DeleteResourcePolicy of the profile table and PutKeyPolicy of its key",
    )
    users = key.split("- Sid: OnlyTheRegisterFunctionAndTheProfileRoleDecrypt", 1)[-1].split("- Sid:", 1)[0]
    check(
        "- !GetAtt RegisterRole.Arn\n" in users
        and '- !If [HasProfileAccessRole, !Ref ProfileAccessRoleArn, !Ref "AWS::NoValue"]' in users
        and '- !If [DiscovererExpiresProfiles, !GetAtt DiscovererRole.Arn, !Ref "AWS::NoValue"]' in users
        and users.split("Action:", 1)[0].count("- ") == 3
        and "kms:Decrypt" in users
        and 'kms:ViaService: !Sub "dynamodb.${AWS::Region}.amazonaws.com"' in users,
        "CustomerProfileKey: only RegisterRole, ProfileAccessRoleArn (and the discoverer with ProfileRetentionDays) decrypt, and only through DynamoDB here",
    )
    disc = "\n".join(main_t.resources.get("DiscovererRole", []))
    expiry = disc.split("Sid: CustomerProfileExpiry", 1)[-1].split("- !Ref \"AWS::NoValue\"", 1)[0] if "Sid: CustomerProfileExpiry" in disc else ""
    check(
        "- HasProfileRetention\n                - Sid: CustomerProfileExpiry" in disc
        and "Action: dynamodb:UpdateItem" in expiry and "- expiresAt" in expiry
        and expiry.split("dynamodb:Attributes:", 1)[-1].split("StringEqualsIfExists", 1)[0].count("- ") == 3
        and "dynamodb:ReturnValues: NONE" in expiry,
        "DiscovererRole: with ProfileRetentionDays, UpdateItem of the profile's keys and expiresAt only",
    )
    ttl = "\n".join(section(section(profile, "Properties", 4) or [], "TimeToLiveSpecification", 6) or [])
    check(
        "TimeToLiveSpecification: !If" in profile_text and "- HasProfileRetention" in profile_text
        and "AttributeName: expiresAt" in profile_text.split("TimeToLiveSpecification", 1)[-1],
        "CustomerProfileTable: TTL on expiresAt with ProfileRetentionDays",
    )
    deployer = key.split("- Sid: TheDeployerSelectsTheKeyForTheTable", 1)[-1].split("- Sid:", 1)[0]
    check(
        key.count("kms:Decrypt") == 2
        and "- !Ref DeployerRoleArn" in deployer and 'kms:ViaService: !Sub "dynamodb.${AWS::Region}.amazonaws.com"' in deployer,
        "CustomerProfileKey: kms:Decrypt only for those roles and the deployer (DeployerRoleArn, else IAM), through DynamoDB",
    )

    # ---- retention: the pipeline owns the TTL attribute (expiresAt, written only on
    # final items); TTL is on only when DataRetentionDays > 0, and the floor refused
    # below is the one the functions refuse (awsmp_core::retention::MIN_RETENTION_DAYS)
    model = (ROOT / "crates/core/src/model.rs").read_text()
    m = re.search(r'pub const EXPIRES_AT: &str = "([A-Za-z_]+)";', model)
    ttl_attr = m.group(1) if m else None
    retention_rs = (ROOT / "crates/core/src/retention.rs").read_text()
    m = re.search(r"pub const MIN_RETENTION_DAYS: u32 = ([0-9]+);", retention_rs)
    floor = int(m.group(1)) if m else None
    m = re.search(r"pub const MAX_RETENTION_DAYS: u32 = ([0-9]+);", retention_rs)
    ceiling = m.group(1) if m else None
    main_params = section(main_t.lines, "Parameters", 0) or []
    check("DataTtlAttributeName" not in "\n".join(main_t.lines), "template-main.yaml: no seller-named TTL attribute (DataTtlAttributeName)")
    days = section(main_params, "DataRetentionDays", 2) or []
    check(
        scalar(days, "Type", 4) == "Number" and scalar(days, "Default", 4) == "0"
        and scalar(days, "MinValue", 4) == "0" and scalar(days, "MaxValue", 4) == ceiling,
        "DataRetentionDays: Number, default 0 (keep everything), 0..MAX_RETENTION_DAYS",
        f"got Type {scalar(days, 'Type', 4)} Default {scalar(days, 'Default', 4)} Max {scalar(days, 'MaxValue', 4)} (core {ceiling})",
    )
    rule = "\n".join(section(section(main_t.lines, "Rules", 0) or [], "DataRetentionFloor", 2) or [])
    below = re.search(r"!Not \[!Contains \[\[([^\]]*)\], !Ref DataRetentionDays\]\]", rule)
    refused = [v.strip().strip('"') for v in below.group(1).split(",")] if below else []
    check(
        floor is not None and refused == [str(d) for d in range(1, floor)],
        f"Rule DataRetentionFloor refuses 1..{floor} - 1 (below MIN_RETENTION_DAYS)",
        f"refuses {refused}",
    )
    conditions = section(main_t.lines, "Conditions", 0) or []
    check(
        scalar(conditions, "HasDataRetention", 2) == '!Not [!Equals [!Ref DataRetentionDays, "0"]]',
        "Condition HasDataRetention: DataRetentionDays other than 0",
        f"got {scalar(conditions, 'HasDataRetention', 2)}",
    )
    for logical in ("UsageTable", "AggregatedUsageTable"):
        ttl = "\n".join(section(section(main_t.resources.get(logical, []), "Properties", 4) or [], "TimeToLiveSpecification", 6) or [])
        check(
            re.search(rf"- HasDataRetention\n\s+- AttributeName: {ttl_attr}\n\s+Enabled: true\n\s+- !Ref \"AWS::NoValue\"", ttl) is not None,
            f"{logical}: TTL on {ttl_attr} only when DataRetentionDays > 0",
            ttl,
        )
    finalizers = {"discoverer", "aggregator", "cleanup", "submitter"}
    for t in templates:
        for logical, body in t.of_type("AWS::Serverless::Function").items():
            variables = section(section(body, "Properties", 4) or [], "Variables", 8) or []
            value = scalar(variables, "DATA_RETENTION_DAYS", 10)
            binary = scalar(body, "Binary", 8)
            want = "!Ref DataRetentionDays" if binary in finalizers else None
            check(value == want, f"{t.name} {logical}: DATA_RETENTION_DAYS {want or 'not set'} (it finalizes items: {binary in finalizers})", f"got {value}")

    # ---- console conventions: every parameter grouped and labelled once; SAR metadata
    for t in templates:
        params_t = keys(section(t.lines, "Parameters", 0) or [], 2)
        interface = section(section(t.lines, "Metadata", 0) or [], "AWS::CloudFormation::Interface", 2) or []
        grouped = [line.strip()[2:] for line in (section(interface, "ParameterGroups", 4) or []) if re.match(r"^ {10}- [A-Za-z]+$", line)]
        labelled = keys(section(interface, "ParameterLabels", 4) or [], 6)
        check(sorted(grouped) == sorted(params_t), f"{t.name}: every parameter in exactly one parameter group",
              f"missing {sorted(set(params_t) - set(grouped))}, extra or repeated {sorted(p for p in grouped if grouped.count(p) > 1 or p not in params_t)}")
        check(sorted(labelled) == sorted(params_t), f"{t.name}: every parameter labelled", f"missing {sorted(set(params_t) - set(labelled))}")
        sar = section(section(t.lines, "Metadata", 0) or [], "AWS::ServerlessRepo::Application", 2) or []
        for key in ("Name", "Description", "Author", "SpdxLicenseId", "SemanticVersion", "ReadmeUrl", "SourceCodeUrl"):
            check(bool(scalar(sar, key, 4)), f"{t.name}: Serverless Application Repository {key}")
        readme = scalar(sar, "ReadmeUrl", 4)
        check(bool(readme) and (ROOT / readme).is_file(), f"{t.name}: SAR ReadmeUrl {readme} exists")
        cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
        package = cargo.get("workspace", {}).get("package", {})
        check(scalar(sar, "SpdxLicenseId", 4) == package.get("license"), f"{t.name}: SAR license is the workspace's", f"{package.get('license')}")
        check(scalar(sar, "SemanticVersion", 4) == package.get("version"), f"{t.name}: SAR version is the workspace's", f"{package.get('version')}")

    # ---- samconfig.toml
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    all_params = set(params) | set(keys(section(events.lines, "Parameters", 0) or [], 2))
    for env, sections in config.items():
        if env == "version":
            continue
        overrides = sections.get("deploy", {}).get("parameters", {}).get("parameter_overrides", [])
        unknown = [o for o in overrides if o.split("=", 1)[0] not in all_params]
        check(not unknown, f"samconfig.toml [{env}] overrides only template parameters", f"unknown {unknown}")

    failed = [name for ok, name in RESULTS if not ok]
    for ok, name in RESULTS:
        print(("ok   " if ok else "FAIL ") + name)
    print(f"template checks: {len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
