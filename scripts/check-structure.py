#!/usr/bin/env python3
"""Fails when a file of a crate imports, directly or through other files, a
file that imports it back: an import circle.

Each `.rs` file under `<crate>/src` is a module. An edge A -> B means A names a
path (`use crate::x::y`, `crate::x::y(…)`, `super::z`, `self::w`) that resolves
to module B (the deepest module file the path reaches). A module naming its own
descendants is not counted: a parent declares and re-exports its children, and
children use what the parent shares; circles are between separate parts.

Usage: scripts/check-structure.py [crate dir …]   (default: engine app server)
Exit code 1 when any circle is found, with each circle printed.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")
USE_GROUP_RE = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def modules(src: str) -> dict:
    """Module path (tuple) -> file path."""
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            out[tuple(parts)] = os.path.join(dirpath, f)
    return out


def resolve(mods: dict, here: tuple, is_dir_module: bool, anchor: str, rest: list) -> tuple:
    if anchor == "crate":
        base = ()
    else:
        # `self` is this module; `super` its parent (each extra `super` one more up).
        base = here
        if anchor == "super":
            base = base[:-1]
        while rest and rest[0] == "super":
            base = base[:-1]
            rest = rest[1:]
    path = base
    best = base if base in mods else None
    for seg in rest:
        path = path + (seg,)
        if path in mods:
            best = path
        else:
            break
    return best


def edges_of(mods: dict, here: tuple, text: str) -> set:
    text = strip_comments(text)
    found = set()
    # Grouped imports: `use super::{a::X, b};` expands to each member.
    for m in USE_GROUP_RE.finditer(text):
        anchor, prefix, group = m.group(1), m.group(2), m.group(3)
        prefix_parts = [p for p in prefix.split("::") if p]
        for item in re.split(r",", re.sub(r"\{[^}]*\}", "", group)):
            item = item.strip().split(" as ")[0].strip()
            if not item or item == "self":
                found.add(resolve(mods, here, False, anchor, prefix_parts))
                continue
            found.add(resolve(mods, here, False, anchor, prefix_parts + [p for p in item.split("::") if p]))
    for m in PATH_RE.finditer(text):
        anchor = m.group(1)
        parts = [p for p in m.group(2).split("::") if p and p != "{"]
        found.add(resolve(mods, here, False, anchor, parts))
    return {t for t in found if t is not None and t != here and t[: len(here)] != here}


def circles(crate: str) -> list:
    src = os.path.join(ROOT, crate, "src")
    mods = modules(src)
    graph = {}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            graph[mod] = edges_of(mods, mod, f.read())
    # Tarjan's strongly connected components.
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    name = lambda m: os.path.relpath(mods[m], ROOT)
    return [[name(m) for m in comp] for comp in out]


def main() -> int:
    crates = sys.argv[1:] or ["engine", "app", "server"]
    bad = 0
    for crate in crates:
        for comp in circles(crate):
            bad += 1
            print(f"import circle in {crate}: " + " <-> ".join(comp))
    if bad:
        print(f"{bad} import circle(s): each file above reaches the others and is reached by them")
        return 1
    print("no import circles")
    return 0


sys.exit(main())
