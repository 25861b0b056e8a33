#!/usr/bin/env python3
"""Report files of one crate that import each other, directly or in a longer circle.

Usage: scripts/module-cycles.py [CRATE_DIR...]   (default: every crates/*)

A file depends on another when it names an item of the other's module through `crate::…` or
`super::…` (test modules at the end of a file are left out). A parent module (lib.rs, main.rs,
mod.rs or `a.rs` beside `a/`) naming its own descendants does not count: declaring, wiring and
re-exporting its children is what a parent is for. Exits 1 when a circle is found.

Hand-written because no maintained Rust tool reports cycles between the modules of one crate
(cargo-modules draws them but needs a nightly-matched build and prints a graph, not a verdict).
Exemptions are listed in ALLOWED with the reason.
"""

import pathlib
import re
import sys

# (crate, frozenset of module paths) -> why the circle is accepted.
ALLOWED = {
    ("server", frozenset({"auth", "state"})): "the shared state holds the caches of authentication "
    "and authentication reads the state; the issue that asked for one-way modules allows state <-> auth "
    "when explained (crates/server/src/state.rs)",
}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def module_of(src: pathlib.Path, file: pathlib.Path) -> tuple:
    rel = file.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def strip_tests(text: str) -> str:
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def references(text: str, here: tuple) -> set:
    """Module paths (tuples) named from `here`."""
    found = set()
    # In `a.rs` and in `a/mod.rs` alike, `super` is the module that declares `a`.
    base_for_super = here[:-1]

    def add(prefix: tuple, path: str):
        parts = [p for p in path.split("::") if p and p != "self"]
        found.add(prefix + tuple(parts))

    for m in re.finditer(r"\bcrate::\{([^}]*)\}", text):
        for item in m.group(1).split(","):
            item = item.strip().split(" as ")[0]
            if item:
                add((), item)
    for m in re.finditer(rf"\bcrate((?:::{IDENT})+)", text):
        add((), m.group(1))
    for m in re.finditer(rf"\b((?:super::)+)\{{([^}}]*)\}}", text):
        ups = m.group(1).count("super::")
        base = base_for_super[: len(base_for_super) - (ups - 1)] if ups > 1 else base_for_super
        for item in m.group(2).split(","):
            item = item.strip().split(" as ")[0]
            if item:
                add(tuple(base), item)
    for m in re.finditer(rf"\b((?:super::)+)({IDENT}(?:::{IDENT})*)", text):
        ups = m.group(1).count("super::")
        base = base_for_super[: len(base_for_super) - (ups - 1)] if ups > 1 else base_for_super
        add(tuple(base), m.group(2))
    return found


def resolve(path: tuple, modules: set) -> tuple:
    """The longest prefix of `path` that is a module."""
    for n in range(len(path), -1, -1):
        if path[:n] in modules:
            return path[:n]
    return ()


def cycles_in(crate: pathlib.Path) -> list:
    src = crate / "src"
    files = sorted(src.rglob("*.rs"))
    mods = {module_of(src, f): f for f in files}
    modules = set(mods)
    graph = {m: set() for m in modules}
    for m, f in mods.items():
        text = strip_tests(f.read_text())
        for ref in references(text, m):
            target = resolve(ref, modules)
            if target == m:
                continue
            if target[: len(m)] == m:  # a parent naming its descendant
                continue
            graph[m].add(target)
    # Strongly connected components (Tarjan).
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps, graph


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    crates = [pathlib.Path(a) for a in sys.argv[1:]] or sorted((root / "crates").iterdir())
    bad = 0
    for crate in crates:
        if not (crate / "src").is_dir():
            continue
        comps, graph = cycles_in(crate)
        for comp in comps:
            names = frozenset("::".join(m) or "(root)" for m in comp)
            key = (crate.name, names)
            if key in ALLOWED:
                continue
            bad += 1
            print(f"{crate.name}: modules in a circle: {', '.join(sorted(names))}")
            for m in sorted(comp):
                deps = sorted("::".join(d) or "(root)" for d in graph[m] if d in comp)
                print(f"    {'::'.join(m) or '(root)'} -> {', '.join(deps)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
