"""The package is typed (py.typed, PEP 561): mypy passes on the example script and on the API
modules, and does catch a wrong use of the API (so the check is not vacuous)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "quickstart.py"
API = [ROOT / "specdec" / "__init__.py", *sorted((ROOT / "specdec" / "api").glob("*.py"))]
MYPY_TIMEOUT_S = 120  # mypy checks specdec's modules in about 3 s; generous for a busy machine

# Third-party packages (torch above all) are not analysed, only specdec's own modules:
# their types reach the checked files, their own errors are not reported.
CONFIG = """\
[mypy]
follow_imports = skip
ignore_missing_imports = True

[mypy-specdec.*]
follow_imports = silent
"""

MISUSE = """\
from specdec import LLM, SamplingParams

llm = LLM(k=[1])
n: int = llm.generate("x", SamplingParams())[0].text
"""


def mypy(tmp_path: Path, *files: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    cfg = tmp_path / "mypy.ini"
    cfg.write_text(CONFIG)
    env = {**os.environ, "MYPYPATH": str(ROOT)}   # an editable install is an import hook mypy cannot see
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(cfg), "--cache-dir",
                           str(tmp_path / "cache"), *map(str, files)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=MYPY_TIMEOUT_S)


def test_the_package_is_marked_typed():
    assert (ROOT / "specdec" / "py.typed").is_file()


def test_mypy_passes_on_the_example_and_the_api(tmp_path):
    r = mypy(tmp_path, EXAMPLE, *API)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_catches_a_misuse(tmp_path):
    bad = tmp_path / "misuse.py"
    bad.write_text(MISUSE)
    r = mypy(tmp_path, bad)
    assert r.returncode == 1
    assert 'Argument "k" to "LLM"' in r.stdout and 'has type "str", variable has type "int"' in r.stdout
