"""specdec's import graph, read from the code: the layer rule it must keep, and the diagram
in docs/architecture.md.

    python tools/import_graph.py            # print violations (exit 1 if any) and the diagram
    python tools/import_graph.py --write    # rewrite the diagram block in docs/architecture.md

Every import counts, module-level or inside a function: a deferred import is still a
dependency. A *unit* is a subpackage of specdec (engine, costs, ...) or a top-level module
(config, build, ...). Each unit has a tier; an import may only point to a lower tier, and
the module-level import graph (within a unit too) has no cycle.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "specdec"
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- import-graph:begin -->", "<!-- import-graph:end -->"

# Lower tiers know nothing of higher ones. Units on one tier never import each other.
TIERS = {
    "errors": 0, "defaults": 0, "cpu_load": 0, "repetition": 0,
    "config": 1, "batch": 1, "corpus": 1,
    "models": 2, "verify": 2,
    "costs": 3,
    "proposers": 4,
    "engine": 5,
    "adaptive": 6,
    "build": 7,
    "server": 8,
    "analysis": 9,
    "train": 10,                 # above analysis: training reads its chat data (analysis/conversations.py)
    "commands": 11, "api": 11,   # the command line and the Python API: siblings, above analysis
    "cli": 12, "__init__": 12, "__main__": 13,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def is_module(name: str) -> bool:
    p = PKG.parent / name.replace(".", "/")
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def imports(path: Path) -> set[str]:
    """The specdec modules `path` imports, anywhere in the file."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "specdec"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "specdec":
                continue
            # `from .pkg import module` names a module; `from .mod import name`, an attribute
            subs = {target + "." + a.name for a in node.names if is_module(target + "." + a.name)}
            out |= subs
            if len(subs) < len(node.names):
                out.add(target)
    out.discard(mod)
    return out


def module_graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in sorted(PKG.rglob("*.py"))}


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for src, dsts in graph.items():
        edges[unit(src)]  # noqa: B018  (every unit appears)
        for dst in dsts:
            if unit(dst) != unit(src) and dst != "specdec":
                edges[unit(src)].add(unit(dst))
    return dict(edges)


def violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for src, dsts in sorted(graph.items()):
        us = unit(src)
        if us not in TIERS:
            out.append(f"{src}: unit {us!r} has no tier in tools/import_graph.py")
            continue
        for dst in sorted(dsts):
            ud = unit(dst)
            if ud == us or dst == "specdec":
                continue
            if ud not in TIERS:
                out.append(f"{src} -> {dst}: unit {ud!r} has no tier")
            elif TIERS[ud] >= TIERS[us]:
                out.append(f"{src} -> {dst}: {us} (tier {TIERS[us]}) may not import {ud} (tier {TIERS[ud]})")
    out += [f"cycle: {' -> '.join(c)}" for c in cycles(graph)]
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v, counter=[0]):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
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
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def render(graph: dict[str, set[str]]) -> str:
    """The unit graph, highest tier first: each unit and what it imports."""
    edges = unit_graph(graph)
    units = sorted(edges, key=lambda u: (-TIERS.get(u, 99), u))
    lines = ["```", "tier  unit        imports"]
    for u in units:
        deps = sorted(edges[u], key=lambda d: (-TIERS.get(d, 99), d))
        lines.append(f"{TIERS.get(u, '?'):>4}  {u:<10}  {', '.join(deps) or '-'}")
    lines.append("```")
    return "\n".join(lines)


def doc_block() -> str:
    text = DOC.read_text()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()


def write_doc(graph) -> None:
    text = DOC.read_text()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:a] + "\n" + render(graph) + "\n" + text[b:])


if __name__ == "__main__":
    g = module_graph()
    if "--write" in sys.argv:
        write_doc(g)
    bad = violations(g)
    print("\n".join(bad) or "no upward edges, no cycles")
    print(render(g))
    sys.exit(1 if bad else 0)
