"""The linear kernel of the eager path, chosen at load time.

The compiled decoder (models/native) runs the whole forward where it builds. Otherwise a
linear is stock `F.linear` (MKL) or oneDNN prepacked weights (`mkldnn._linear_pointwise`);
docs/performance.md gives what each costs over 1-16 rows.

A target model gets a row-invariant kernel wherever one exists (`exact=True`, oneDNN on
CPU): greedy speculation is lossless only if a position's logits do not depend on how many
positions share the forward, and stock MKL's do not. The choice is not timed, so every
process makes the same one. A draft only proposes, so its numerics cannot change the
output: it gets whichever kernel is faster on a representative shape (`exact=False`).

Exactness: the oneDNN path gives bit-identical rows for any M >= 2 (row i of an
M-row product does not depend on M). M = 1 takes a different kernel, so that path
pads single-row inputs to two rows. `row_invariant` records whether the chosen path
has this property; see docs/exactness.md.
"""
from __future__ import annotations

import functools
import os
import time

import torch
import torch.nn.functional as F


def _onednn_available(device: torch.device) -> bool:
    return (device.type == "cpu" and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class LinearKernel:
    """A way of computing x @ W^T (+ b). `pack` prepares a weight once; `__call__` applies it."""
    name = "stock"
    min_rows = 1          # pad inputs with fewer rows than this
    row_invariant = False  # row i of the output independent of the number of rows?

    def pack(self, weight: torch.Tensor):
        return weight

    def __call__(self, x: torch.Tensor, packed, bias):
        return F.linear(x, packed, bias)


class NativeKernel(LinearKernel):
    """The whole cached forward in the compiled decoder (models/native): row-invariant by
    construction. Its linears outside a cached forward (training, no cache) are stock."""
    name = "native"
    row_invariant = True
    whole_model = True


class OneDNNKernel(LinearKernel):
    name = "onednn"
    min_rows = 2
    row_invariant = True

    def pack(self, weight):
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), 16)

    def __call__(self, x, packed, bias):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        m = x2.shape[0]
        if m < self.min_rows:
            x2 = torch.cat([x2, x2.new_zeros(self.min_rows - m, x2.shape[1])])
        y = torch.ops.mkldnn._linear_pointwise(x2, packed, bias, "none", [], "")
        return y[:m].reshape(*shape[:-1], y.shape[-1])


def _native_available(device: torch.device) -> bool:
    from .native import load
    return device.type == "cpu" and load() is not None


def fallback_kernel(device: torch.device) -> LinearKernel:
    """The row-invariant linear kernel where there is one, else stock."""
    return OneDNNKernel() if _onednn_available(device) else LinearKernel()


KERNELS = {"stock": LinearKernel, "onednn": OneDNNKernel, "native": NativeKernel}


def _time(fn, reps=20) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


@functools.lru_cache(maxsize=None)
def choose_kernel(device_type: str = "cpu", d_in: int = 512, d_out: int = 1536,
                  exact: bool = True, native: bool = True) -> LinearKernel:
    """The compiled whole-model decoder where it builds (CPU), for targets and drafts alike.
    Otherwise exact: the row-invariant kernel where available (a target's forward); not
    exact: measure the available kernels at M = 1 and M = 5 and keep the cheapest (a draft's).

    `native=False` (`--no-compile`) leaves the compiled decoder out of the choice.
    `SPECDEC_LINEAR=stock|onednn|native` overrides all; stock gives up bitwise exactness.
    """
    forced = os.environ.get("SPECDEC_LINEAR")
    device = torch.device(device_type)
    if forced:
        if forced not in KERNELS:
            raise ValueError(f"SPECDEC_LINEAR must be one of {sorted(KERNELS)}")
        if (forced == "onednn" and not _onednn_available(device)) or \
                (forced == "native" and not _native_available(device)):
            return fallback_kernel(device)
        return KERNELS[forced]()
    if native and _native_available(device):
        return NativeKernel()
    if not _onednn_available(device):
        return LinearKernel()
    if exact:
        return OneDNNKernel()
    g = torch.Generator().manual_seed(0)
    w = torch.randn(d_out, d_in, generator=g)
    costs = {}
    for kernel in (LinearKernel(), OneDNNKernel()):
        try:
            packed = kernel.pack(w)
            t = 0.0
            for m in (1, 5):
                x = torch.randn(m, d_in, generator=g)
                t += _time(lambda: kernel(x, packed, None))
            costs[kernel.name] = (t, kernel)
        except RuntimeError:  # e.g. oneDNN built without this op on an unusual CPU
            continue
    return min(costs.values(), key=lambda c: c[0])[1]
