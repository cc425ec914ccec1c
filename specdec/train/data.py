"""Token streams for training and evaluation, cached outside the repository."""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from ..defaults import cache_dir
from ..models.tokenizer import Tokenizer
from ..corpus import corpus_files, prose_text, read_text
from .packages import PACKAGES, digest, fetch_wheels, package_texts, strip_licence


CORPORA = ("stdlib", "extended")   # extended: the standard library's train split + packages.py


def training_texts(corpus: str) -> list[str]:
    """The texts a model trains on: the standard library's train split, licence-stripped,
    and for "extended" the pinned third-party packages, deduplicated against every stdlib file."""
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, got {corpus!r}")
    texts = [strip_licence(read_text(f)) for f in corpus_files("train")]
    if corpus == "stdlib":
        return texts
    stdlib = {digest(read_text(f)) for split in ("train", "heldout") for f in corpus_files(split)}
    stdlib |= {digest(t) for t in texts}
    return texts + package_texts(fetch_wheels(cache_dir() / "wheels"), exclude=stdlib)


def token_stream(tok: Tokenizer, split: str) -> np.ndarray:
    """All files of `split` as one uint16 stream: <s> file </s> <s> file </s> ... `split` is
    "heldout" or "prose" (evaluation), or a training corpus of `CORPORA` ("train" is "stdlib")."""
    split = "stdlib" if split == "train" else split
    name = split + ("-" + "-".join(f"{n}{v}" for n, v in PACKAGES) if split == "extended" else "")
    key = hashlib.sha256(tok.tok.to_str().encode() + name.encode()).hexdigest()[:16]
    path = cache_dir() / f"tokens-{split}-{key}.npy"
    if path.exists():
        return np.load(path)
    if split == "prose":
        texts = [prose_text()]
    elif split == "heldout":
        texts = [read_text(f) for f in corpus_files("heldout")]
    else:
        texts = training_texts(split)
    ids = []
    for enc in tok.tok.encode_batch(texts, add_special_tokens=False):
        ids.append(tok.bos_id)
        ids.extend(enc.ids)
        ids.append(tok.eos_id)
    arr = np.asarray(ids, dtype=np.uint16)
    np.save(path, arr)
    return arr


class Batches:
    """Random windows of `seq_len + 1` tokens, seeded and resumable by step."""

    def __init__(self, stream: np.ndarray, batch: int, seq_len: int, seed: int):
        self.stream = torch.from_numpy(stream.astype(np.int64))
        self.batch, self.seq_len, self.seed = batch, seq_len, seed

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        starts = torch.randint(0, len(self.stream) - self.seq_len - 1, (self.batch,), generator=g)
        idx = starts[:, None] + torch.arange(self.seq_len + 1)
        w = self.stream[idx]                                                  # (B, T+1)
        return w[:, :-1], w[:, 1:]


@torch.no_grad()
def perplexity(model, stream: np.ndarray, seq_len: int = 256, max_tokens: int = 65536) -> float:
    """Perplexity over consecutive windows of the first `max_tokens` tokens."""
    s = torch.from_numpy(stream[: max_tokens + 1].astype(np.int64))
    n = (len(s) - 1) // seq_len
    total, count = 0.0, 0
    for i in range(0, n, 8):
        rows = [s[j * seq_len:(j + 1) * seq_len + 1] for j in range(i, min(n, i + 8))]
        w = torch.stack(rows)
        x, y = w[:, :-1], w[:, 1:]
        pos = torch.arange(seq_len).expand_as(x)
        logits = model(x, pos)
        total += torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    return float(np.exp(total / max(count, 1)))
