#!/usr/bin/env python3
"""Imports run downward and files stay small, in every crate of the workspace.

For each crate's `src/`, every file is a node; file A has an edge to file B when A names an
item of B: through `crate::...`, `super::...`, `self::...`, or a child module it declares
(`mod x;` then `x::...`). A path resolves to the deepest module file it names, so
`crate::planner::Planner` is an edge to `planner/mod.rs` (or `planner.rs`) when `Planner` is
defined or re-exported there. Test code is left out: files named `tests.rs` or under a
`tests/` folder, and an inline `#[cfg(test)] mod ... { }` block to the end of its file.

Fails when the edges of one crate form a circle (it prints each), or when a non-test source
file (a crate's `src/` or `benches/`) has more than MAX_LINES lines.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MAX_LINES = 500
ROOT = Path(__file__).resolve().parent.parent

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP_RE = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{")
MOD_DECL_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
TEST_MOD_RE = re.compile(r"^\s*#\[cfg\(test\)\]\s*\n\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", re.M)
COMMENT_RE = re.compile(r"//[^\n]*")


def is_test_file(rel: Path) -> bool:
    return rel.name == "tests.rs" or "tests" in rel.parts[:-1]


def module_path(src: Path, file: Path) -> tuple[str, ...]:
    rel = file.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def strip(text: str) -> str:
    m = TEST_MOD_RE.search(text)
    if m:
        text = text[: m.start()]
    return COMMENT_RE.sub("", text)


def group_members(text: str, start: int) -> list[str]:
    """The first path segment of each member of a `use x::{...}` group starting at `start`."""
    depth, i, buf, out = 1, start, "", []
    while i < len(text) and depth:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if depth == 1 and c in ",}" or depth == 0:
            seg = buf.strip().split("::")[0].strip("{} \n")
            if seg:
                out.append(seg)
            buf = ""
        elif depth == 1:
            buf += c
        i += 1
    return out


PUB_USE_RE = re.compile(r"^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);", re.M)


def expand_use(tree: str) -> list[tuple[str, list[str]]]:
    """`a::{b::C, D as E}` as [(visible name, path segments)]."""
    tree = re.sub(r"\s+as\s+", " as ", tree.strip())
    tree = re.sub(r"\s*(::|,|\{|\})\s*", r"\1", tree)
    out: list[tuple[str, list[str]]] = []

    def walk(prefix: list[str], t: str) -> None:
        if t.endswith("}") and "{" in t:
            head, body = t.split("{", 1)
            depth, buf, items = 0, "", []
            for c in body[:-1]:
                depth += (c == "{") - (c == "}")
                if c == "," and depth == 0:
                    items.append(buf)
                    buf = ""
                else:
                    buf += c
            items.append(buf)
            for item in filter(None, items):
                walk(prefix + [s for s in head.split("::") if s], item)
            return
        path, _, alias = t.partition(" as ")
        parts = [s for s in path.split("::") if s]
        if parts and parts[-1] not in ("self", "*"):
            out.append((alias or parts[-1], prefix + parts))

    walk([], tree)
    return out


def crate_edges(src: Path) -> tuple[dict, dict]:
    files = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src)
        if is_test_file(rel):
            continue
        files[module_path(src, f)] = f
    edges: dict[Path, set[Path]] = {f: set() for f in files.values()}

    # A name a module re-exports (`pub use child::X;`) resolves to where it comes from, so
    # importing through a facade is not an edge to the facade.
    reexports: dict[tuple[str, ...], dict[str, tuple[str, ...]]] = {}
    for mp, f in files.items():
        table = reexports.setdefault(mp, {})
        for m in PUB_USE_RE.finditer(strip(f.read_text())):
            for visible, parts in expand_use(m.group(1)):
                kw = parts[0]
                base = () if kw == "crate" else mp[:-1] if kw == "super" else mp
                rest = parts[1:] if kw in ("crate", "super", "self") else parts
                table[visible] = base + tuple(rest)

    def resolve(parts: tuple[str, ...], depth: int = 0) -> Path | None:
        for n in range(len(parts), -1, -1):
            if parts[:n] in files:
                via = reexports.get(parts[:n], {}).get(parts[n]) if n < len(parts) else None
                if via is not None and depth < 8 and via != parts[: n + 1]:
                    return resolve(via + parts[n + 1 :], depth + 1)
                return files[parts[:n]]
        return None

    for mp, f in files.items():
        text = strip(f.read_text())
        is_dir_mod = f.name in ("mod.rs", "lib.rs", "main.rs")
        here = mp if is_dir_mod else mp  # `self::` names this module
        parent = mp[:-1]
        children = set(MOD_DECL_RE.findall(text))

        def base(kw: str) -> tuple[str, ...]:
            return () if kw == "crate" else parent if kw == "super" else here

        def add(parts: tuple[str, ...]) -> None:
            target = resolve(parts)
            if target is not None and target != f:
                edges[f].add(target)

        for m in PATH_RE.finditer(text):
            add(base(m.group(1)) + tuple(s for s in m.group(2).split("::") if s))
        for m in USE_GROUP_RE.finditer(text):
            prefix = base(m.group(1)) + tuple(s for s in m.group(2).split("::") if s)
            for seg in group_members(text, m.end()):
                if seg not in ("self", "*"):
                    add(prefix + (seg,))
        for child in children:
            if re.search(rf"(?<![A-Za-z0-9_:]){child}::", text):
                add(mp + (child,))
    return files, edges


def cycles(edges: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: Path) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def main() -> int:
    failed = False
    for src in sorted(ROOT.glob("crates/*/src")):
        _, edges = crate_edges(src)
        for comp in cycles(edges):
            failed = True
            names = [str(p.relative_to(ROOT)) for p in comp]
            print(f"import circle in {src.parent.name}: " + ", ".join(names))
            for a in comp:
                back = sorted(str(b.relative_to(src)) for b in edges[a] if b in comp)
                print(f"    {a.relative_to(src)} -> {', '.join(back)}")
    for folder in ("src", "benches"):
        for f in sorted(ROOT.glob(f"crates/*/{folder}/**/*.rs")):
            rel = f.relative_to(f.parents[len(f.relative_to(ROOT).parts) - 4])
            if is_test_file(rel):
                continue
            n = sum(1 for _ in f.open())
            if n > MAX_LINES:
                failed = True
                print(f"{f.relative_to(ROOT)}: {n} lines (at most {MAX_LINES} outside tests)")
    if failed:
        print("module graph: split the file, or move the shared item into a module both use")
        return 1
    print(f"module graph: no import circles, no source file over {MAX_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
