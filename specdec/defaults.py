"""Where the bundled default models live, and the cache.

The bundled checkpoints are package data (`specdec/bundled/`: target/, draft/, draft-distill/,
tokenizer.json), found with importlib.resources, so an editable install, `pip install .` and a
wheel all find them. $SPECDEC_MODELS, where set, names another folder of the same layout.
"""
from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

BUNDLED = "bundled"            # the package-data folder of the bundled checkpoints, inside specdec/
MODELS_ENV = "SPECDEC_MODELS"  # the environment variable that overrides it


def bundled_dir() -> Path:
    """The bundled checkpoints' folder inside the installed package (a real directory: pip
    installs packages unpacked, and safetensors maps files from disk)."""
    return Path(str(files("specdec").joinpath(BUNDLED)))


MODELS_DIR = Path(os.environ.get(MODELS_ENV) or bundled_dir())


def default_target() -> Path:
    return MODELS_DIR / "target"


def default_draft() -> Path:
    """The better of the two bundled drafts, as measured and recorded in
    default_draft.txt (see specdec/bundled/README.md); draft/ otherwise."""
    marker = MODELS_DIR / "default_draft.txt"
    if marker.exists():
        name = marker.read_text().strip()
        if (MODELS_DIR / name / "config.json").exists():
            return MODELS_DIR / name
    return MODELS_DIR / "draft"


def default_parallel_draft() -> Path:
    """The bundled parallel draft (`--method parallel`'s draft for the bundled target), where it
    is present; else the default draft, which the method refuses for having no mask token."""
    d = MODELS_DIR / "draft-parallel"
    return d if (d / "config.json").exists() else default_draft()


def default_head() -> Path | None:
    """The bundled EAGLE head (trained for the bundled target), where it is present."""
    head = MODELS_DIR / "eagle"
    return head if (head / "config.json").exists() else None


def cache_dir() -> Path:
    """Where measured tables and corpus token streams are cached ($SPECDEC_CACHE or ~/.cache/specdec)."""
    d = Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))
    d.mkdir(parents=True, exist_ok=True)
    return d
