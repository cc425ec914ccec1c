"""Third-party Python source for training: pinned wheels, fetched at training time only.

The standard library alone (about 3.4M tokens) is a small corpus for the bundled target.
Training adds the pure-Python source of a few large, well-kept packages that pip downloads
into the cache (wheels are zip files: nothing is installed, and nothing is committed). None
of them is a dependency of specdec or of its tests, so the code in the runtime's own
site-packages stays unseen and remains a fair test of generalisation; `fetch_wheels` refuses
a package that the running interpreter has installed. Test folders are skipped, files are
deduplicated (against each other and against every standard-library file, held out or
not), and a leading licence comment is stripped from each file.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from ..errors import SpecdecError

# name, version: large pure-Python code bases, none a dependency of the runtime or the tests
PACKAGES = (("Django", "5.1.4"), ("SQLAlchemy", "2.0.36"), ("Twisted", "24.11.0"))
# test suites are excluded from the standard library too; migrations are generated code
SKIP_DIRS = {"test", "tests", "testing", "__pycache__", "migrations"}

_LICENCE = re.compile(r"licen[cs]e|copyright|\(c\)", re.IGNORECASE)


class CorpusError(SpecdecError):
    """The third-party corpus could not be built (no registry access, or an installed package)."""


def strip_licence(text: str) -> str:
    """Drop the file's leading comment block (after a shebang or coding line) when it
    mentions a licence or copyright; any other text is returned unchanged."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and (lines[i].startswith("#!") or re.match(r"#.*coding[:=]", lines[i])):
        i += 1
    j = i
    while j < len(lines) and lines[j].lstrip().startswith("#"):
        j += 1
    if j > i and _LICENCE.search("".join(lines[i:j])):
        while j < len(lines) and not lines[j].strip():
            j += 1
        return "".join(lines[:i] + lines[j:])
    return text


def fetch_wheels(dest: Path, packages=PACKAGES) -> list[Path]:
    """Download each pinned wheel into `dest` (once; later calls reuse them)."""
    dest.mkdir(parents=True, exist_ok=True)
    wheels = []
    for name, version in packages:
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed is not None:
            raise CorpusError(f"{name} {installed} is installed in this interpreter; the training corpus "
                              f"must stay disjoint from the runtime's site-packages (uninstall it or "
                              f"train with --corpus stdlib)")
        found = _wheel_for(dest, name, version)
        if found is None:
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--dest", str(dest), f"{name}=={version}"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            found = _wheel_for(dest, name, version)
            if done.returncode != 0 or found is None:
                raise CorpusError(f"could not download {name}=={version} for the training corpus: "
                                  f"{done.stderr.strip()[-300:] or 'no wheel found'}")
        wheels.append(found)
    return wheels


def _wheel_for(dest: Path, name: str, version: str) -> Path | None:
    stem = f"{name.lower()}-{version}-"
    return next((p for p in sorted(dest.glob("*.whl")) if p.name.lower().startswith(stem)), None)


def wheel_sources(wheel: Path) -> list[tuple[str, str]]:
    """(member path, text) of the wheel's .py files outside test folders, sorted by path."""
    out = []
    with zipfile.ZipFile(wheel) as z:
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            parts = info.filename.split("/")
            if not info.filename.endswith(".py") or SKIP_DIRS.intersection(parts[:-1]):
                continue
            out.append((info.filename, z.read(info).decode("utf-8", errors="replace")))
    return out


def digest(text: str) -> str:
    return hashlib.sha256(text.strip().encode()).hexdigest()


def package_texts(wheels: list[Path], exclude: set[str]) -> list[str]:
    """The wheels' files, licence-stripped, each distinct text once and none whose digest is
    in `exclude` (the standard library's files); empty files are dropped."""
    seen, texts = set(exclude), []
    for wheel in wheels:
        for _, text in wheel_sources(wheel):
            text = strip_licence(text)
            key = digest(text)
            if text.strip() and key not in seen:
                seen.add(key)
                texts.append(text)
    return texts
