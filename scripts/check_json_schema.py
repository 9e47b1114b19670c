#!/usr/bin/env python3
"""Checks JSON documents against the JSON Schemas of `awsmp --json` (docs/schemas/).

    check_json_schema.py SCHEMA DOCUMENT [SCHEMA DOCUMENT ...]

Every pair is checked (draft 2020-12, every error listed with its path); exit 0 when all
pass, 1 when any document breaks its schema, 2 on bad arguments or unreadable files.
Used by crates/cli/tests/binary.rs on the real binary's output.
"""
import json
import sys

from jsonschema import Draft202012Validator


def main(args):
    if not args or len(args) % 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    failed = 0
    for schema_path, doc_path in zip(args[0::2], args[1::2]):
        try:
            with open(schema_path, encoding="utf-8") as f:
                schema = json.load(f)
            with open(doc_path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{doc_path}: cannot read: {e}", file=sys.stderr)
            return 2
        Draft202012Validator.check_schema(schema)
        errors = sorted(
            Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path)
        )
        for e in errors:
            where = "/".join(str(p) for p in e.absolute_path) or "(document)"
            print(f"{doc_path}: {where}: {e.message} (schema {schema_path})")
        failed += bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
