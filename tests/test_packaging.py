"""The bundled models travel with the package: they are package data found with
importlib.resources, $SPECDEC_MODELS overrides them, and a wheel built from the source
installs into a fresh venv and generates from a directory outside the checkout."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from importlib.resources import files
from pathlib import Path

import pytest

from specdec.defaults import BUNDLED, MODELS_DIR, bundled_dir

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ("target", "draft", "draft-distill", "draft-parallel")
CHECKPOINT_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                    "tokenizer_config.json")
HEAD_FILES = ("config.json", "model.safetensors", "README.md")   # a feature head folder's
WHEEL_LIMIT_MB = 100   # PyPI's default upload limit per file
STEP_TIMEOUT_S = 300   # each build/install/run step takes seconds; a stuck one fails the test
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # the installed commands decode on one core, as the suite does
# what a source checkout has that a build does not need (the tree is copied without them)
NOT_SOURCE = (".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".venv", ".mypy_cache",
              "out", "report", "results", "specdec-analysis", "checkpoints")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that points back into the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPECDEC_MODELS", "MYPYPATH")}
    return {**env, **extra}


def run(cmd: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=clean_env(**extra), capture_output=True, text=True,
                       timeout=STEP_TIMEOUT_S)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"
    return r


def test_the_bundled_models_are_package_data():
    data = files("specdec").joinpath(BUNDLED)
    assert Path(str(data)) == bundled_dir()
    if "SPECDEC_MODELS" not in os.environ:
        assert MODELS_DIR == bundled_dir()
    assert data.joinpath("tokenizer.json").is_file() and data.joinpath("default_draft.txt").is_file()
    for name in CHECKPOINTS:
        for f in CHECKPOINT_FILES:
            assert data.joinpath(name, f).is_file(), f"{name}/{f}"


def test_specdec_models_overrides_the_bundled_folder(tmp_path):
    probe = "from specdec.defaults import default_target, default_draft; print(default_target(), default_draft())"
    out = run([sys.executable, "-c", probe], cwd=tmp_path, SPECDEC_MODELS=str(tmp_path)).stdout.split()
    assert out == [str(tmp_path / "target"), str(tmp_path / "draft")]


def source_copy(dest: Path) -> Path:
    """The checkout's files (git's tracked and untracked-but-not-ignored ones where it is a
    git work tree; else the tree less build outputs), copied to `dest`."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True)
    if listed.returncode != 0:
        shutil.copytree(ROOT, dest, symlinks=True, ignore=shutil.ignore_patterns(*NOT_SOURCE))
        return dest
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / rel
        if not (src.exists() or src.is_symlink()):
            continue                                  # deleted in the work tree, not yet committed
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel, follow_symlinks=False)
    return dest


def running_site_dirs() -> list[str]:
    """The site-packages folders this interpreter imports from (its venv's, its base's where
    the venv shares them, the user's), never the checkout: a path line in a .pth file adds the
    folder alone, so the editable install's own .pth hooks there stay inactive."""
    import site
    dirs = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir() and not Path(d).is_relative_to(ROOT)]


def test_a_built_wheel_works_from_a_fresh_venv_outside_the_checkout(tmp_path):
    pytest.importorskip("build", reason="build is in the test extra: pip install -e '.[test]'")
    src = source_copy(tmp_path / "src")
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(src)],
        cwd=tmp_path)
    [wheel] = (tmp_path / "dist").glob("specdec-*.whl")
    assert wheel.stat().st_size < WHEEL_LIMIT_MB * 2 ** 20
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"specdec/py.typed", f"specdec/{BUNDLED}/tokenizer.json"} <= names
    assert all(f"specdec/{BUNDLED}/{c}/{f}" in names for c in CHECKPOINTS for f in CHECKPOINT_FILES)
    assert f"specdec/{BUNDLED}/draft-parallel/mask_embedding.safetensors" in names      # its mask token
    heads = [d.name for d in bundled_dir().iterdir()           # the bundled target's head, and any other shipped
             if "SpecdecFeatureHead" in ((d / "config.json").read_text() if (d / "config.json").is_file() else "")]
    assert "eagle" in heads and all(f"specdec/{BUNDLED}/{h}/{f}" in names for h in heads for f in HEAD_FILES)

    # The venv sees this environment's installed packages (torch and the other dependencies)
    # through a .pth file, whatever this interpreter is: the system's, a venv's or a conda
    # environment's (--system-site-packages would show a venv's *base* interpreter instead).
    # --without-pip: no venv-local setuptools hides the newer one torch requires; --no-index:
    # nothing is downloaded, a missing dependency fails here
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    py = venv / "bin" / "python"
    [site_dir] = run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     cwd=tmp_path).stdout.split()
    (Path(site_dir) / "_running_env.pth").write_text("".join(f"{p}\n" for p in running_site_dirs()))
    run([str(py), "-m", "pip", "install", "--no-index", "--quiet", str(wheel)], cwd=tmp_path)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.rmtree(src)                                # no source tree left to fall back on
    where = run([str(py), "-c", "import specdec, specdec.defaults as d; print(specdec.__file__); print(d.MODELS_DIR)"],
                cwd=outside).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where
    r = run([str(venv / "bin" / "specdec"), "generate", "--prompt", "def f(x):", "--max-new-tokens", "4"],
            cwd=outside, **ONE_THREAD)
    assert r.stdout.strip() and "mean_acceptance_length" in r.stderr
    api = ("from specdec import LLM, SamplingParams; "
           "print(LLM(max_batch=1).generate(['def f(x):'], SamplingParams(max_new_tokens=8))[0].text)")
    assert run([str(py), "-c", api], cwd=outside, **ONE_THREAD).stdout.strip()
