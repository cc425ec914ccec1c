"""The running batch, as the engine hands it to proposers and k policies, and how admitted
prompts are grouped into prefill forwards."""
from __future__ import annotations


class Batch(list):
    """The running sequences, row i = self[i], plus their sampling settings as tensors
    (`verify.sampling.BatchSampling`) and whether the batch is draining (no request waits
    for a row, so a finished row is not refilled)."""

    def __init__(self, seqs, sampling, draining: bool = False):
        super().__init__(seqs)
        self.sampling = sampling
        self.draining = draining


PREFILL_TOKENS = 512   # positions per batched prefill forward: its logits are (rows x length, V), so
                       # 512 keeps them to what one 512-token prompt needs alone, and a run of short
                       # prompts (5 tokens: 102 rows) pays one call's overhead instead of 102
                       # (the 20,000-request law tests: admission was 2/3 of their time)


def prompt_runs(lengths: list[int]) -> list[tuple[int, int]]:
    """[i, j) ranges of neighbours with equal prompt lengths, each of at most PREFILL_TOKENS
    positions (one row at least)."""
    runs, i = [], 0
    while i < len(lengths):
        j, rows = i + 1, max(1, PREFILL_TOKENS // max(1, lengths[i]))
        while j < len(lengths) and lengths[j] == lengths[i] and j - i < rows:
            j += 1
        runs.append((i, j))
        i = j
    return runs


class RowSlots(dict):
    """Per-row state of a proposer or a k policy: row -> its object (a row without an entry
    has none yet). The owner reads and writes it like a dict; it never moves or frees it: the
    engine's row table does (`engine/rows.py`: one `move`, one `free` for every owner's
    state), after the owner's `finish` hook has read what it needs. An owner hands its slots
    (and its KV caches) to the table from `row_state()`."""
