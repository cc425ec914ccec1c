"""The training corpus: the running interpreter's standard library, split by file.

The split is deterministic: a file is held out when the first byte of the SHA-256 of
its path relative to the stdlib root is < 13 (about 5%). Test folders and
site-packages are excluded. The corpus is read at run time and never copied.
"""
from __future__ import annotations

import hashlib
import sysconfig
from functools import lru_cache
from pathlib import Path

EXCLUDE_PARTS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
HELD_OUT_BYTE = 13  # hash byte < 13/256 ~ 5.1%


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_held_out(relpath: str) -> bool:
    return hashlib.sha256(relpath.encode()).digest()[0] < HELD_OUT_BYTE


@lru_cache(maxsize=None)
def corpus_files(split: str = "train") -> tuple[str, ...]:
    """Relative paths of the stdlib .py files in `split` ('train' or 'heldout'), sorted."""
    if split not in ("train", "heldout"):
        raise ValueError("split must be 'train' or 'heldout'")
    root = stdlib_root()
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if EXCLUDE_PARTS.intersection(rel.split("/")[:-1]) or rel.startswith("test_"):
            continue
        if is_held_out(rel) == (split == "heldout"):
            out.append(rel)
    return tuple(out)


def read_text(rel: str) -> str:
    return (stdlib_root() / rel).read_text(encoding="utf-8", errors="replace")


def prose_text() -> str:
    """English prose from `pydoc_data/topics.py` (out of distribution for a code model)."""
    import pydoc_data.topics as t
    return "\n\n".join(t.topics[k] for k in sorted(t.topics))
