"""Thin wrapper around a Hugging Face `tokenizers` tokenizer with BOS/EOS handling."""
from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from ..errors import CheckpointError


class Tokenizer:
    def __init__(self, tok: HFTokenizer, bos_id: int | None, eos_id):
        self.tok = tok
        self.bos_id = bos_id if bos_id is not None else tok.token_to_id("<s>")
        if isinstance(eos_id, list):
            eos_id = eos_id[0] if eos_id else None
        self.eos_id = eos_id if eos_id is not None else tok.token_to_id("</s>")

    @classmethod
    def from_file(cls, path: Path, bos_id=None, eos_id=None) -> "Tokenizer":
        try:
            return cls(HFTokenizer.from_file(str(path)), bos_id, eos_id)
        except Exception as e:  # tokenizers raises a bare Exception on bad files
            raise CheckpointError(f"cannot read tokenizer {path}: {e}") from e

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text: str, bos: bool = True) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=False).ids
        return ([self.bos_id] if bos and self.bos_id is not None else []) + ids

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def pieces(self, ids) -> list[str]:
        """Each token's share of `decode(ids)`: piece i is what token i adds to the text of
        the tokens before it, so the pieces join to the decoded text (tokens that decode
        to nothing, such as special ones, get "")."""
        ids = list(ids)
        texts = [self.decode(ids[:i]) for i in range(len(ids) + 1)]
        out = []
        for before, after in zip(texts, texts[1:]):
            # a multi-byte character split across tokens shows on the token that completes it
            out.append(after[len(before):] if after.startswith(before) else after[len(_common(before, after)):])
        return out


def _common(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]
