"""The layer rule, kept by the code: imports point to lower tiers only, no module cycle, and
docs/architecture.md shows the graph as it is."""
from __future__ import annotations

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
