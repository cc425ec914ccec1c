"""Where measured cost tables live. A model's identity is what sets its forward's cost here
(architecture, layers used, dtype, kernel and compiled-decoder build, device and CPU, torch
version, threads), not its weights. A table written on a busy machine is measured again once
it is read on a quiet one."""
from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict
from pathlib import Path

import torch

from ..defaults import cache_dir
from ..cpu_load import others_busy


def _cpu_name() -> str:
    """The CPU's model name plus family, model and vector ISA (which tell a Zen 3 from a Zen 4
    where a virtual machine shortens the name to "AMD EPYC")."""
    try:
        info: dict[str, str] = {}
        for key, _, value in (line.partition(":") for line in Path("/proc/cpuinfo").read_text().splitlines()):
            info.setdefault(key.strip(), value.strip())
        isa = next((f for f in ("amx_tile", "avx512f", "avx2") if f in info.get("flags", "").split()), "no avx2")
        return f"{info['model name']} (family {info.get('cpu family', '?')} model {info.get('model', '?')}, {isa})"
    except (OSError, KeyError):
        return platform.processor() or platform.machine()


def contended(since=None) -> bool:
    """Someone else competed with us for the cores since `since` (a cpu_load.snapshot() taken
    before timing: only other processes' CPU time counts, not this one's), or, without it,
    competes now (sampled while we sleep)."""
    return others_busy(since)


def normal(obj):
    """`obj` as it reads back from a JSON file."""
    return json.loads(json.dumps(obj, default=str))


def model_identity(model, num_layers: int | None = None, device: str | None = None,
                   threads: int | None = None) -> dict:
    dev = device or model.device.type
    return normal({"config": {k: v for k, v in asdict(model.config).items() if k != "extra"},
                   "params": sum(p.numel() for p in model.parameters()), "num_layers": num_layers,
                   "dtype": str(model.model.norm.weight.dtype),
                   "weights": getattr(model, "weight_dtype", "float32"), "kernel": getattr(model.kernel, "name", "stock"),
                   "device": dev, "kernel_build": model.runner.build_id,
                   "cpu": _cpu_name() if dev == "cpu" else torch.cuda.get_device_name(model.device),
                   "torch": torch.__version__, "threads": threads or torch.get_num_threads()})


def identity_hash(identity: dict) -> str:
    return hashlib.sha256(json.dumps(normal(identity), sort_keys=True).encode()).hexdigest()[:20]


def cache_path(identity: dict, prefix: str = "") -> Path:
    """$SPECDEC_CACHE/costs/<prefix><hash>.json"""
    (cache_dir() / "costs").mkdir(parents=True, exist_ok=True)
    return cache_dir() / "costs" / f"{prefix}{identity_hash(identity)}.json"


def load(identity: dict, prefix: str = "") -> dict | None:
    """The table cached for `identity`; None if there is none, it is unreadable or another
    identity's, or it was measured on a busy machine and this one is quiet."""
    try:
        d = json.loads(cache_path(identity, prefix).read_text())
    except (OSError, ValueError):
        return None
    stale = not isinstance(d, dict) or d.get("identity") != normal(identity)
    return None if stale or (d.get("contended") and not contended()) else d


def save(identity: dict, table: dict, busy: bool, prefix: str = "") -> None:
    """Write `table` for `identity`, marked contended if `busy` (see `contended`)."""
    path = cache_path(identity, prefix)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**table, "identity": normal(identity), "contended": busy}))
    tmp.replace(path)
