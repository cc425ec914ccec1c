"""Every Python example in README.md and docs/*.md runs, so none can rot; so does examples/.

A ```python block runs; the blocks of one file share a namespace, in order, like a notebook
(so a later block may use an `llm` built earlier). A block that must not run (pseudo-code,
a sketch needing a server) is fenced ```python no-run.
"""
from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)
NO_RUN = "no-run"  # the fence word that marks a block as not to be run


def blocks(path: Path) -> list[tuple[int, str, bool]]:
    """(line, code, runs) for each ```python block of `path`."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(2), NO_RUN not in m.group(1).split())
            for m in FENCE.finditer(text)]


def test_the_readme_has_a_python_example_that_runs():
    assert any(runs for _, _, runs in blocks(ROOT / "README.md"))


@pytest.mark.parametrize("path", [p for p in DOCS if any(runs for _, _, runs in blocks(p))],
                         ids=lambda p: p.name)
def test_python_examples_run(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)          # an example that writes files writes them here
    namespace: dict = {"__name__": "__docs__"}
    for line, code, runs in blocks(path):
        if runs:
            exec(compile(code, f"{path.name}:{line}", "exec"), namespace)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_scripts_run(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out.strip()
