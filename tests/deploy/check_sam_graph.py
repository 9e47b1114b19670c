#!/usr/bin/env python3
"""Each template as CloudFormation receives it: the SAM transform run, then no dependency cycle.

cfn-lint validates SAM templates without running SAM's transform, so it never sees the
resources SAM adds (an API's RestApi body that names its functions, their permissions,
an event's rule). A cycle among those fails the first deploy with "Circular dependency
between resources", long after every check passed. This runs the real transform
(aws-sam-translator, in the test venv) on each template with the parameters that create
every optional resource, then walks the result: Ref, Fn::GetAtt, Fn::Sub (both forms)
and DependsOn, in every branch of every Fn::If (a superset of what one deployment sees).
A REST API body that names a function by its name (which is how a template breaks such a
cycle) must name one of the template's functions, with a permission to invoke it.

    .venv/bin/python tests/deploy/check_sam_graph.py [ROOT]     one line per template
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

from cfnlint.decode import decode
from samtranslator.translator.transform import transform

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])

# Parameters that turn every optional resource on, so their references are walked too.
PARAMETERS = {
    "template-main.yaml": {
        "ProductCode": "prod1",
        "StageName": "prod",
        "PageDomainName": "register.example.com",
        "PageCertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/abc",
        "ProfileRetentionDays": "30",
        "EdgeLogs": "enabled",
        "WafRegisterChallenge": "enabled",
        "UsageApi": "enabled",
        "OutcomeEvents": "enabled",
    },
    "template-events.yaml": {"StageName": "prod"},
}


def references(value, resources: set[str]) -> set[str]:
    """The resources `value` names (Ref, GetAtt, Sub variables), in every branch."""
    found: set[str] = set()
    if isinstance(value, list):
        for item in value:
            found |= references(item, resources)
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str):
                found.add(inner)
            elif key == "Fn::GetAtt":
                target = inner[0] if isinstance(inner, list) else str(inner).split(".", 1)[0]
                found.add(target)
            elif key == "Fn::Sub":
                text, variables = (inner[0], inner[1]) if isinstance(inner, list) else (inner, {})
                for name in re.findall(r"\$\{(?!!)([^}]+)\}", text):
                    if name not in variables:
                        found.add(name.split(".", 1)[0])
                found |= references(variables, resources)
            else:
                found |= references(inner, resources)
    return found & resources


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one resource (or a self-reference)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def integrations_reach_their_functions(resources: dict) -> list[str]:
    """A REST API whose body names a function by name (not by a reference, which the
    graph above would see) must name a function of this template by its FunctionName,
    and a Lambda permission must let that API invoke it: else every request is a 500."""
    problems = []
    named = {}
    for logical, body in resources.items():
        name = body.get("Properties", {}).get("FunctionName")
        if body.get("Type") == "AWS::Lambda::Function" and isinstance(name, dict) and "Fn::Sub" in name:
            named[name["Fn::Sub"]] = logical
    for api, body in resources.items():
        if body.get("Type") != "AWS::ApiGateway::RestApi":
            continue
        for path, methods in body.get("Properties", {}).get("Body", {}).get("paths", {}).items():
            for method, operation in methods.items():
                uri = operation.get("x-amazon-apigateway-integration", {}).get("uri", {})
                text = uri.get("Fn::Sub", "") if isinstance(uri, dict) else ""
                if isinstance(text, list):
                    continue  # names the function by a variable, a reference the graph sees
                match = re.search(r":function:(.+)/invocations$", text)
                if not match:
                    continue
                function = named.get(match.group(1))
                if function is None:
                    problems.append(f"{api} {method.upper()} {path} invokes {match.group(1)}, which no function here is named")
                    continue
                allowed = any(
                    other.get("Type") == "AWS::Lambda::Permission"
                    and function in references(other["Properties"].get("FunctionName"), set(resources))
                    and other["Properties"].get("Principal") == "apigateway.amazonaws.com"
                    and api in references(other["Properties"].get("SourceArn"), set(resources))
                    for other in resources.values()
                )
                if not allowed:
                    problems.append(f"{api} {method.upper()} {path}: no Lambda permission lets {api} invoke {function}")
    return problems


def transformed(path: Path, parameters: dict[str, str]) -> dict:
    template, problems = decode(str(path))
    if template is None:
        raise SystemExit(f"{path.name}: cannot be read: {problems}")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    # What `sam build` + `sam deploy` hand CloudFormation: the code uploaded to S3.
    for body in template.get("Resources", {}).values():
        if body.get("Type") == "AWS::Serverless::Function":
            body.setdefault("Properties", {})["CodeUri"] = "s3://bucket/code.zip"
    return transform(template, parameters, _NoManagedPolicies())


class _NoManagedPolicies:
    """SAM asks for managed policy ARNs only for a function's Policies; ours have roles."""

    def load(self) -> dict[str, str]:
        return {}


def main() -> int:
    logging.disable(logging.WARNING)  # the translator's notes on feature toggles and metrics
    failed = 0
    for name, parameters in PARAMETERS.items():
        output = transformed(ROOT / name, parameters)
        resources = output.get("Resources", {})
        names = set(resources)
        graph = {
            logical: references({k: v for k, v in body.items() if k != "DependsOn"}, names)
            | set([body["DependsOn"]] if isinstance(body.get("DependsOn"), str) else body.get("DependsOn", []))
            for logical, body in resources.items()
        }
        found = cycles(graph)
        for problem in integrations_reach_their_functions(resources):
            failed += 1
            print(f"FAIL {name}: {problem}")
        if found:
            failed += 1
            for component in found:
                print(f"FAIL {name}: dependency cycle after the SAM transform among {', '.join(component)}")
        else:
            print(f"ok   {name}: {len(resources)} resources after the SAM transform, no dependency cycle")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
