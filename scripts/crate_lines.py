#!/usr/bin/env python3
"""Lines of Rust per workspace crate: production, test, and what each crate may import.

    scripts/crate_lines.py [REPO_DIR]

Test lines: files under `tests/`, `benches/`, `examples/`, files named `tests.rs`, every
module declared behind `#[cfg(test)]` or `#[cfg(any(test, ...))]` (the in-memory ports
behind `test-util` included, file or folder), and the rest of any file from its first
such item. Everything else that is not blank is production. "May import" is the crate's
workspace dependencies (dev-dependencies in brackets). One table on stdout; notes on
structural work quote it before and after.
"""
import re
import sys
import tomllib
from pathlib import Path

TEST_GATE = re.compile(r"^\s*#\[cfg\((test|any\(test\b)")
MOD = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def module_dir(f: Path) -> Path:
    return f.parent if f.name in ("lib.rs", "main.rs", "mod.rs") else f.parent / f.stem


def gated_modules(files):
    """Paths (files and folders) of modules declared right after a test gate."""
    gated = set()
    for f in files:
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        for prev, line in zip(lines, lines[1:]):
            m = MOD.match(line)
            if m and TEST_GATE.match(prev):
                d = module_dir(f)
                gated.add(d / f"{m.group(3)}.rs")
                gated.add(d / m.group(3))
    return gated


def count_file(f: Path, in_test: bool):
    prod = test = 0
    for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
        if not in_test and TEST_GATE.match(line):
            in_test = True
        if line.strip():
            if in_test:
                test += 1
            else:
                prod += 1
    return prod, test


def crate_lines(crate: Path):
    files = [f for f in crate.rglob("*.rs") if "target" not in f.relative_to(crate).parts]
    gated = gated_modules(files)
    prod = test = 0
    for f in files:
        rel = f.relative_to(crate)
        in_test = (
            rel.parts[0] in ("tests", "benches", "examples")
            or f.name == "tests.rs"
            or f in gated
            or any(p in gated for p in f.parents)
        )
        p, t = count_file(f, in_test)
        prod += p
        test += t
    return prod, test


def main(repo: Path):
    members = sorted(
        p.parent for pattern in ("crates/*/Cargo.toml", "crates/*/*/Cargo.toml") for p in repo.glob(pattern)
    ) + [repo / "tests"]
    manifests = {m: tomllib.loads((m / "Cargo.toml").read_text()) for m in members}
    names = {d["package"]["name"] for d in manifests.values()}
    rows = []
    for m in members:
        data = manifests[m]
        me = data["package"]["name"]
        deps = sorted(d for d in data.get("dependencies", {}) if d in names)
        dev = sorted(
            d for d in data.get("dev-dependencies", {}) if d in names and d not in deps and d != me
        )
        imports = ", ".join(deps) + (f" [dev: {', '.join(dev)}]" if dev else "")
        rows.append((me, *crate_lines(m), imports.strip() or "-"))
    w = max(len(r[0]) for r in rows)
    print(f"{'crate':<{w}}  {'prod':>6}  {'test':>6}  may import")
    for name, prod, test, imports in rows:
        print(f"{name:<{w}}  {prod:>6}  {test:>6}  {imports}")
    print(f"{'total':<{w}}  {sum(r[1] for r in rows):>6}  {sum(r[2] for r in rows):>6}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
