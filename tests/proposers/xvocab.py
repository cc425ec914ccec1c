"""Tokenizer pairs for the cross-vocabulary draft's tests: tiny byte-level BPE vocabularies over
the letters a, b, c (the law tests' 5 target tokens), and the bundled tokenizer cut to its
first tokens (another vocabulary of the same family, whose seams are real byte-level ones)."""
from __future__ import annotations

import json

from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

from specdec.models.tokenizer import Tokenizer
from tests.conftest import TOKENIZER

TARGET_PIECES = ["a", "b", "c", "ab", "ca"]              # the law target's 5 tokens
DRAFT_PIECES = ["a", "b", "c", "ba", "cc", "bc"]         # the law draft's 6: a, b, c shared


def tiny_tokenizer(pieces: list[str]) -> Tokenizer:
    """A byte-level BPE tokenizer whose ids are `pieces` in order (letters first, then merges)."""
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = [(p[0], p[1:]) for p in pieces if len(p) == 2]
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return Tokenizer(tok, None, None)


def cut_bundled(n: int) -> Tokenizer:
    """The bundled tokenizer with its first n tokens only (the merges that make them): another
    byte-level vocabulary whose spellings differ from the full one's past the cut."""
    spec = json.loads(TOKENIZER.read_text())
    vocab = {t: i for t, i in spec["model"]["vocab"].items() if i < n}
    merges = spec["model"]["merges"]
    pairs = [m if isinstance(m, list) else m.split(" ") for m in merges]
    spec["model"]["vocab"] = vocab
    spec["model"]["merges"] = [m for m in pairs if m[0] + m[1] in vocab and m[0] in vocab and m[1] in vocab]
    spec["added_tokens"] = [a for a in spec["added_tokens"] if a["id"] < n]
    return Tokenizer(HFTokenizer.from_str(json.dumps(spec)), 0, 1)


def bundled() -> Tokenizer:
    return Tokenizer(HFTokenizer.from_file(str(TOKENIZER)), 0, 1)
