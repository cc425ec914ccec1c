"""`ngram`: prompt lookup. Find the longest recent n-gram match of the context's tail
(n from max_n down to min_n) earlier in prompt + output and propose what followed it.

Matching is vectorised over the whole context with numpy: for every candidate end
position e, `run[e]` counts how many of the last max_n tokens match backwards from e
(a cumulative product of shifted equality masks), so one pass finds the longest and,
among those, the most recent match. Each row keeps its tokens in a growing numpy
buffer that catches up with whatever the engine appended since the last call, so a
proposal never converts the whole Python list again (≤ 0.1 ms on a 4k context, see
benchmarks/ngram_cost.py). With a tree budget (`--tree N`) the continuations of several
matches are proposed at once, merged into a token tree (docs/trees.md).
"""
from __future__ import annotations

import numpy as np
import torch

from ..batch import RowSlots
from ..errors import ConfigError
from .base import Proposer, Draft, register


def match_lengths(buf: np.ndarray, max_n: int) -> np.ndarray:
    """buf (T,) token ids -> (T-1,): for each end e < T-1, how many of the last max_n tokens
    match backwards from e (buf[e-j] == buf[T-1-j] for j below that count)."""
    T = buf.shape[0]
    E = max(T - 1, 0)                                # candidate ends 0..T-2 (T-1 is the tail itself)
    run = np.ones(E, dtype=np.int32)                 # (E,) still matching after j comparisons
    length = np.zeros(E, dtype=np.int32)             # (E,) match length ending at e
    for j in range(min(max_n, E)):                   # at most max_n vector ops, no loop over T
        eq = np.zeros(E, dtype=np.int32)
        eq[j:] = buf[:E - j] == buf[T - 1 - j]       # buf[e-j] == buf[T-1-j] for e >= j
        run *= eq
        length += run
    return length


def find_match(buf: np.ndarray, min_n: int, max_n: int) -> tuple[int, int]:
    """buf (T,) token ids -> (n, e): the longest n in [min_n, max_n] such that buf[T-n:]
    also ends at position e < T-1; the largest such e. (0, -1) when nothing matches."""
    if buf.shape[0] < min_n + 1:
        return 0, -1
    length = match_lengths(buf, max_n)
    best = int(length.max()) if length.shape[0] else 0
    if best < min_n:
        return 0, -1
    E = length.shape[0]
    e = E - 1 - int(np.argmax(length[::-1] == best))  # most recent end with the longest match
    return best, e


def continuation_tree(buf: np.ndarray, min_n: int, max_n: int, k: int, budget: int
                      ) -> tuple[list[int], list[int]]:
    """A token tree of what followed the tail's matches: every end whose match is >= min_n
    long, longest first and then most recent, adds its next k tokens as a branch (shared
    prefixes merge) while the budget of nodes lasts. -> (tokens, parents), parents first."""
    if buf.shape[0] < min_n + 1 or k <= 0:
        return [], []
    length = match_lengths(buf, max_n)
    ends = np.flatnonzero(length >= min_n)
    ends = ends[np.lexsort((-ends, -length[ends]))]    # longest match first, then most recent
    tokens: list[int] = []
    parents: list[int] = []
    child: dict[tuple[int, int], int] = {}
    for e in ends.tolist():
        cur = -1
        for t in buf[e + 1:e + 1 + k].tolist():
            nxt = child.get((cur, t))
            if nxt is None:
                if len(tokens) == budget:
                    return tokens, parents
                nxt = child[(cur, t)] = len(tokens)
                tokens.append(t)
                parents.append(cur)
            cur = nxt
    return tokens, parents


class _RowBuffer:
    """One row's prompt + output as a numpy array, extended in place (amortised O(new))."""
    __slots__ = ("owner", "buf", "n")

    def __init__(self, owner, cap: int = 256):
        self.owner, self.buf, self.n = owner, np.empty(cap, dtype=np.int64), 0

    def sync(self, token_ids) -> np.ndarray:
        L = len(token_ids)
        if L < self.n:                               # history shrank: rebuild
            self.n = 0
        if L > self.buf.shape[0]:
            grown = np.empty(max(L, 2 * self.buf.shape[0]), dtype=np.int64)
            grown[:self.n] = self.buf[:self.n]
            self.buf = grown
        if L > self.n:
            self.buf[self.n:L] = token_ids[self.n:L]
            self.n = L
        return self.buf[:L]


class NgramProposer(Proposer):
    """Prompt lookup over each row's own prompt + output. Rows without a match get 0 tokens."""
    name = "ngram"

    def __init__(self, min_n: int = 1, max_n: int = 4, tree: int = 0):
        if not isinstance(min_n, int) or not isinstance(max_n, int) or not 1 <= min_n <= max_n:
            raise ConfigError(f"ngram needs integers 1 <= ngram_min <= ngram_max, got {min_n}, {max_n}")
        self.min_n, self.max_n, self.tree = min_n, max_n, tree
        self.rows: RowSlots = RowSlots()             # row -> _RowBuffer

    def _buffer(self, row: int, seq) -> np.ndarray:
        rb = self.rows.get(row)
        if rb is None or rb.owner is not seq:        # a new request in this row (or no start hook)
            rb = self.rows[row] = _RowBuffer(seq, max(256, 2 * len(seq.token_ids)))
        return rb.sync(seq.token_ids)

    def start(self, row, seq):
        self.rows.pop(row, None)

    def row_state(self):
        return [self.rows]

    def propose_row(self, row: int, seq, k: int) -> np.ndarray:
        """The (<= k,) tokens that followed the best match of this row's tail."""
        buf = self._buffer(row, seq)
        n, e = find_match(buf, self.min_n, self.max_n)
        if n == 0 or k <= 0:
            return buf[:0]
        return buf[e + 1:e + 1 + k]

    def propose(self, context, k):
        if self.tree:     # several matches' continuations as one token tree per row
            rows = [continuation_tree(self._buffer(b, seq), self.min_n, self.max_n, k, self.tree)
                    for b, seq in enumerate(context)]
            d = pack([np.asarray(t, dtype=np.int64) for t, _ in rows])
            d.parents = [p for _, p in rows]
            return d
        outs = [self.propose_row(b, seq, k) for b, seq in enumerate(context)]
        return pack(outs)


def pack(outs: list[np.ndarray]) -> Draft:
    """Per-row token arrays -> Draft(tokens (B, max len) zero-padded, lengths)."""
    lengths = [int(o.shape[0]) for o in outs]
    width = max(lengths, default=0)
    tokens = np.zeros((len(outs), width), dtype=np.int64)            # (B, width)
    for b, o in enumerate(outs):
        tokens[b, :lengths[b]] = o
    return Draft(tokens=torch.from_numpy(tokens), probs=None, lengths=lengths)


@register("ngram")
def _build(target, spec, draft_model=None, rows=1, max_len=1024, **_):
    o = spec.opts
    return NgramProposer(o.get("ngram_min", 1), o.get("ngram_max", 4), tree=spec.tree)
