"""Where measured cost tables live: what identifies a model's cost, and the JSON cache.

A table is keyed by what sets a forward's cost on this machine: the architecture (config,
parameter count, layers used), dtype, linear kernel, device (CPU model), torch version and
thread count, and for the compiled decoder its build. Weights do not enter the key, so a retrained checkpoint of the same shape
reuses its table. A table measured while the machine was busy is marked so, and dropped
(re-measured) the first time it is loaded on a quiet machine.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .profiling import ModelProfile


def _cpu_name() -> str:
    """The CPU as benchmarks record it: the model name, which virtual machines often shorten
    to "AMD EPYC", plus family, model and vector ISA, which tell a Zen 3 from a Zen 4."""
    try:
        info = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
        flags = info.get("flags", "").split()
        isa = next((f for f in ("amx_tile", "avx512f", "avx2") if f in flags), "no avx2")
        return f"{info['model name']} (family {info.get('cpu family', '?')} model {info.get('model', '?')}, {isa})"
    except (OSError, KeyError):
        pass
    return platform.processor() or platform.machine()


def contended() -> bool:
    """More runnable tasks than cores over the last minute: someone else competes with us."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1)
    except OSError:
        return False


def model_identity(model, num_layers: int | None = None, device: str | None = None,
                   threads: int | None = None) -> dict:
    """What determines a model's forward cost here (weights' values do not)."""
    cfg = {k: v for k, v in asdict(model.config).items() if k != "extra"}
    dev = device or model.device.type
    ident = {"config": cfg, "params": sum(p.numel() for p in model.parameters()),
            "num_layers": num_layers, "dtype": str(model.lm_head.weight.dtype),
            "kernel": getattr(model.kernel, "name", "stock"), "device": dev,
            # the compiled decoder's build (source, flags, CPU): an edited decoder re-measures
            "kernel_build": getattr(getattr(model, "native", None), "build_id", None),
            "cpu": _cpu_name() if dev == "cpu" else torch.cuda.get_device_name(model.device),
            "torch": torch.__version__, "threads": threads or torch.get_num_threads()}
    return json.loads(json.dumps(ident))         # as it reads back from the cache file


def identity_hash(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def cache_path(identity: dict) -> Path:
    from ..defaults import cache_dir
    d = cache_dir() / "costs"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{identity_hash(identity)}.json"


@dataclass
class Source:
    """A model we can (re-)measure, and where its profile is cached."""
    model: object
    num_layers: int | None
    identity: dict
    profile: ModelProfile
    is_target: bool
    contended: bool = False        # some of the points were measured under contention

    def save(self) -> None:
        self.contended = self.contended or contended()
        path = cache_path(self.identity)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"identity": self.identity, "profile": self.profile.to_json(),
                                   "contended": self.contended}))
        tmp.replace(path)


def load_profile(identity: dict, l_ref: int, l_long: int) -> tuple[ModelProfile, bool]:
    """The cached profile and whether it was measured under contention. A table measured
    while the machine was busy is dropped (re-measured) once the machine is quiet."""
    path = cache_path(identity)
    try:
        d = json.loads(path.read_text())
        prof = ModelProfile.from_json(d["profile"])
        busy = bool(d.get("contended", False))
        if d["identity"] == identity and (prof.l_ref, prof.l_long) == (l_ref, l_long) \
                and not (busy and not contended()):
            return prof, busy
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return ModelProfile(l_ref, l_long), False
