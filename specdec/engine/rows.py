"""The running batch's rows: row i is one request's sequence, cache row i, and the proposer's
and the k policy's row i, plus the batch's sampling settings built from the rows.

Rows stay [0, n): a finished row's hole is filled by the last running row, and that move is
one operation here (`move`), which moves every owner's state together and drops the
sampling settings they were built for.
"""
from __future__ import annotations

from ..batch import Batch, RowSlots
from ..models.kv_cache import KVCache
from ..proposers.base import Proposer
from ..verify.sampling import BatchSampling
from .policy import KPolicy
from .sequence import Sequence


class RowTable:
    """Who owns what of row i: `seqs[i]` (the engine's `running`), cache row i, the proposer's
    and the policy's row i. The table is the only code that adds, moves or frees rows."""

    def __init__(self, cache: KVCache, proposer: Proposer, policy: KPolicy, device):
        self.cache, self.proposer, self.policy, self.device = cache, proposer, policy, device
        self.seqs: list[Sequence] = []
        self._sampling: BatchSampling | None = None       # built for `seqs` as they are, or None

    def __len__(self) -> int:
        return len(self.seqs)

    def sampling(self) -> BatchSampling:
        """The rows' sampling settings as tensors (built once per change of the rows)."""
        if self._sampling is None:
            s = self.seqs
            self._sampling = BatchSampling([q.params for q in s], [q.generator for q in s], self.device,
                                           [q.noise for q in s], s)
        return self._sampling

    def batch(self, draining: bool) -> Batch:
        """The rows as the proposer and the policy see them this round."""
        return Batch(self.seqs, self.sampling(), draining=draining)

    def add(self, seqs: list[Sequence]) -> None:
        """Requests whose prompts were prefilled into rows len(self) onwards, in order: the
        proposer and the policy start their rows."""
        rows = [len(self.seqs) + i for i in range(len(seqs))]
        for seq, row in zip(seqs, rows):
            seq.row = row
        self.seqs += seqs
        self.proposer.start_rows(rows, seqs)
        for seq in seqs:
            self.policy.start(seq.row, seq)
        self._sampling = None

    def state(self) -> list:
        """Everything held per row: the target's cache and what the proposer and the policy
        declare (`row_state()`: their `RowSlots` and KV caches)."""
        return [self.cache] + self.proposer.row_state() + self.policy.row_state()

    def move(self, src: int, dst: int) -> None:
        """Row `src`'s request now lives in row `dst` (whose request left): every owner's
        state of the row, and its sequence."""
        for store in self.state():
            if isinstance(store, RowSlots):
                if src in store:
                    store[dst] = store.pop(src)
                else:
                    store.pop(dst, None)
            else:
                store.move_row(src, dst)
        if src < len(self.seqs):
            self.seqs[dst] = self.seqs[src]
            self.seqs[dst].row = dst
        self._sampling = None

    def free(self, row: int) -> None:
        """The request in `row` left: the owners' `finish` hooks see its state last, then
        the table drops it."""
        self.proposer.finish(row)
        self.policy.finish(row)
        for store in self.state():
            if isinstance(store, RowSlots):
                store.pop(row, None)
            else:
                store.reset(row)
        self._sampling = None

    def retire(self) -> None:
        """Drop finished rows, moving the last running row into each hole (rows stay [0, n)).
        Finished rows at the end are dropped first, so no finished row is ever moved."""
        i, seqs = 0, self.seqs
        while i < len(seqs):
            while seqs and seqs[-1].finished:
                self.free(len(seqs) - 1)
                seqs.pop()
            if i >= len(seqs) or not seqs[i].finished:
                i += 1
                continue
            self.free(i)
            self.move(len(seqs) - 1, i)
            seqs.pop()
