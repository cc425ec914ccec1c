"""Preallocated KV cache with an explicit per-row length. Rollback is a truncate."""
from __future__ import annotations

import torch

from .memory import cache_bytes, require


class KVCache:
    """Keys and values for `rows` sequences of up to `max_len` positions.

    Layout per layer: k, v of shape (rows, kv_heads, max_len, head_dim).
    `lengths` lives on the host: the engine always knows how many tokens each row
    holds, so building positions and masks never needs a device sync.
    The active batch is always rows [0, n); `move_row` compacts finished rows away.
    """

    def __init__(self, num_layers: int, rows: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype=torch.float32, device="cpu"):
        shape = (rows, kv_heads, max_len, head_dim)
        require(cache_bytes(num_layers, rows, kv_heads, max_len, head_dim, dtype),
                f"a KV cache of {rows} rows x {max_len} positions", "lower --max-batch or --max-model-len",
                torch.device(device))
        # zeros, not empty: masked positions are multiplied by 0 and must never be NaN.
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.lengths = [0] * rows
        self.num_rows, self.max_len = rows, max_len
        self.is_view = False

    def truncate(self, row: int, length: int) -> None:
        """Keep the first `length` positions of `row` (stale entries are masked, never read)."""
        if not 0 <= length <= self.lengths[row]:
            raise ValueError(f"cannot truncate row {row} of length {self.lengths[row]} to {length}")
        self.lengths[row] = length

    def advance(self, row: int, n: int) -> None:
        if self.lengths[row] + n > self.max_len:
            raise ValueError(f"row {row} would exceed the cache length {self.max_len}")
        self.lengths[row] += n

    def keep_path(self, paths: list[list[int]]) -> None:
        """After a tree round: row b's accepted nodes sit at slots lengths[b] + paths[b][t]
        (increasing); move them to lengths[b] + t, the places a chain would have filled. One
        gather and one scatter per layer for all rows; nothing moves for a chain's prefix."""
        rows, src, dst = [], [], []
        for b, path in enumerate(paths):
            for t, slot in enumerate(path):
                if slot != t:
                    rows.append(b)
                    src.append(self.lengths[b] + slot)
                    dst.append(self.lengths[b] + t)
        if not rows:
            return
        dev = self.k[0].device
        r, s, d = (torch.tensor(x, device=dev) for x in (rows, src, dst))
        for k, v in zip(self.k, self.v):
            k[r, :, d] = k[r, :, s]                                    # (n, Hkv, D) gathered first
            v[r, :, d] = v[r, :, s]

    def move_row(self, src: int, dst: int) -> None:
        """Copy row `src` into row `dst` (used to keep the active rows contiguous)."""
        if src != dst:
            n = self.lengths[src]
            for k, v in zip(self.k, self.v):
                k[dst, :, :n].copy_(k[src, :, :n])
                v[dst, :, :n].copy_(v[src, :, :n])
            self.lengths[dst] = n
        self.lengths[src] = 0

    def reset(self, row: int) -> None:
        self.lengths[row] = 0

    def rows(self, start: int, end: int) -> "KVCache":
        """A view of rows [start, end) sharing storage (lengths are a copy: read-only use)."""
        view = object.__new__(KVCache)
        view.k = [t[start:end] for t in self.k]
        view.v = [t[start:end] for t in self.v]
        view.lengths = self.lengths[start:end]
        view.num_rows, view.max_len = end - start, self.max_len
        view.is_view = True
        return view
