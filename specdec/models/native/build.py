"""Compile decoder.c (with its headers) once per machine and load it; None (and one warning) where that fails.

The shared library is cached under ~/.cache/specdec/native (or $SPECDEC_CACHE/native),
keyed by the source, the flags, the compiler and the CPU, so a second start loads it in
milliseconds. It is built for this CPU (-march=native): the key's CPU part keeps a cache
folder shared between machines from loading a library built for another.

OpenMP: the library links libgomp, and torch's wheel ships its own libgomp.so.1. Loaded
after torch, the dynamic linker resolves the name to the copy already in the process, so
both share one thread pool (two pools spinning on 2 cores would starve each other).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from .abi import declare

SOURCE = Path(__file__).with_name("decoder.c")
# -ffp-contract=off: no fused multiply-adds but the explicit ones, so every code path
# rounds the same way; -O3 -march=native: AVX2/FMA (or AVX-512 hosts' AVX2 subset).
FLAGS = ("-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-fPIC", "-shared", "-std=c11")


def cache_dir() -> Path:
    from ...defaults import cache_dir as root
    return root() / "native"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                yield line
    except OSError:
        yield platform.processor()


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    return None


def library_path(cc: str) -> Path:
    h = hashlib.sha256()
    for src in sorted(SOURCE.parent.glob("*.[ch]")):     # decoder.c and the headers it includes
        h.update(src.read_bytes())
    for part in (*FLAGS, cc, *sorted(set(_cpu_model()))):
        h.update(part.encode())
    return cache_dir() / f"decoder-{h.hexdigest()[:16]}.so"


def _compile(cc: str, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(f"specdec: compiling the native decoder ({Path(cc).name}) ...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        tmp_so = Path(tmp) / out.name
        r = subprocess.run([cc, *FLAGS, str(SOURCE), "-o", str(tmp_so), "-lm"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip()[-500:] or f"{cc} exited {r.returncode}")
        os.replace(tmp_so, out)      # atomic: a concurrent start sees no half-written file
    print(f"specdec: native decoder built in {time.perf_counter() - t0:.1f} s -> {out}",
          file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=None)
def load() -> ctypes.CDLL | None:
    """The compiled decoder, or None with one warning when no compiler or build works.
    `SPECDEC_NATIVE=0` turns it off (the eager PyTorch path runs instead)."""
    if os.environ.get("SPECDEC_NATIVE", "1") == "0":
        return None
    import torch  # noqa: F401  (load torch's libgomp first, so the library shares it)
    cc = _compiler()
    if cc is None:
        warnings.warn("specdec: no C compiler found; decoding runs the slower eager PyTorch path",
                      RuntimeWarning, stacklevel=2)
        return None
    path = library_path(cc)
    try:
        if not path.exists():
            _compile(cc, path)
        lib = declare(ctypes.CDLL(str(path)))   # argtypes, and the struct layouts checked
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        warnings.warn(f"specdec: native decoder unavailable ({str(e)[:200]}); decoding runs the "
                      "slower eager PyTorch path", RuntimeWarning, stacklevel=2)
        return None
    return lib
