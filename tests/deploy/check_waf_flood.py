#!/usr/bin/env python3
"""Plays a flood against the registration WebACL as the template defines it, in a small model of WAF.

A rate-based rule in WAF counts every request that reaches it and matches its scope-down
statement, per aggregation key, and acts (blocks) while its key's count over the window
is above the limit; rules run in priority order and a terminating action (Block, or a
Challenge of a request without a valid token) ends the evaluation, so a later rule never
counts that request. Managed rule groups are modelled as matching nothing (the requests
here are plain, well-formed registrations). A FORWARDED_IP rule whose header is absent
does not apply. The buyer's address header is what PageViewerAddressFunction (run under
node, from the template) writes for each viewer address.

The flood, over ten minutes: two IPv4 viewers at 1 request/s through the page's
distribution, one IPv6 /64 at 3 requests/s from a new address each time, two IPv4
sources at 1 request/s straight to the API, none with a challenge token; with
WafRegisterChallenge=enabled also a botnet of 300 IPv4 addresses each under the
per-address limit. Meanwhile a genuine buyer registers every 7 seconds (IPv4 and IPv6,
through the distribution, with the challenge SDK's token). Every buyer must get through:
the shared cap (register-rate-total) is there for floods that pass the per-address rules
and the challenge, not for ones those rules already stop.

    .venv/bin/python tests/deploy/check_waf_flood.py [ROOT]   one line per check; exits 1 on a failure
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import defaultdict, deque
from pathlib import Path

from cfnlint.decode import decode

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
EDGE = "stack-id-edge-secret"
WINDOW = 300
DURATION = 600
RESULTS: list[tuple[bool, str, str]] = []


def check(ok: bool, name: str, detail: str = "") -> None:
    RESULTS.append((ok, name, detail))


def resolve(value, parameters: dict[str, str], conditions: dict[str, bool]):
    """`value` with Ref (parameters), Fn::If (conditions) and the stack-id Select decided; None for AWS::NoValue."""
    if isinstance(value, list):
        items = [resolve(v, parameters, conditions) for v in value]
        return [v for v in items if v is not None]
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            name = value["Ref"]
            if name == "AWS::NoValue":
                return None
            return parameters[name]
        if set(value) == {"Fn::If"}:
            cond, then, other = value["Fn::If"]
            return resolve(then if conditions[cond] else other, parameters, conditions)
        if set(value) == {"Fn::Select"} and "AWS::StackId" in json.dumps(value):
            return EDGE
        return {k: r for k, v in value.items() if (r := resolve(v, parameters, conditions)) is not None}
    return value


def field(request: dict, spec: dict) -> str | None:
    if "Method" in spec:
        return request["method"]
    if "UriPath" in spec:
        return request["path"]
    if "SingleHeader" in spec:
        return request["headers"].get(spec["SingleHeader"]["Name"].lower())
    raise ValueError(f"FieldToMatch {spec} is not modelled")


def transform(text: str, transformations: list[dict]) -> str:
    for t in sorted(transformations, key=lambda t: t["Priority"]):
        if t["Type"] == "LOWERCASE":
            text = text.lower()
        elif t["Type"] != "NONE":
            raise ValueError(f"text transformation {t['Type']} is not modelled")
    return text


def matches(statement: dict, request: dict) -> bool:
    """Whether a non-rate-based statement matches `request`."""
    (kind, body), = statement.items()
    if kind == "AndStatement":
        return all(matches(s, request) for s in body["Statements"])
    if kind == "OrStatement":
        return any(matches(s, request) for s in body["Statements"])
    if kind == "NotStatement":
        return not matches(body["Statement"], request)
    if kind == "ByteMatchStatement":
        value = field(request, body["FieldToMatch"])
        if value is None:
            return False
        value = transform(value, body["TextTransformations"])
        needle = str(body["SearchString"])
        return {
            "EXACTLY": value == needle, "ENDS_WITH": value.endswith(needle),
            "STARTS_WITH": value.startswith(needle), "CONTAINS": needle in value,
        }[body["PositionalConstraint"]]
    if kind == "SizeConstraintStatement":
        value = field(request, body["FieldToMatch"]) or ""
        size, limit = len(value.encode()), int(body["Size"])
        return {"GT": size > limit, "GE": size >= limit, "LT": size < limit, "LE": size <= limit,
                "EQ": size == limit, "NE": size != limit}[body["ComparisonOperator"]]
    if kind == "ManagedRuleGroupStatement":
        return False
    raise ValueError(f"statement {kind} is not modelled")


class WebAcl:
    """The rules in priority order, with each rate-based rule's counters."""

    def __init__(self, rules: list[dict]):
        self.rules = sorted(rules, key=lambda r: int(r["Priority"]))
        self.seen: dict[tuple[str, str], deque[int]] = defaultdict(deque)

    def decide(self, request: dict, now: int) -> str:
        """'allowed', or 'blocked by RULE' / 'challenged by RULE'."""
        for rule in self.rules:
            statement = rule["Statement"]
            if "RateBasedStatement" in statement:
                rate = statement["RateBasedStatement"]
                scope = rate.get("ScopeDownStatement")
                if scope is not None and not matches(scope, request):
                    continue
                key_type = rate["AggregateKeyType"]
                if key_type == "IP":
                    key = request["source"]
                elif key_type == "FORWARDED_IP":
                    key = request["headers"].get(rate["ForwardedIPConfig"]["HeaderName"].lower())
                    if key is None:
                        continue
                elif key_type == "CONSTANT":
                    key = ""
                else:
                    raise ValueError(f"AggregateKeyType {key_type} is not modelled")
                seen = self.seen[(rule["Name"], key)]
                seen.append(now)
                while seen and seen[0] <= now - WINDOW:
                    seen.popleft()
                hit = len(seen) > int(rate["Limit"])
            else:
                hit = matches(statement, request)
            if not hit:
                continue
            action = rule.get("Action", {})
            if "Block" in action:
                return f"blocked by {rule['Name']}"
            if "Challenge" in action and not request["token"]:
                return f"challenged by {rule['Name']}"
        return "allowed"


def viewer_headers(code: str, addresses: list[str]) -> dict[str, str]:
    """address -> the x-awsmp-viewer-ip PageViewerAddressFunction writes for a viewer at it."""
    node = shutil.which("node")
    if node is None:
        raise SystemExit("check_waf_flood: node not found (install Node.js >= 18, as the browser tests need)")
    probe = code + """
var out = {};
var ips = JSON.parse(process.argv[1]);
for (var i = 0; i < ips.length; i++) {
  var r = handler({ viewer: { ip: ips[i] }, request: { method: "POST", uri: "/register", headers: {} } });
  out[ips[i]] = r.headers["x-awsmp-viewer-ip"].value;
}
process.stdout.write(JSON.stringify(out));
"""
    ran = subprocess.run([node, "-e", probe, json.dumps(addresses)], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(ran.stdout)


def main() -> int:
    template = decode(str(ROOT / "template-main.yaml"))[0]
    assert template is not None, "template-main.yaml does not parse"
    resources = template["Resources"]
    defaults = {name: str(p.get("Default", "")) for name, p in template["Parameters"].items()}
    code = resources["PageViewerAddressFunction"]["Properties"]["FunctionCode"]

    # The function names an IPv6 viewer by its /64 and leaves an IPv4 one as it is.
    cases = {
        "198.51.100.7": "198.51.100.7",
        "2001:db8:1:2:3:4:5:6": "2001:db8:1:2::",
        "2001:db8:1:2::9": "2001:db8:1:2::",
        "2001:0db8:0001:0002:ffff:0:0:1": "2001:db8:1:2::",
        "2001:db8::1": "2001:db8:0:0::",
        "::1": "0:0:0:0::",
        "::ffff:192.0.2.1": "192.0.2.1",
    }
    got = viewer_headers(code, list(cases))
    wrong = {ip: got.get(ip) for ip, want in cases.items() if got.get(ip) != want}
    check(not wrong, "PageViewerAddressFunction: an IPv6 viewer counted by its /64, an IPv4 one by its address",
          f"got {wrong}, want {({ip: cases[ip] for ip in wrong})}")

    cloudfront = [f"130.176.{i}.{j}" for i in range(2) for j in range(1, 4)]
    for challenge in (False, True):
        parameters = dict(defaults, WafRegisterChallenge="enabled" if challenge else "disabled")
        conditions = {"ChallengeRegister": challenge, "CreateWebAcl": True, "HasPageDomain": False}
        acl = resolve(resources["RegisterWebAcl"]["Properties"], parameters, conditions)
        webacl = WebAcl(acl["Rules"])

        # (second, source, viewer address or None for a direct request, token, who)
        traffic: list[tuple[int, str, str | None, bool, str]] = []
        for t in range(DURATION):
            for viewer in ("203.0.113.1", "203.0.113.2"):
                traffic.append((t, cloudfront[t % len(cloudfront)], viewer, False, "attacker"))
            for n in range(3):
                traffic.append((t, cloudfront[(t + n) % len(cloudfront)], f"2001:db8:aa:bb:{t:x}:{n:x}::1", False, "attacker"))
            for source in ("192.0.2.10", "192.0.2.11"):
                traffic.append((t, source, None, False, "attacker"))
            if challenge:
                # 300 addresses, each one request a minute (5 per window, under the per-address limit).
                for b in range(5):
                    n = (t * 5 + b) % 300
                    traffic.append((t, cloudfront[n % len(cloudfront)], f"198.18.{n // 250}.{n % 250 + 1}", False, "attacker"))
            if t % 7 == 3:
                n = t // 7
                buyer = f"100.64.{n // 250}.{n % 250 + 1}" if n % 2 else f"2001:db8:b:{n:x}::1"
                traffic.append((t, cloudfront[n % len(cloudfront)], buyer, True, "buyer"))
        headers = viewer_headers(code, sorted({v for _, _, v, _, _ in traffic if v}))

        refused: list[str] = []
        attackers_allowed = 0
        for t, source, viewer, token, who in traffic:
            request = {
                "method": "POST", "path": "/prod/register", "source": source, "token": token,
                "headers": {"x-awsmp-edge": EDGE, "x-awsmp-viewer-ip": headers[viewer]} if viewer else {},
            }
            decision = webacl.decide(request, t)
            if who == "buyer" and decision != "allowed":
                refused.append(f"t={t}s {viewer}: {decision}")
            if who == "attacker" and decision == "allowed":
                attackers_allowed += 1
        mode = "WafRegisterChallenge=" + ("enabled" if challenge else "disabled")
        check(not refused, f"RegisterWebAcl ({mode}): every buyer registers through a flood from 2 IPv4 viewers, an IPv6 /64 and 2 direct sources"
              + (" and a 300-address botnet without tokens" if challenge else ""),
              f"{len(refused)} buyers refused, first: {refused[:3]}")
        # What the flood gets through is what the per-address limits allow, not the cap.
        limit = int(defaults["WafRegisterLimitPerIp"])
        check(attackers_allowed <= 5 * limit * (DURATION // WINDOW + 1),
              f"RegisterWebAcl ({mode}): the flood gets through only its per-address allowance",
              f"{attackers_allowed} attacker requests allowed")

    failed = [name for ok, name, _ in RESULTS if not ok]
    for ok, name, detail in RESULTS:
        print(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else f"\n       {detail}"))
    print(f"waf flood checks: {len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
