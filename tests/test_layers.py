"""The layer rule, kept by the code: imports point to lower tiers only, no module cycle, and
docs/architecture.md shows the graph as it is."""
from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools" / "import_graph.py")
graph_tool = importlib.util.module_from_spec(spec)
sys.modules["import_graph"] = graph_tool
spec.loader.exec_module(graph_tool)


def test_imports_point_down_and_there_is_no_cycle():
    assert graph_tool.violations(graph_tool.module_graph()) == []


def test_the_checker_sees_upward_edges_function_level_imports_and_cycles():
    g = graph_tool.module_graph()
    g["specdec.engine.engine"] = g["specdec.engine.engine"] | {"specdec.adaptive.policy"}
    g["specdec.costs.rounds"] = g["specdec.costs.rounds"] | {"specdec.costs.cost_model"}
    bad = graph_tool.violations(g)
    assert any("engine (tier 5) may not import adaptive" in b for b in bad)
    assert any(b.startswith("cycle:") and "specdec.costs.rounds" in b for b in bad)
    # a deferred import inside a function is an edge too
    assert "specdec.engine.engine" in graph_tool.imports(ROOT / "specdec" / "adaptive" / "calibrate.py")


def test_architecture_doc_shows_the_real_graph():
    assert graph_tool.doc_block() == graph_tool.render(graph_tool.module_graph()), \
        "run: python tools/import_graph.py --write"


def test_the_engine_neither_imports_nor_measures_with_the_cost_model():
    g = graph_tool.module_graph()
    for mod in ("specdec.engine.engine", "specdec.engine.policy", "specdec.engine.round"):
        assert not {d for d in g[mod] if d.startswith(("specdec.adaptive", "specdec.costs.cost_model"))}


RUNNER = {"specdec/models/runner.py"}      # the one place the fast path is chosen


def _native_touches(path: Path) -> list[str]:
    """`x.native` attributes and getattr(x, "native", ...) probes in a file, as 'file:line'."""
    hits, name = [], path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("native", "graphs"):
            hits.append(f"{name}:{node.lineno}")
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr")
                and len(node.args) > 1 and getattr(node.args[1], "value", None) in ("native", "graphs")):
            hits.append(f"{name}:{node.lineno}")
    return hits


def test_only_the_runner_touches_the_fast_path():
    """The compiled decoder and the CUDA graphs are the runner's (models/runner.py): no other
    module reads `.native` or `.graphs` or probes for them; the native package is behind it."""
    hits = []
    for path in sorted((ROOT / "specdec").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in RUNNER or rel.startswith("specdec/models/native/") or rel == "specdec/models/cuda_graphs.py":
            continue
        hits += _native_touches(path)
    assert hits == []


def test_the_native_package_is_imported_by_the_runner_alone():
    g = graph_tool.module_graph()
    users = {m for m, deps in g.items() if any(d.startswith("specdec.models.native") for d in deps)
             and not m.startswith("specdec.models.native")}
    # linear.py asks whether the decoder builds here (choosing a kernel), loader.py why not
    assert users <= {"specdec.models.runner", "specdec.models.linear", "specdec.models.loader"}, users


def test_the_native_checker_sees_a_probe(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text("def f(m):\n    return getattr(m, 'native', None) or m.native\n")
    assert _native_touches(f) == ["probe.py:2", "probe.py:2"]


ROW_MOVERS = {"specdec/models/kv_cache.py:KVCache.move_row", "specdec/engine/rows.py:RowTable.move"}


def test_rows_move_in_two_places():
    """Compacting rows is one operation: the row table moves every owner's per-row state
    (`RowSlots` and KV caches, declared by `row_state()`), and the cache moves its own rows.
    No proposer or policy defines a row mover of its own."""
    movers = set()
    for path in sorted((ROOT / "specdec").rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            if isinstance(cls, ast.ClassDef):
                movers |= {f"{path.relative_to(ROOT)}:{cls.name}.{f.name}" for f in cls.body
                           if isinstance(f, ast.FunctionDef) and f.name in ("move_row", "move", "move_rows")}
    assert movers == ROW_MOVERS
