#!/usr/bin/env python3
"""Checks the deployer template (deploy-policy/deployer.json) against both stacks' templates.

deploy-policy/deployer.json creates the CloudFormation service role that `./deploy.sh
--cfn-role` hands to CloudFormation, and the managed policy of whoever runs deploy.sh
(docs/deployer.md). This script holds them to their contract, with the standard library
only (the deployer template is JSON; the stacks' templates are read by indentation, as
check_templates.py reads them):

  * every resource type either template creates (SAM's generated ones included) has its
    service, and its create/update actions, allowed to the service role, and its delete
    actions too unless the resource is retained (DeletionPolicy: Retain);
  * the role-changing IAM actions (CreateRole, PutRolePolicy, AttachRolePolicy, ...) are
    allowed only with `iam:PermissionsBoundary` = the PermissionsBoundaryArn parameter;
  * iam:DeleteRolePermissionsBoundary is denied outright;
  * every iam:PassRole allowed names its resources and the service it may go to;
  * the deployer policy creates nothing in IAM, and creates change sets on awsmp-*
    stacks only with the service role;
  * every role either template creates carries the boundary, every resource it names is
    inside the role's name patterns (awsmp-*), and the example boundary
    (deploy-policy/boundary-example.json) allows what the roles' own policies grant.

Then it breaks a copy of the deployer template in memory, one way per check, and fails
unless that check catches it. With .venv/bin/cfn-lint present, it also lints the file.

Usage: check_deployer_policy.py REPO_ROOT [--deployer FILE] [--boundary FILE]
(prints one line per check, exits 1 if any failed)
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path

ROLE_CHANGING = [
    "iam:CreateRole",
    "iam:PutRolePolicy",
    "iam:DeleteRolePolicy",
    "iam:AttachRolePolicy",
    "iam:DetachRolePolicy",
    "iam:PutRolePermissionsBoundary",
]
BOUNDARY_REF = {"Ref": "PermissionsBoundaryArn"}
MANAGED_POLICY_LIMIT = 6144  # IAM's limit for one managed policy, whitespace not counted

# What each resource type needs: (create and update actions, delete actions). A type not
# listed here still needs its service prefix allowed (PREFIXES), and fails with a hint.
NEEDS: dict[str, tuple[list[str], list[str]]] = {
    "AWS::DynamoDB::Table": (["dynamodb:CreateTable", "dynamodb:UpdateTable", "dynamodb:DescribeTable",
                              "dynamodb:UpdateContinuousBackups", "dynamodb:TagResource"], ["dynamodb:DeleteTable"]),
    "AWS::SQS::Queue": (["sqs:CreateQueue", "sqs:SetQueueAttributes", "sqs:GetQueueAttributes", "sqs:TagQueue"],
                        ["sqs:DeleteQueue"]),
    "AWS::SQS::QueuePolicy": (["sqs:SetQueueAttributes"], ["sqs:SetQueueAttributes"]),
    "AWS::Events::Rule": (["events:PutRule", "events:PutTargets", "events:DescribeRule", "events:RemoveTargets"],
                          ["events:DeleteRule", "events:RemoveTargets"]),
    "AWS::Events::EventBusPolicy": (["events:PutPermission", "events:DescribeEventBus"], ["events:RemovePermission"]),
    "AWS::Logs::LogGroup": (["logs:CreateLogGroup", "logs:PutRetentionPolicy", "logs:DescribeLogGroups"],
                            ["logs:DeleteLogGroup"]),
    "AWS::Logs::MetricFilter": (["logs:PutMetricFilter", "logs:DescribeMetricFilters"], ["logs:DeleteMetricFilter"]),
    "AWS::IAM::Role": (["iam:CreateRole", "iam:PutRolePolicy", "iam:GetRole", "iam:TagRole",
                        "iam:PutRolePermissionsBoundary"], ["iam:DeleteRole", "iam:DeleteRolePolicy"]),
    "AWS::CloudWatch::Alarm": (["cloudwatch:PutMetricAlarm", "cloudwatch:DescribeAlarms"], ["cloudwatch:DeleteAlarms"]),
    "AWS::CloudWatch::Dashboard": (["cloudwatch:PutDashboard", "cloudwatch:GetDashboard"],
                                   ["cloudwatch:DeleteDashboards"]),
    "AWS::Lambda::Function": (["lambda:CreateFunction", "lambda:GetFunction", "lambda:UpdateFunctionCode",
                               "lambda:UpdateFunctionConfiguration", "lambda:TagResource", "iam:PassRole"],
                              ["lambda:DeleteFunction"]),
    "AWS::Lambda::EventSourceMapping": (["lambda:CreateEventSourceMapping", "lambda:GetEventSourceMapping",
                                         "lambda:UpdateEventSourceMapping"], ["lambda:DeleteEventSourceMapping"]),
    "AWS::Lambda::EventInvokeConfig": (["lambda:PutFunctionEventInvokeConfig",
                                        "lambda:UpdateFunctionEventInvokeConfig"],
                                       ["lambda:DeleteFunctionEventInvokeConfig"]),
    "AWS::Lambda::Permission": (["lambda:AddPermission", "lambda:GetPolicy"], ["lambda:RemovePermission"]),
    "AWS::ApiGateway::Account": (["apigateway:PATCH", "apigateway:GET", "iam:PassRole"], []),
    "AWS::WAFv2::WebACL": (["wafv2:CreateWebACL", "wafv2:UpdateWebACL", "wafv2:GetWebACL"], ["wafv2:DeleteWebACL"]),
    "AWS::WAFv2::LoggingConfiguration": (["wafv2:PutLoggingConfiguration", "wafv2:GetLoggingConfiguration",
                                          "logs:CreateLogDelivery", "logs:PutResourcePolicy",
                                          "logs:DescribeResourcePolicies", "logs:DescribeLogGroups"],
                                         ["wafv2:DeleteLoggingConfiguration", "logs:DeleteLogDelivery"]),
    "AWS::WAFv2::WebACLAssociation": (["wafv2:AssociateWebACL", "wafv2:GetWebACLForResource", "apigateway:SetWebACL"],
                                      ["wafv2:DisassociateWebACL"]),
    "AWS::S3::Bucket": (["s3:CreateBucket", "s3:PutEncryptionConfiguration", "s3:PutBucketPublicAccessBlock",
                         "s3:PutBucketOwnershipControls", "s3:PutBucketVersioning", "s3:PutBucketTagging"],
                        ["s3:DeleteBucket"]),
    "AWS::S3::BucketPolicy": (["s3:PutBucketPolicy", "s3:GetBucketPolicy"], ["s3:DeleteBucketPolicy"]),
    "AWS::CloudFront::OriginAccessControl": (["cloudfront:CreateOriginAccessControl",
                                              "cloudfront:GetOriginAccessControl",
                                              "cloudfront:UpdateOriginAccessControl"],
                                             ["cloudfront:DeleteOriginAccessControl"]),
    "AWS::CloudFront::Function": (["cloudfront:CreateFunction",
                                   "cloudfront:DescribeFunction",
                                   "cloudfront:GetFunction",
                                   "cloudfront:PublishFunction",
                                   "cloudfront:UpdateFunction"],
                                  ["cloudfront:DeleteFunction"]),
    "AWS::CloudFront::OriginRequestPolicy": (["cloudfront:CreateOriginRequestPolicy",
                                              "cloudfront:GetOriginRequestPolicy",
                                              "cloudfront:UpdateOriginRequestPolicy"],
                                             ["cloudfront:DeleteOriginRequestPolicy"]),
    "AWS::CloudFront::ResponseHeadersPolicy": (["cloudfront:CreateResponseHeadersPolicy",
                                                "cloudfront:GetResponseHeadersPolicy",
                                                "cloudfront:UpdateResponseHeadersPolicy"],
                                               ["cloudfront:DeleteResponseHeadersPolicy"]),
    "AWS::CloudFront::Distribution": (["cloudfront:CreateDistribution", "cloudfront:GetDistribution",
                                       "cloudfront:GetDistributionConfig", "cloudfront:UpdateDistribution",
                                       "cloudfront:TagResource"], ["cloudfront:DeleteDistribution"]),
    "AWS::KMS::Key": (["kms:CreateKey", "kms:DescribeKey", "kms:EnableKeyRotation", "kms:PutKeyPolicy",
                       "kms:TagResource"], ["kms:ScheduleKeyDeletion"]),
}
for _t in ("AWS::ApiGateway::RestApi", "AWS::ApiGateway::Deployment", "AWS::ApiGateway::Stage",
           "AWS::ApiGatewayV2::Api", "AWS::ApiGatewayV2::Integration", "AWS::ApiGatewayV2::Authorizer",
           "AWS::ApiGatewayV2::Route", "AWS::ApiGatewayV2::Stage"):
    NEEDS[_t] = (["apigateway:GET", "apigateway:POST", "apigateway:PUT", "apigateway:PATCH"], ["apigateway:DELETE"])

# The service prefix of a type's IAM actions, where it is not the type's middle part in
# lower case (AWS::DynamoDB::Table -> dynamodb).
PREFIXES = {"ApiGatewayV2": "apigateway", "StepFunctions": "states", "CertificateManager": "acm",
            "Cognito": "cognito-idp", "ElasticLoadBalancingV2": "elasticloadbalancing"}

# The names the service role's resources are scoped to: (property, allowed prefixes,
# whether the property is required). Without the property CloudFormation names the
# resource after the stack (awsmp-events-..., awsmp-main-...), inside awsmp-*, except a
# log group, whose pattern is a path.
NAMES: dict[str, tuple[str, list[str], bool]] = {
    "AWS::DynamoDB::Table": ("TableName", ["awsmp-"], False),
    "AWS::SQS::Queue": ("QueueName", ["awsmp-"], False),
    "AWS::Events::Rule": ("Name", ["awsmp-"], False),
    "AWS::CloudWatch::Alarm": ("AlarmName", ["awsmp-"], False),
    "AWS::CloudWatch::Dashboard": ("DashboardName", ["awsmp-"], False),
    "AWS::Logs::LogGroup": ("LogGroupName", ["/aws/lambda/awsmp/", "/aws/apigateway/awsmp/", "aws-waf-logs-awsmp-"], True),
    "AWS::WAFv2::WebACL": ("Name", ["awsmp-"], True),
    "AWS::IAM::Role": ("RoleName", ["awsmp-"], False),
    "AWS::S3::Bucket": ("BucketName", ["awsmp-"], False),
    "AWS::Serverless::Function": ("FunctionName", ["awsmp-"], False),
    "AWS::Lambda::Function": ("FunctionName", ["awsmp-"], False),
}

# What SAM's transform makes of its own types and of each function event type.
SAM_TYPES = {
    "AWS::Serverless::Function": ["AWS::Lambda::Function"],
    "AWS::Serverless::Api": ["AWS::ApiGateway::RestApi", "AWS::ApiGateway::Deployment", "AWS::ApiGateway::Stage"],
    "AWS::Serverless::HttpApi": ["AWS::ApiGatewayV2::Api", "AWS::ApiGatewayV2::Stage"],
    "AWS::Serverless::SimpleTable": ["AWS::DynamoDB::Table"],
    "AWS::Serverless::LayerVersion": ["AWS::Lambda::LayerVersion"],
    "AWS::Serverless::StateMachine": ["AWS::StepFunctions::StateMachine", "AWS::IAM::Role"],
}
SAM_EVENTS = {
    "Api": ["AWS::Lambda::Permission"],
    "HttpApi": ["AWS::Lambda::Permission"],
    "Schedule": ["AWS::Events::Rule", "AWS::Lambda::Permission"],
    "EventBridgeRule": ["AWS::Events::Rule", "AWS::Lambda::Permission"],
    "CloudWatchEvent": ["AWS::Events::Rule", "AWS::Lambda::Permission"],
    "ScheduleV2": ["AWS::Scheduler::Schedule", "AWS::IAM::Role"],
    "SQS": ["AWS::Lambda::EventSourceMapping"],
    "DynamoDB": ["AWS::Lambda::EventSourceMapping"],
    "Kinesis": ["AWS::Lambda::EventSourceMapping"],
    "MSK": ["AWS::Lambda::EventSourceMapping"],
    "MQ": ["AWS::Lambda::EventSourceMapping"],
    "SNS": ["AWS::SNS::Subscription", "AWS::Lambda::Permission"],
    "S3": ["AWS::Lambda::Permission"],
    "CloudWatchLogs": ["AWS::Logs::SubscriptionFilter", "AWS::Lambda::Permission"],
    "IoTRule": ["AWS::IoT::TopicRule", "AWS::Lambda::Permission"],
    "Cognito": ["AWS::Lambda::Permission"],
}


# ------------------------------------------------------------------ reading the stacks' templates
# The line reader check_templates.py uses for the same templates (one copy).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_templates import block, scalar  # noqa: E402
from check_templates import section as _section  # noqa: E402


def section(lines: list[str], key: str, indent: int) -> list[str]:
    """The block under `key:` at `indent` spaces, or [] when there is none."""
    return _section(lines, key, indent) or []


class Resource:
    def __init__(self, template: str, name: str, body: list[str]):
        self.template = template
        self.name = name
        self.body = body
        self.type = scalar(body, "Type", 4) or "?"
        self.retained = scalar(body, "DeletionPolicy", 4) == "Retain"
        self.props = section(body, "Properties", 4)

    @property
    def where(self) -> str:
        return f"{self.template} {self.name}"


def read_template(path: Path) -> list[Resource]:
    lines = path.read_text().splitlines()
    out, name, body = [], None, []
    for line in section(lines, "Resources", 0):
        m = re.match(r"^  ([A-Za-z0-9]+):\s*$", line)
        if m:
            if name:
                out.append(Resource(path.name, name, body))
            name, body = m.group(1), []
        elif name:
            body.append(line)
    if name:
        out.append(Resource(path.name, name, body))
    return out


def created_types(resources: list[Resource]) -> list[tuple[str, bool, str]]:
    """(type, retained, where) for every resource CloudFormation creates, SAM's expanded."""
    out = []
    for r in resources:
        if r.type not in SAM_TYPES:
            out.append((r.type, r.retained, r.where))
            continue
        for t in SAM_TYPES[r.type]:
            out.append((t, r.retained, f"{r.where} (SAM)"))
        if r.type != "AWS::Serverless::Function":
            continue
        if scalar(r.props, "Role", 6) is None:
            out.append(("AWS::IAM::Role", False, f"{r.where} (SAM role)"))
        if section(r.props, "EventInvokeConfig", 6):
            out.append(("AWS::Lambda::EventInvokeConfig", False, f"{r.where} (SAM)"))
        events = section(r.props, "Events", 6)
        for ev in re.findall(r"^ {8}([A-Za-z0-9]+):\s*$", "\n".join(events), re.M):
            ev_block = section(events, ev, 8)
            ev_type = scalar(ev_block, "Type", 10) or "?"
            for t in SAM_EVENTS.get(ev_type, [f"SAM event {ev_type} (unknown to this check)"]):
                out.append((t, False, f"{r.where} event {ev}"))
            if ev_type == "Api" and scalar(section(ev_block, "Properties", 10), "RestApiId", 12) is None:
                out += [(t, False, f"{r.where} (SAM implicit API)") for t in SAM_TYPES["AWS::Serverless::Api"]]
    return out


def role_policy_actions(r: Resource) -> list[str]:
    """The actions an IAM role's own (inline) policies allow; trust policies are not read."""
    policies = section(r.props, "Policies", 6)
    actions: list[str] = []
    i = 0
    while i < len(policies):
        m = re.match(r"^(\s*)- (Sid|Effect|Action):", policies[i])
        if not m:
            i += 1
            continue
        stmt = [policies[i].replace("- ", "  ", 1)] + block(policies, i)
        i += 1 + len(block(policies, i))
        text = "\n".join(stmt)
        if re.search(r"^\s*Effect:\s*Deny\b", text, re.M) or re.search(r"^\s*Principal:", text, re.M):
            continue
        for j, line in enumerate(stmt):
            am = re.match(r"^\s*Action:\s*(.*?)\s*$", line)
            if not am:
                continue
            inline = am.group(1).strip()
            if inline.startswith("["):
                actions += [a.strip().strip('"') for a in inline.strip("[]").split(",") if a.strip()]
            elif inline:
                actions.append(inline.strip('"'))
            else:
                for item in block(stmt, j):
                    im = re.match(r"^\s*-\s+\"?([A-Za-z0-9-]+:[A-Za-z0-9*]+)\"?\s*$", item)
                    if im:
                        actions.append(im.group(1))
    return actions


# ------------------------------------------------------------------ policy statements
def as_list(v) -> list:
    return v if isinstance(v, list) else [v]


class Statement:
    def __init__(self, raw: dict, policy: str):
        self.raw = raw
        self.policy = policy
        self.sid = raw.get("Sid", "?")
        self.effect = raw.get("Effect")
        self.actions = [a for a in as_list(raw.get("Action", [])) if isinstance(a, str)]
        self.not_action = "NotAction" in raw
        self.resources = as_list(raw.get("Resource", raw.get("NotResource", [])))
        self.condition = raw.get("Condition") or {}

    def matches(self, action: str) -> bool:
        """Whether this statement's Action (wildcards included) covers `action`."""
        if self.not_action:
            return not any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in as_list(self.raw["NotAction"]))
        return any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in self.actions)

    def condition_value(self, key: str, operators: tuple[str, ...]) -> list:
        found = []
        for op, kv in self.condition.items():
            if op in operators and isinstance(kv, dict):
                for k, v in kv.items():
                    if k.lower() == key.lower():
                        found += as_list(v)
        return found

    def __repr__(self) -> str:
        return f"{self.policy}/{self.sid}"


def resource_text(v) -> str:
    """A Resource value as text: Fn::Sub strings as written, Ref/GetAtt as markers."""
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        if "Fn::Sub" in v:
            return v["Fn::Sub"] if isinstance(v["Fn::Sub"], str) else v["Fn::Sub"][0]
        if "Ref" in v:
            return "${" + v["Ref"] + "}"
        if "Fn::GetAtt" in v:
            return "${" + ".".join(as_list(v["Fn::GetAtt"])) + "}"
    return json.dumps(v)


class Deployer:
    """The deployer template: the service role's statements and the deployer policy's."""

    def __init__(self, doc: dict):
        self.doc = doc
        res = doc.get("Resources", {})
        self.role_name = next((n for n, r in res.items() if r.get("Type") == "AWS::IAM::Role" and any(
            "cloudformation.amazonaws.com" in as_list((s.get("Principal") or {}).get("Service", []))
            for s in r.get("Properties", {}).get("AssumeRolePolicyDocument", {}).get("Statement", []))), None)
        role = res.get(self.role_name, {}).get("Properties", {}) if self.role_name else {}
        self.trust = role.get("AssumeRolePolicyDocument", {}).get("Statement", [])
        attached = {m.get("Ref") for m in role.get("ManagedPolicyArns", []) if isinstance(m, dict)}
        self.service: list[Statement] = []
        for p in role.get("Policies", []):
            self.service += [Statement(s, p.get("PolicyName", "inline")) for s in p["PolicyDocument"]["Statement"]]
        self.managed: dict[str, dict] = {}
        self.deployer: list[Statement] = []
        for name, r in res.items():
            if r.get("Type") != "AWS::IAM::ManagedPolicy":
                continue
            document = r.get("Properties", {}).get("PolicyDocument", {})
            self.managed[name] = document
            statements = [Statement(s, name) for s in document.get("Statement", [])]
            if name in attached:
                self.service += statements
            else:
                self.deployer += statements

    def allowed(self, statements: list[Statement], action: str) -> bool:
        """Allowed by some statement and not denied outright (a Deny on "*" without a condition)."""
        denied = any(s.effect == "Deny" and not s.condition and "*" in s.resources and s.matches(action)
                     for s in statements)
        return not denied and any(s.effect == "Allow" and s.matches(action) for s in statements)


# ------------------------------------------------------------------ the checks
# Each returns (ok, detail); main() names them. The self-test breaks the template one way
# per check and expects that check, by name, to fail.
def check_parameters(d: Deployer, _ctx) -> tuple[bool, str]:
    p = d.doc.get("Parameters", {}).get("PermissionsBoundaryArn")
    if not p:
        return False, "no PermissionsBoundaryArn parameter"
    if "Default" in p:
        return False, "PermissionsBoundaryArn has a Default; it must be required"
    if ":policy/" not in p.get("AllowedPattern", ""):
        return False, "PermissionsBoundaryArn's AllowedPattern does not require an IAM policy ARN"
    return True, ""


def check_outputs(d: Deployer, _ctx) -> tuple[bool, str]:
    outputs = d.doc.get("Outputs", {})
    role = {"Fn::GetAtt": [d.role_name, "Arn"]}
    has_role = any(o.get("Value") == role for o in outputs.values())
    has_policy = any(o.get("Value") == {"Ref": n} for o in outputs.values() for n in d.managed
                     if any(s.policy == n for s in d.deployer))
    return has_role and has_policy, f"service role ARN output: {has_role}, deployer policy ARN output: {has_policy}"


def check_trust(d: Deployer, _ctx) -> tuple[bool, str]:
    if not d.role_name:
        return False, "no role trusted by cloudformation.amazonaws.com"
    principals = [p for s in d.trust for p in as_list((s.get("Principal") or {}).get("Service", []))]
    others = [s.get("Principal") for s in d.trust if set((s.get("Principal") or {}).keys()) - {"Service"}]
    ok = principals == ["cloudformation.amazonaws.com"] and not others
    return ok, f"trusted principals: {principals + others}"


def check_types(d: Deployer, ctx) -> tuple[bool, str]:
    missing = []
    for rtype, retained, where in ctx["types"]:
        parts = rtype.split("::")
        prefix = PREFIXES.get(parts[1], parts[1].lower()) if len(parts) == 3 else "?"
        if not any(s.effect == "Allow" and any(a.lower().startswith(prefix + ":") or a == "*" for a in s.actions)
                   for s in d.service):
            missing.append(f"{rtype} ({where}): nothing of {prefix}:* is allowed")
            continue
        if rtype not in NEEDS:
            missing.append(f"{rtype} ({where}): unknown to this check; add its actions to NEEDS and to the role")
            continue
        create, delete = NEEDS[rtype]
        need = create + ([] if retained else delete)
        lacking = [a for a in need if not d.allowed(d.service, a)]
        if lacking:
            missing.append(f"{rtype} ({where}): {', '.join(lacking)}")
    unique = sorted(set(missing))
    return not unique, "; ".join(unique[:8]) + (f" (+{len(unique) - 8} more)" if len(unique) > 8 else "")


def check_boundary_condition(d: Deployer, _ctx) -> tuple[bool, str]:
    bad = []
    for s in d.service:
        if s.effect != "Allow":
            continue
        covered = [a for a in ROLE_CHANGING if s.matches(a)]
        if not covered:
            continue
        values = s.condition_value("iam:PermissionsBoundary", ("StringEquals", "ArnEquals"))
        if values != [BOUNDARY_REF]:
            bad.append(f"{s} allows {', '.join(covered)} with iam:PermissionsBoundary {values or 'unconditioned'}")
    if not any(s.effect == "Allow" and s.matches("iam:CreateRole") for s in d.service):
        bad.append("iam:CreateRole is not allowed at all")
    return not bad, "; ".join(bad)


def check_boundary_deny(d: Deployer, _ctx) -> tuple[bool, str]:
    ok = any(s.effect == "Deny" and not s.condition and s.matches("iam:DeleteRolePermissionsBoundary")
             and any(resource_text(r) in ("*", "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/*")
                     for r in s.resources)
             for s in d.service)
    return ok, "" if ok else "no unconditional Deny of iam:DeleteRolePermissionsBoundary on every role"


def check_passrole(d: Deployer, _ctx) -> tuple[bool, str]:
    bad = []
    for s in d.service + d.deployer:
        if s.effect != "Allow" or not s.matches("iam:PassRole"):
            continue
        services = s.condition_value("iam:PassedToService", ("StringEquals", "StringLike"))
        if not services or any("*" in v for v in services if isinstance(v, str)):
            bad.append(f"{s}: iam:PassRole without a fixed iam:PassedToService ({services or 'none'})")
        if any(resource_text(r) in ("*", "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/*") for r in s.resources):
            bad.append(f"{s}: iam:PassRole of any role")
        if s in d.deployer:
            if services != ["cloudformation.amazonaws.com"]:
                bad.append(f"{s}: the deployer may pass a role to {services}, not only to CloudFormation")
            if s.resources != [{"Fn::GetAtt": [d.role_name, "Arn"]}]:
                bad.append(f"{s}: the deployer may pass {[resource_text(r) for r in s.resources]}, not only the service role")
    return not bad, "; ".join(bad)


def check_deployer_iam(d: Deployer, _ctx) -> tuple[bool, str]:
    bad = []
    for s in d.deployer:
        if s.effect != "Allow":
            continue
        if s.not_action:
            bad.append(f"{s}: NotAction")
        for a in s.actions:
            if a.lower().startswith("iam:") and a.lower() != "iam:passrole" or a in ("*", "iam*"):
                bad.append(f"{s}: {a}")
            if a.lower().startswith("sts:"):
                bad.append(f"{s}: {a}")
    return not bad, "the deployer policy allows " + ", ".join(bad) if bad else ""


def check_deployer_change_sets(d: Deployer, _ctx) -> tuple[bool, str]:
    bad = []
    role = {"Fn::GetAtt": [d.role_name, "Arn"]}
    mutating = ["cloudformation:CreateChangeSet", "cloudformation:CreateStack", "cloudformation:UpdateStack",
                "cloudformation:ExecuteChangeSet", "cloudformation:DeleteStack"]
    for s in d.deployer:
        if s.effect != "Allow" or not any(s.matches(a) for a in mutating):
            continue
        texts = [resource_text(r) for r in s.resources]
        for t in texts:
            if not (re.search(r":stack/awsmp-\*/\*$", t) or re.search(r":stack/aws-sam-cli-managed-default/\*$", t)
                    or t.endswith(":aws:transform/Serverless-2016-10-31")):
                bad.append(f"{s}: stack changes on {t}")
        for a in ("cloudformation:CreateStack", "cloudformation:UpdateStack"):
            if s.matches(a):
                bad.append(f"{s}: {a} (sam deploy uses change sets)")
        if s.matches("cloudformation:CreateChangeSet") and any(":stack/awsmp-" in t for t in texts):
            if s.condition_value("cloudformation:RoleArn", ("StringEquals", "ArnEquals")) != [role]:
                bad.append(f"{s}: change sets on awsmp-* stacks without cloudformation:RoleArn = the service role")
    return not bad, "; ".join(bad)


def check_no_wildcards(d: Deployer, _ctx) -> tuple[bool, str]:
    bad = [f"{s}: {a}" for s in d.service + d.deployer if s.effect == "Allow"
           for a in s.actions if a == "*" or a.endswith(":*")]
    bad += [f"{s}: NotAction" for s in d.service + d.deployer if s.effect == "Allow" and s.not_action]
    return not bad, "; ".join(bad)


def check_policy_sizes(d: Deployer, _ctx) -> tuple[bool, str]:
    bad = []
    for name, document in d.managed.items():
        text = json.dumps(document, separators=(",", ":"))
        text = text.replace("${AWS::Partition}", "aws-us-gov").replace("${AWS::AccountId}", "123456789012")
        # A Ref or GetAtt becomes an ARN: count 100 characters for each.
        text = re.sub(r'\{"(Ref|Fn::GetAtt)":[^{}]*\}', '"' + "x" * 100 + '"', text)
        if len(text) > MANAGED_POLICY_LIMIT:
            bad.append(f"{name}: about {len(text)} characters")
    return not bad, f"over IAM's {MANAGED_POLICY_LIMIT}: " + "; ".join(bad) if bad else ""


CHECKS = [
    ("parameters", "deployer: PermissionsBoundaryArn is a required parameter naming an IAM policy", check_parameters),
    ("outputs", "deployer: outputs the service role's and the deployer policy's ARNs", check_outputs),
    ("trust", "service role: only cloudformation.amazonaws.com may assume it", check_trust),
    ("types", "service role: every resource type of both templates has its service and actions allowed "
              "(deletes unless retained)", check_types),
    ("boundary-condition", "service role: CreateRole, PutRolePolicy, AttachRolePolicy, ... only with "
                           "iam:PermissionsBoundary = PermissionsBoundaryArn", check_boundary_condition),
    ("boundary-deny", "service role: iam:DeleteRolePermissionsBoundary is denied on every role", check_boundary_deny),
    ("passrole", "every iam:PassRole names its roles and iam:PassedToService "
                 "(the deployer's: the service role, to CloudFormation only)", check_passrole),
    ("deployer-iam", "deployer policy: no IAM or STS action but iam:PassRole", check_deployer_iam),
    ("deployer-change-sets", "deployer policy: stack changes only on awsmp-* (and SAM's artifact stack), "
                             "change sets on awsmp-* only with the service role", check_deployer_change_sets),
    ("no-wildcards", "no Allow of '*', 'service:*' or NotAction in either policy", check_no_wildcards),
    ("sizes", "each managed policy fits IAM's 6,144 characters", check_policy_sizes),
]


# ------------------------------------------------------------------ the self-test's breakages
def statements_of(doc: dict):
    for r in doc["Resources"].values():
        if r.get("Type") == "AWS::IAM::ManagedPolicy":
            yield r["Properties"]["PolicyDocument"]["Statement"]
        for p in r.get("Properties", {}).get("Policies", []):
            yield p["PolicyDocument"]["Statement"]


def breakage(doc: dict, how) -> dict | None:
    """A copy of doc with `how` applied to its statements; None when nothing changed."""
    broken = copy.deepcopy(doc)
    changed = False
    for statements in statements_of(broken):
        changed |= bool(how(statements))
    return broken if changed else None


def drop_actions(prefix: str):
    def how(statements):
        before = json.dumps(statements)
        for s in statements:
            if s.get("Effect") == "Allow":
                kept = [a for a in as_list(s.get("Action", [])) if not a.lower().startswith(prefix)]
                s["Action"] = kept or ["sts:GetCallerIdentity"]
        return json.dumps(statements) != before
    return how


def drop_condition_of(action: str):
    def how(statements):
        hit = False
        for s in statements:
            if s.get("Effect") == "Allow" and action in as_list(s.get("Action", [])) and "Condition" in s:
                del s["Condition"]
                hit = True
        return hit
    return how


def add_statement(statement: dict, where: str):
    def how(statements):
        if where == "service" and any(s.get("Sid") == "NeverRemoveABoundary" for s in statements) or \
                where == "deployer" and any(s.get("Sid", "").startswith("ChangeSets") for s in statements):
            statements.append(copy.deepcopy(statement))
            return True
        return False
    return how


def drop_sid_matching(action: str, effect: str):
    def how(statements):
        before = len(statements)
        statements[:] = [s for s in statements if not (s.get("Effect") == effect and action in as_list(s.get("Action")))]
        return len(statements) != before
    return how


ROLES = {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/awsmp-*"}
BREAKAGES = [
    ("no wafv2 actions for the WebACL", "types", drop_actions("wafv2:")),
    ("no cloudfront actions for the page", "types", drop_actions("cloudfront:")),
    ("no dynamodb:CreateTable", "types", drop_actions("dynamodb:createtable")),
    ("CreateRole without its boundary condition", "boundary-condition", drop_condition_of("iam:CreateRole")),
    ("PutRolePolicy without its boundary condition", "boundary-condition", drop_condition_of("iam:PutRolePolicy")),
    ("an unconditioned AttachRolePolicy", "boundary-condition",
     add_statement({"Sid": "Broken", "Effect": "Allow", "Action": "iam:AttachRolePolicy", "Resource": ROLES}, "service")),
    ("an iam:Put* wildcard", "boundary-condition",
     add_statement({"Sid": "Broken", "Effect": "Allow", "Action": "iam:Put*", "Resource": ROLES}, "service")),
    ("no Deny of iam:DeleteRolePermissionsBoundary", "boundary-deny",
     drop_sid_matching("iam:DeleteRolePermissionsBoundary", "Deny")),
    ("the service role's PassRole without iam:PassedToService", "passrole", drop_condition_of("iam:PassRole")),
    ("a PassRole of every role", "passrole",
     add_statement({"Sid": "Broken", "Effect": "Allow", "Action": "iam:PassRole", "Resource": "*",
                    "Condition": {"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}}}, "service")),
    ("the deployer may create a role", "deployer-iam",
     add_statement({"Sid": "Broken", "Effect": "Allow", "Action": "iam:CreateRole", "Resource": ROLES}, "deployer")),
    ("change sets without the service role", "deployer-change-sets",
     drop_condition_of("cloudformation:CreateChangeSet")),
    ("an Allow of s3:*", "no-wildcards",
     add_statement({"Sid": "Broken", "Effect": "Allow", "Action": "s3:*", "Resource": "*"}, "service")),
]


def run_checks(doc: dict, ctx) -> dict[str, tuple[bool, str]]:
    d = Deployer(doc)
    return {key: fn(d, ctx) for key, _name, fn in CHECKS}


def main() -> int:
    args = sys.argv[1:]
    root = Path(args[0]) if args and not args[0].startswith("--") else Path(__file__).resolve().parents[2]
    deployer_path = root / "deploy-policy" / "deployer.json"
    boundary_path = root / "deploy-policy" / "boundary-example.json"
    for flag in ("--deployer", "--boundary"):
        if flag in args:
            value = Path(args[args.index(flag) + 1])
            if flag == "--deployer":
                deployer_path = value
            else:
                boundary_path = value

    results: list[tuple[bool, str]] = []
    try:
        doc = json.loads(deployer_path.read_text())
    except (OSError, ValueError) as e:
        print(f"FAIL {deployer_path} is readable JSON: {e}")
        return 1
    resources = read_template(root / "template-events.yaml") + read_template(root / "template-main.yaml")
    ctx = {"types": created_types(resources)}

    outcome = run_checks(doc, ctx)
    for key, name, _fn in CHECKS:
        ok, detail = outcome[key]
        results.append((ok, name if ok or not detail else f"{name}: {detail}"))

    # ---- the stacks' roles: all under the boundary, none made by SAM
    roles = [r for r in resources if r.type == "AWS::IAM::Role"]
    unbounded = [r.where for r in roles
                 if "PermissionsBoundaryArn" not in (scalar(r.props, "PermissionsBoundary", 6) or "")]
    results.append((bool(roles) and not unbounded,
                    "templates: every IAM role carries PermissionsBoundary from PermissionsBoundaryArn"
                    + (f": not {unbounded}" if unbounded else "")))
    sam_roles = [w for t, _r, w in ctx["types"] if t == "AWS::IAM::Role" and "(SAM" in w]
    results.append((not sam_roles, "templates: no SAM-generated role (each function names its own)"
                    + (f": {sam_roles}" if sam_roles else "")))
    misnamed = []
    for r in resources:
        rule = NAMES.get(r.type)
        if not rule:
            continue
        key, prefixes, required = rule
        value = scalar(r.props, key, 6)
        if value is None:
            if required:
                misnamed.append(f"{r.where}: no {key} (a generated name is outside {prefixes})")
            continue
        value = re.sub(r"^!Sub\s+", "", value).strip("'\"")
        if not value.startswith(tuple(prefixes)):
            misnamed.append(f"{r.where}: {key} {value}")
    results.append((not misnamed, "templates: every named resource is within the service role's name patterns "
                    "(awsmp-*, /aws/lambda/awsmp/*, /aws/apigateway/awsmp/*, aws-waf-logs-awsmp-*)" + (f": not {misnamed}" if misnamed else "")))
    managed = [r.where for r in roles if section(r.props, "ManagedPolicyArns", 6)]
    d = Deployer(doc)
    attach_ok = not managed or all(d.allowed(d.service, a) for a in ("iam:AttachRolePolicy", "iam:DetachRolePolicy"))
    results.append((attach_ok, "templates: a role with ManagedPolicyArns has AttachRolePolicy/DetachRolePolicy "
                    "allowed (under the boundary)" + ("" if attach_ok else f": {managed}")))

    # ---- the example boundary allows what the roles' policies grant
    try:
        boundary = json.loads(boundary_path.read_text())
        bstatements = [Statement(s, "boundary") for s in as_list(boundary.get("Statement", []))]
        lacking = sorted({f"{a} ({r.where})" for r in roles for a in role_policy_actions(r)
                          if not any(s.effect == "Allow" and s.matches(a) for s in bstatements)})
        results.append((not lacking, "boundary-example.json allows every action the templates' roles are granted"
                        + (f": add {', '.join(lacking)}" if lacking else "")))
        # No role under the boundary reads buyer profiles (the deployer could otherwise
        # create one, name it ProfileAccessRoleArn and scan): the stack's roles only
        # write them, and the seller's ProfileAccessRoleArn is not under this boundary.
        profile = "arn:aws:dynamodb:us-east-1:111122223333:table/awsmp-prod1-customer-profile"
        usage = "arn:aws:dynamodb:us-east-1:111122223333:table/awsmp-prod1-usage"

        def denied(action: str, resource: str) -> bool:
            return any(s.effect == "Deny" and s.matches(action) and not s.condition
                       and any(fnmatch.fnmatchcase(resource, r) for r in s.resources if isinstance(r, str))
                       for s in bstatements)
        reads = ["dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan", "dynamodb:PartiQLSelect",
                 "dynamodb:ExportTableToPointInTime", "dynamodb:RestoreTableToPointInTime", "dynamodb:CreateBackup",
                 "dynamodb:DeleteResourcePolicy"]
        open_reads = [a for a in reads if not denied(a, profile)] + [f"{a} on an index" for a in ("dynamodb:Query",)
                                                                      if not denied(a, profile + "/index/x")]
        results.append((not open_reads and not denied("dynamodb:Scan", usage),
                        "boundary-example.json denies every read, copy and policy change of *-customer-profile (and only of it)"
                        + (f": not {open_reads}" if open_reads else "")))
        iam_in_boundary = [a for s in bstatements if s.effect == "Allow" for a in s.actions
                           if a.lower().startswith(("iam:", "sts:")) or a == "*"]
        results.append((not iam_in_boundary, "boundary-example.json allows no IAM, STS or '*' action"
                        + (f": {iam_in_boundary}" if iam_in_boundary else "")))
    except (OSError, ValueError) as e:
        results.append((False, f"{boundary_path} is readable JSON: {e}"))

    # ---- each check catches what it is there for
    names = {key: name for key, name, _fn in CHECKS}
    for what, key, how in BREAKAGES:
        broken = breakage(doc, how)
        if broken is None:
            results.append((False, f"self-test: could not apply '{what}' (the template changed shape?)"))
            continue
        ok, _detail = run_checks(broken, ctx)[key]
        results.append((not ok, f"self-test: {what} fails '{names[key]}'"))

    # ---- cfn-lint, where make venv installed it
    lint = root / ".venv" / "bin" / "cfn-lint"
    skipped = ""
    if lint.exists():
        proc = subprocess.run([str(lint), str(deployer_path)], capture_output=True, text=True)
        results.append((proc.returncode == 0, "cfn-lint deploy-policy/deployer.json"
                        + ("" if proc.returncode == 0 else ":\n" + proc.stdout + proc.stderr)))
    else:
        skipped = f"skip cfn-lint (no {lint}; make venv installs it)"

    failed = [name for ok, name in results if not ok]
    for ok, name in results:
        print(("ok   " if ok else "FAIL ") + name)
    if skipped:
        print(skipped)
    print(f"deployer policy checks: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
