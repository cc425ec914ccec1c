"""The third-party training corpus: licence stripping, test folders, deduplication, and the
refusals (an installed package, no saved run to resume). No network: wheels are built here."""
import zipfile

import pytest

from specdec.cli import main
from specdec.train.packages import (PACKAGES, CorpusError, digest, fetch_wheels, package_texts,
                                    strip_licence, wheel_sources)


def test_a_leading_licence_comment_is_stripped_and_other_comments_stay():
    src = "#!/usr/bin/env python\n# Copyright (c) 2020 Someone\n# MIT License\n\nimport os\n# keep me\n"
    assert strip_licence(src) == "#!/usr/bin/env python\nimport os\n# keep me\n"
    plain = "# Helpers for parsing dates.\nimport re\n"
    assert strip_licence(plain) == plain
    late = "import os\n# Copyright later in the file is code's business\n"
    assert strip_licence(late) == late


def _wheel(path, files):
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_wheel_sources_skip_tests_and_non_python(tmp_path):
    w = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl", {
        "pkg/core.py": "x = 1\n", "pkg/tests/test_core.py": "assert 1\n",
        "pkg/migrations/0001.py": "ops = []\n", "pkg/data.json": "{}", "pkg-1.0.dist-info/METADATA": "m"})
    assert [name for name, _ in wheel_sources(w)] == ["pkg/core.py"]


def test_package_texts_are_deduplicated_and_disjoint_from_the_excluded(tmp_path):
    a = _wheel(tmp_path / "a-1.0-py3-none-any.whl", {"a/x.py": "# Copyright A\nx = 1\n", "a/y.py": "y = 2\n",
                                                    "a/empty.py": "\n"})
    b = _wheel(tmp_path / "b-1.0-py3-none-any.whl", {"b/x.py": "x = 1\n", "b/z.py": "z = 3\n"})
    texts = package_texts([a, b], exclude={digest("z = 3\n")})
    assert texts == ["x = 1\n", "y = 2\n"]


def test_an_installed_package_is_refused(tmp_path):
    with pytest.raises(CorpusError, match="installed"):
        fetch_wheels(tmp_path, packages=(("numpy", "0.0"),))


def test_the_pinned_packages_are_not_dependencies():
    import importlib.metadata
    for name, _ in PACKAGES:
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version(name)


def test_resume_needs_a_saved_run_and_a_saved_run_needs_resume(tmp_path, capsys):
    assert main(["train", "target", "--work", str(tmp_path), "--resume", "--corpus", "stdlib"]) == 2
    assert "no saved run" in capsys.readouterr().err
    (tmp_path / "state.pt").write_bytes(b"")
    assert main(["train", "target", "--work", str(tmp_path), "--corpus", "stdlib"]) == 2
    assert "--resume" in capsys.readouterr().err
