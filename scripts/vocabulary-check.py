#!/usr/bin/env python3
"""Report string literals of Capstan's status vocabulary compared outside `crates/api`.

Usage: scripts/vocabulary-check.py [FILE_OR_DIR...]   (default: every crates/*, but crates/api)

The vocabulary is read from the types that own it: every word spelt in `crates/api/src/status.rs`
(`Variant => "Word",` in its `spelt!`/`open_words!` lists: sync and health codes, sync results,
condition types) and `OperationPhase::as_str` in `crates/api/src/operation.rs`. Other crates compare
and build those types (`SyncCode::Synced`), never the words, so that a word is spelt once.

A literal is reported in a comparison or match position: beside `==` or `!=`, as a match arm or
alternative (`"Word" =>`, `"Word" |`, `| "Word"`, also inside `Some(…)`), or anywhere in a
`matches!(…)` on the same line. Building a word (`status: "Synced".into()`) is caught by the types
(a status field is no longer a `String`), not here.

Left out, on purpose:
- tests (files under `tests/`, `tests.rs`, and a `#[cfg(test)] mod …` at the end of a file): they
  assert on what a user reads (JSON documents, CLI output, the UI) and spell the words to pin that
  spelling independently of the enums — a wrong serde name would otherwise go unnoticed;
- a line that ends with `// vocabulary: <whose words>`, or the line after such a comment line:
  another API that uses some of the same words (a Pod's phase `Running`, Crossplane's condition type
  `Synced`, Argo Rollouts' phase `Healthy`). The comment says whose words they are.

Exits 1 when a literal is found.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = re.compile(r"//\s*vocabulary:\s*\S")


def vocabulary() -> set:
    words = set()
    status = (ROOT / "crates/api/src/status.rs").read_text()
    words.update(re.findall(r"^\s*[A-Z]\w*\s*=>\s*\"(\w+)\",\s*$", status, re.M))
    operation = (ROOT / "crates/api/src/operation.rs").read_text()
    words.update(re.findall(r"OperationPhase::\w+\s*=>\s*\"(\w+)\"", operation))
    if not words:
        raise SystemExit("vocabulary-check: no words found in crates/api (did the enums move?)")
    return words


def strip_tests(text: str) -> str:
    m = re.search(r"#\[cfg\(test\)\]\s*(?:pub(?:\(\w+\))?\s+)?mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def is_test_file(path: pathlib.Path) -> bool:
    parts = path.relative_to(ROOT).parts if path.is_absolute() else path.parts
    return "tests" in parts[:-1] or path.name == "tests.rs"


def patterns(words: set) -> list:
    w = "|".join(sorted(words, key=len, reverse=True))
    lit = rf'"(?:{w})"'
    # What may stand between a literal and the operator: `Some(`, `json!(`, `&`, closing parentheses.
    wrap = r"(?:(?:Some|json!|Value::from)\(|&|\s)*"
    return [
        re.compile(rf"(?:==|!=){wrap}{lit}"),
        re.compile(rf"{lit}\)*\s*(?:==|!=)"),
        re.compile(rf"(?:Some\()?{lit}\)*\s*(?:=>|\|(?!\|)|if\b)"),
        re.compile(rf"(?<!\|)\|\s*(?:Some\()?{lit}"),
        re.compile(rf"\bmatches!\(.*{lit}"),
    ]


def check(path: pathlib.Path, pats: list) -> list:
    found = []
    text = strip_tests(path.read_text(encoding="utf-8", errors="replace"))
    marked_above = False
    for n, line in enumerate(text.splitlines(), 1):
        comment_only = line.lstrip().startswith("//")
        marked = MARKER.search(line) is not None
        if comment_only:
            marked_above = marked_above or marked
            continue
        if marked or marked_above:
            marked_above = False
            continue
        if any(p.search(line) for p in pats):
            found.append((n, line.strip()))
    return found


def files(args: list) -> list:
    if args:
        out = []
        for a in map(pathlib.Path, args):
            out.extend(sorted(a.rglob("*.rs")) if a.is_dir() else [a])
        return out
    out = []
    for crate in sorted((ROOT / "crates").iterdir()):
        if crate.name == "api" or not crate.is_dir():
            continue
        out.extend(sorted(crate.rglob("*.rs")))
    return [f for f in out if "target" not in f.parts]


def main() -> int:
    pats = patterns(vocabulary())
    bad = 0
    for f in files(sys.argv[1:]):
        if is_test_file(f):
            continue
        for n, line in check(f, pats):
            bad += 1
            try:
                shown = f.relative_to(ROOT)
            except ValueError:
                shown = f
            print(f"{shown}:{n}: a word of Capstan's vocabulary compared as a string: {line}")
    if bad:
        print(
            f"{bad} comparison(s): use the types of capstan_api::status / OperationPhase, or end the line "
            "with `// vocabulary: <whose words>` when they are another API's words (scripts/vocabulary-check.py)"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
