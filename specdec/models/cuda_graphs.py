"""`CudaGraphs`: a LlamaModel's cached forward replayed from captured CUDA graphs.

    graphs = CudaGraphs(model, exact=True)
    logits = graphs(tokens, positions, cache)      # (B, T) -> (B, T, V), same as model.eager

At batch 1 a small model's CUDA step is bound by kernel launches, not by the GPU: one
forward is hundreds of small kernels. A graph replays them with one launch. This is the
CUDA counterpart of the CPU's compiled decoder (models/native): the same switch
(`--compile`, default auto) turns it on.

Shapes. A graph is captured per (rows, T bucket, cache, layers, output) on first use and
replayed after; T is padded up to its bucket. A prefill (longer than the largest bucket,
or into a one-row view of the cache, as the engine's are) runs eagerly: its launches are
few against its work, and plain and speculative decoding share its shape. Padded positions
lie after the row's real ones, so the causal mask hides them from every real query, and
the K/V they write are overwritten before a real query could read them. Near the cache's
end they are clamped onto its last slot, which the engine's caches keep free
(engine.cache_length leaves a round's slack), so checking them needs no host sync.

Exactness. A target (`exact=True`) runs one shape for every decode and verify: T = K_MAX
+ 1 positions for every row of its cache, the free rows included (they write junk into
their own slots, which a request's prefill rewrites before anything reads them). So a
position's logits cannot depend on how many positions or rows shared its forward: cuBLAS
may pick another kernel for another shape, but for one shape it computes each row the same
way. Across caches of different row counts (engines with different max_batch) shapes
differ, and rows are not bitwise invariant there (measured: tests/cuda).
"""
from __future__ import annotations

import weakref

import torch

from ..config import K_MAX

EXACT_BUCKETS = (K_MAX + 1,)        # a target: one shape for every cached forward
DRAFT_BUCKETS = (1, 2, 4, 8, 16, 32)  # a draft: T = 1 decode, catch-up and short prefill chunks


class _Captured:
    """One graph with its static inputs and output."""

    def __init__(self, model, rows: int, T: int, cache, num_layers, hidden_only):
        dev = model.device
        self.tokens = torch.zeros(rows, T, dtype=torch.long, device=dev)          # (B, T)
        self.positions = torch.zeros(rows, T, dtype=torch.long, device=dev)       # (B, T)
        self.graph = torch.cuda.CUDAGraph()
        ref = weakref.ref(cache)          # the graph must not keep a finished engine's cache alive
        self._run = lambda: model.eager(self.tokens, self.positions, ref(), num_layers, hidden_only)
        self.out: torch.Tensor | None = None

    def capture(self) -> None:
        """Warm up on a side stream (cuBLAS plans, allocator), then record. The inputs are the
        first real call's, so the warm-up's cache writes are the real ones; the replay that
        follows rewrites the same values."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._run()
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(self.graph):
            self.out = self._run()

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        if self.out is None:
            self.capture()
        self.graph.replay()
        return self.out


class CudaGraphs:
    """Captured forwards of `model` on CUDA; see the module docstring for shapes and exactness."""

    def __init__(self, model, exact: bool):
        self.model, self.exact = model, exact
        self.buckets = EXACT_BUCKETS if exact else DRAFT_BUCKETS
        self.graphs: dict[tuple, _Captured] = {}

    def _forget(self, cache_id: int) -> None:
        """A cache was freed: its graphs wrote into it, so they go too (a new cache may reuse
        the id)."""
        for key in [k for k in self.graphs if k[2] == cache_id]:
            del self.graphs[key]

    def bucket(self, T: int) -> int:
        return next(b for b in self.buckets if b >= T)

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache,
                 num_layers: int | None = None, hidden_only: bool = False) -> torch.Tensor:
        B, T = tokens.shape                                                   # (B, T) each
        if T > self.buckets[-1] or cache.is_view:       # a prefill, into a one-row view: eager
            return self.model.eager(tokens, positions, cache, num_layers, hidden_only)
        Tp = self.bucket(T)
        Bp = cache.num_rows if self.exact else B       # a target runs every row of its cache
        last = positions[:, -1:]                                              # (B, 1)
        pad = (last + torch.arange(1, Tp - T + 1, device=positions.device)).clamp_(max=cache.max_len - 1)
        toks = torch.cat([tokens, tokens.new_zeros(B, Tp - T)], 1) if Tp > T else tokens      # (B, Tp)
        pos = torch.cat([positions, pad], 1) if Tp > T else positions                          # (B, Tp)
        if Bp > B:              # the free rows [B, Bp) score junk at positions 0..Tp-1 of their own
            toks = torch.cat([toks, toks.new_zeros(Bp - B, Tp)])                               # (Bp, Tp)
            pos = torch.cat([pos, torch.arange(Tp, device=pos.device).expand(Bp - B, Tp)])
        key = (Bp, Tp, id(cache), num_layers, hidden_only)
        g = self.graphs.get(key)
        if g is None:
            if not any(k[2] == id(cache) for k in self.graphs):
                weakref.finalize(cache, self._forget, id(cache))
            g = self.graphs[key] = _Captured(self.model, Bp, Tp, cache, num_layers, hidden_only)
        return g(toks, pos)[:B, :T].clone()         # a copy: the next replay reuses the buffer
