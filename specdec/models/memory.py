"""Will it fit? The bytes a checkpoint and a KV cache need, against the memory available.

Checked before anything large is allocated, so that an over-size model or cache is refused
with one clear line (a ResourceError: exit code 2) instead of the machine swapping, or the
process being killed half-way through a load.

- **Available** is the smallest of what the kernel reports (`MemAvailable`) and what the
  process's cgroup still allows (v2 `memory.max` - `memory.current`, or v1's limit - usage);
  on CUDA, the device's free memory. Where none is known, nothing is refused.
- **A checkpoint's load** needs its weights as stored (read whole by safetensors) plus, for
  float32 weights, FP32_COPIES float32 copies of every parameter; for int8 or int4 weights,
  the fp32 embedding, QUANT_BYTES a parameter (kept and packed), the rounding's temporaries and SLACK
  (`load_bytes`). The shapes come from the safetensors headers, so nothing is read first. A GGUF
  file's load holds the file (memory-mapped, its pages brought in as tensors are read) and
  every parameter dequantized to float32, from the tensor shapes in its header (`gguf_sizes`),
  where a folder's holds its weights as stored.
- **A KV cache** needs 2 x layers x rows x kv_heads x max_len x head_dim elements; it is
  zero-filled when allocated, so all of it is touched at once.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import CheckpointError, ResourceError
from .gguf_file import GGUFCheckpoint, is_gguf, read_gguf

# float32 copies of the parameters at the peak of a float32 CPU load, beyond the stored weights:
# the module, into which the stored tensors are copied one by one, and the compiled decoder's
# packed weights. Measured peak RSS = stored + 2.10 copies (bundled target) and 1.79 (random
# Qwen2.5-0.5B shape); 2.5 leaves a margin.
FP32_COPIES = 2.5
# An int8 load rounds each stored tensor as it is read: its fp32 temporaries are at most
# ROUNDING_TEMPS copies of the largest matrix (the embedding-sized lm_head), and SLACK covers
# what the allocator keeps of them on a small model (peak 217 MB for the bundled target,
# against 128 MB of tensors). tests/models/test_memory.py checks both estimates' bounds.
ROUNDING_TEMPS = 2
SLACK = 128 << 20
# bytes a quantized parameter takes twice over (the module's copy and the packed one): int8
# 1 + 1 (its per-row scales are negligible); int4 half a byte plus a 4-byte scale per 32, twice
QUANT_BYTES = {"int8": 2.0, "int4": 2 * (0.5 + 4 / 32)}


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None           # "max": no limit


def host_available() -> int | None:
    """Bytes this process may still allocate on the host; None where nothing is known."""
    known = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                known.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        lim, used = _read_int(limit), _read_int(usage)
        if lim is not None and used is not None and lim < 1 << 60:     # v1 reports "no limit" as ~2^63
            known.append(max(0, lim - used))
    return min(known) if known else None


def available(device: torch.device) -> int | None:
    """Bytes free for new tensors on `device` (host memory for the CPU)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return host_available()


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def require(need: int, what: str, fix: str, device: torch.device) -> None:
    """Raise ResourceError when `need` bytes for `what` exceed what `device` has free."""
    have = available(device)
    if have is not None and need > have:
        where = "on the GPU" if device.type == "cuda" else "in host memory"
        raise ResourceError(f"{what} needs about {gib(need)}, but only {gib(have)} is available {where}; {fix}")


def gguf_sizes(ck: GGUFCheckpoint) -> tuple[int, int]:
    """(parameters, bytes the read holds) of a GGUF file: the file itself, and the float32
    copy of every parameter that dequantization makes (4 bytes each)."""
    return ck.numel, ck.path.stat().st_size + 4 * ck.numel


def checkpoint_bytes(path: Path) -> tuple[int, int] | None:
    """(parameters, bytes as stored) from the safetensors headers of checkpoint `path`, or the
    header of a GGUF file (`gguf_sizes`); None if they cannot be read (the load then reports
    what is wrong)."""
    from safetensors import safe_open
    if is_gguf(path):
        try:
            return gguf_sizes(read_gguf(path))
        except CheckpointError:
            return None
    index = path / "model.safetensors.index.json"
    try:
        files = ([path / "model.safetensors"] if not index.exists() else
                 [path / f for f in sorted(set(json.loads(index.read_text())["weight_map"].values()))])
        numel = 0
        for f in files:
            with safe_open(str(f), framework="pt") as st:
                for name in st.keys():
                    n = 1
                    for d in st.get_slice(name).get_shape():
                        n *= d
                    numel += n
        return numel, sum(f.stat().st_size for f in files)
    except Exception:                                       # noqa: BLE001 - any unreadable header
        return None


def load_bytes(path: Path, weights: str, embed_numel: int,
               sizes: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """(bytes a CPU load of checkpoint `path` needs at its peak, parameters), or None when its
    headers cannot be read; `embed_numel`: vocabulary x hidden size (the module docstring);
    `sizes`: `checkpoint_bytes(path)` where the caller has it already."""
    sizes = sizes or checkpoint_bytes(path)
    if sizes is None:
        return None
    numel, stored = sizes
    if weights in QUANT_BYTES:
        return int(stored + 4 * embed_numel + QUANT_BYTES[weights] * numel + 4 * ROUNDING_TEMPS * embed_numel
                   + SLACK), numel
    return int(stored + FP32_COPIES * 4 * numel), numel


def check_checkpoint(path: Path, device: str, weights: str = "float32", embed_numel: int = 0,
                     sizes: tuple[int, int] | None = None) -> None:
    """Refuse to load checkpoint `path` (a folder or a GGUF file) with `weights` ("float32",
    "int8", "int4") if its load would not fit (see the module docstring); `sizes`: as for
    `load_bytes`."""
    got = load_bytes(path, weights, embed_numel, sizes)
    if got is None:
        return
    need, numel = got
    require(need, f"loading {path.name} ({numel / 1e9:.2f}B parameters, {weights} weights)",
            "use a smaller model or free memory", torch.device("cpu"))
    if torch.device(device).type == "cuda":
        require(2 * 4 * numel, f"{path.name}'s weights", "use a smaller model", torch.device(device))


def cache_bytes(num_layers: int, rows: int, kv_heads: int, max_len: int, head_dim: int, dtype) -> int:
    return 2 * num_layers * rows * kv_heads * max_len * head_dim * dtype.itemsize
