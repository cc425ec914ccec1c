"""Where the bundled default models live (models/ at the repository root)."""
from __future__ import annotations

import os
from pathlib import Path

MODELS_DIR = Path(os.environ.get("SPECDEC_MODELS", Path(__file__).resolve().parent.parent / "models"))


def default_target() -> Path:
    return MODELS_DIR / "target"


def default_draft() -> Path:
    """The better of the two bundled drafts, as measured and recorded in
    models/default_draft.txt (see models/README.md); models/draft otherwise."""
    marker = MODELS_DIR / "default_draft.txt"
    if marker.exists():
        name = marker.read_text().strip()
        if (MODELS_DIR / name / "config.json").exists():
            return MODELS_DIR / name
    return MODELS_DIR / "draft"


def cache_dir() -> Path:
    """Where measured tables and corpus token streams are cached ($SPECDEC_CACHE or ~/.cache/specdec)."""
    d = Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))
    d.mkdir(parents=True, exist_ok=True)
    return d
