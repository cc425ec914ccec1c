"""The running batch, as the engine hands it to proposers and k policies."""
from __future__ import annotations


class Batch(list):
    """The running sequences, row i = self[i], plus their sampling settings as tensors
    (`verify.sampling.BatchSampling`) and whether the batch is draining (no request waits
    for a row, so a finished row is not refilled)."""

    def __init__(self, seqs, sampling, draining: bool = False):
        super().__init__(seqs)
        self.sampling = sampling
        self.draining = draining
