#!/usr/bin/env python3
"""Prepares both templates for the IaC scanner (checkov) as CloudFormation receives them.

`make lint-templates` runs checkov (its own venv, .venv-checkov) on the templates as
written, then on what this script writes: each template after SAM's transform (the
parameters of check_sam_graph.py, every optional resource on), as JSON. A check that
does not apply is skipped where the resource is defined, with a one-line reason:

    Metadata:
      checkov:
        skip:
          - id: CKV_AWS_117
            comment: why it does not apply here

SAM copies no resource's Metadata to what it generates (an AWS::Serverless::Api's
stage, a function's AWS::Lambda::Function is its own), so each generated resource gets
the skips of the resource it came from (SAM's Metadata SamResourceId names it). This
script also fails, naming them, on a skip without a reason.

    .venv/bin/python tests/deploy/checkov_templates.py OUTDIR [ROOT]
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_sam_graph import PARAMETERS, transformed  # noqa: E402
from cfnlint.decode import decode  # noqa: E402


def skips_of(body: dict) -> list:
    return ((body.get("Metadata") or {}).get("checkov") or {}).get("skip") or []


def main() -> int:
    out = Path(sys.argv[1])
    root = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[2]
    out.mkdir(parents=True, exist_ok=True)
    logging.disable(logging.WARNING)
    unexplained = []
    for name, parameters in PARAMETERS.items():
        source, problems = decode(str(root / name))
        if source is None:
            raise SystemExit(f"{name}: cannot be read: {problems}")
        resources = source.get("Resources", {})
        for logical, body in resources.items():
            for skip in skips_of(body):
                if not isinstance(skip, dict) or not str(skip.get("id", "")).startswith("CKV") \
                        or len(str(skip.get("comment", "")).strip()) < 10:
                    unexplained.append(f"{name} {logical}: {skip!r}")
        output = transformed(root / name, parameters)
        for logical, body in output.get("Resources", {}).items():
            origin = (body.get("Metadata") or {}).get("SamResourceId")
            if origin is None:
                # SAM names what it generates after its source (RegisterApi -> RegisterApiStage).
                sources = [s for s, b in resources.items()
                           if logical.startswith(s) and str(b.get("Type", "")).startswith("AWS::Serverless::")]
                origin = max(sources, key=len) if sources else logical
            inherited = skips_of(resources.get(origin, {}))
            if inherited and not skips_of(body):
                body.setdefault("Metadata", {})["checkov"] = {"skip": inherited}
        target = out / (Path(name).stem + ".transformed.json")
        target.write_text(json.dumps(output, indent=1, default=str))
        print(f"checkov_templates: {name} after the SAM transform -> {target}")
    for problem in unexplained:
        print(f"FAIL checkov skip without an id and a one-line reason: {problem}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
