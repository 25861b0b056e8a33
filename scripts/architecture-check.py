#!/usr/bin/env python3
"""Check docs/architecture.md's crate table against `cargo metadata`.

Usage: scripts/architecture-check.py [METADATA_JSON]   (default: runs `cargo metadata --no-deps`)

Every workspace crate must have a row, and the row's last column ("depends on") must name exactly the
workspace crates the crate depends on (normal dependencies, not dev or build ones). In that column a
workspace crate is written by its short name (`api` for `capstan-api`) or in full (`capstan-kube`,
needed where the short name is also an outside crate: `kube` is kube-rs); anything inside
parentheses, and names that are no workspace crate (`kube`, `rcgen`, `—`), are notes about outside
crates and are not checked. Exits 1 and lists each difference when the table has drifted.

Hand-written because the table is prose for people; this keeps its one checkable column true.
"""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def metadata() -> dict:
    if len(sys.argv) > 1:
        return json.loads(pathlib.Path(sys.argv[1]).read_text())
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def strip_parentheses(text: str) -> str:
    depth, out = 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def named_crates(column: str, members: set) -> set:
    names = set()
    for token in strip_parentheses(column).split(","):
        token = token.strip().strip("`").strip()
        if not token:
            continue
        if token.startswith("capstan-") and token in members:
            names.add(token)
        elif token != "kube" and f"capstan-{token}" in members:
            names.add(f"capstan-{token}")
    return names


def main() -> int:
    meta = metadata()
    members = {p["name"] for p in meta["packages"]}
    deps = {
        p["name"]: {d["name"] for d in p["dependencies"] if d["name"] in members and d.get("kind") is None}
        for p in meta["packages"]
    }
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\|\s*`crates/[^`]+`\s*\(`([^`]+)`\)[^|]*\|.*\|([^|]*)\|\s*$", line)
        if m:
            rows[m.group(1)] = named_crates(m.group(2), members)
        m = re.match(r"\|\s*`crates/([^`]+)`\s*\(binary `([^`]+)`\)[^|]*\|.*\|([^|]*)\|\s*$", line)
        if m:
            rows[m.group(2)] = named_crates(m.group(3), members)
    problems = []
    for name in sorted(members):
        if name not in rows:
            problems.append(f"{name}: no row in docs/architecture.md")
            continue
        missing, extra = deps[name] - rows[name], rows[name] - deps[name]
        if missing:
            problems.append(f"{name}: depends on {', '.join(sorted(missing))} but the table does not say so")
        if extra:
            problems.append(f"{name}: the table names {', '.join(sorted(extra))}, which it does not depend on")
    for p in problems:
        print(f"docs/architecture.md: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
