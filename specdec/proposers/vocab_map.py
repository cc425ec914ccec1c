"""Two byte-level BPE vocabularies side by side: what a draft with another tokenizer needs.

Every ordinary token of a byte-level BPE tokenizer (GPT-2's scheme: SmolLM2, Llama 3, Qwen2,
the bundled models) stands for a fixed byte string, so a text is the same bytes whichever
vocabulary spells it. `TokenBytes` reads those strings for one tokenizer and encodes bytes
back into its tokens; `VocabMap` pairs the draft's and the target's and finds the
*intersection*: draft tokens whose byte string is exactly one ordinary target token.
`restrict` turns a draft distribution into the law over target tokens the cross-vocabulary
proposer samples from (docs/how-it-works.md, "A draft with another tokenizer").
"""
from __future__ import annotations

import json

import torch
from tokenizers import Tokenizer as HFTokenizer

from ..errors import ConfigError
from ..models.tokenizer import Tokenizer

MIN_SHARED = 0.05    # the least share of the target's vocabulary the intersection must cover: a
                     # sampled round can propose only shared tokens, so below this most target
                     # tokens of ordinary text (long words, indentation runs) could never be
                     # drafted; the bundled draft with SmolLM2 shares 11.8%
PROBE = "def f(x):\n    return x * 2  # café, naïve → 10 µs\n\tprint('<s>')\n"   # the round trip checked at load:
                     # indentation, digits, multi-byte characters, a special token's spelling
PROBE_PIECES = 64    # a partial vocabulary's probe: its first pieces, enough to meet its merges


def byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: the printable bytes stand for
    themselves, the other 68 for the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def whole_chars(data: bytes) -> int:
    """The length of the longest prefix of `data` (UTF-8) that ends on a character boundary:
    a byte-level token may end inside a character."""
    for back in range(1, min(4, len(data)) + 1):
        lead = data[-back]
        if lead & 0xC0 != 0x80:                         # not a continuation byte: a character starts here
            need = 1 if lead < 0x80 else 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14 else 4
            return len(data) if need <= back else len(data) - back
    return len(data)


class TokenBytes:
    """One tokenizer's vocabulary as bytes: `pieces[i]` is token i's byte string, None for a
    special token (or an id past the tokenizer's vocabulary), which stands for no text."""

    def __init__(self, tokenizer: Tokenizer, size: int, role: str):
        spec = json.loads(tokenizer.tok.to_str())
        if "ByteLevel" not in json.dumps(spec.get("decoder")) or spec.get("normalizer") is not None:
            raise ConfigError(f"a draft with another vocabulary needs byte-level BPE tokenizers without a "
                              f"normalizer; the {role}'s decoder is {(spec.get('decoder') or {}).get('type')}")
        known = max(tokenizer.tok.get_vocab().values()) + 1
        if known > size:
            raise ConfigError(f"the {role}'s tokenizer has {known} tokens, more than its model's vocabulary "
                              f"({size})")
        alphabet = byte_alphabet()
        added = tokenizer.tok.get_added_tokens_decoder()
        self.pieces: list[bytes | None] = [None] * size
        for text, i in tokenizer.tok.get_vocab().items():
            if i >= size:
                continue
            if i in added:
                self.pieces[i] = None if added[i].special else added[i].content.encode()
            elif all(c in alphabet for c in text):
                self.pieces[i] = bytes(alphabet[c] for c in text)
        self.prefix = [i for i in tokenizer.prefix if i < size]     # the framing a text starts with (BOS)
        self.byte_ids = {p[0]: i for i, p in enumerate(self.pieces) if p is not None and len(p) == 1}
        self._tok = HFTokenizer.from_str(tokenizer.tok.to_str())
        self._tok.encode_special_tokens = True                      # "<s>" in a text is text
        probe = self._probe()
        if self.text(self.encode(probe)[0]) != probe:
            raise ConfigError(f"the {role}'s tokenizer does not spell a text as the bytes of its tokens "
                              f"(round trip of {probe[:60]!r} fails), so its text cannot be carried across "
                              f"vocabularies")

    def _probe(self) -> bytes:
        """PROBE where every byte is a token of its own (a full byte-level vocabulary), else its
        own first pieces joined (a vocabulary that spells only some texts)."""
        if len(self.byte_ids) == 256:
            return PROBE.encode()
        return b"".join(p for p in self.pieces[:PROBE_PIECES] if p and p.isascii())

    def text(self, ids) -> bytes:
        """The bytes token ids stand for (special tokens: none)."""
        return b"".join(self.pieces[i] or b"" for i in ids)

    def encode(self, data: bytes) -> tuple[list[int], list[int]]:
        """Tokens spelling `data` -> (ids, ends): ends[j], the byte offset in `data` where token j
        ends. Runs of whole UTF-8 characters get the tokenizer's canonical tokens; bytes that
        are not valid UTF-8 (a byte-level model may emit a stray lead byte) get their single-byte
        tokens; a character cut at the end is left off, as is anything past a spelling that does
        not match the bytes (the caller keeps those bytes as lag)."""
        ids: list[int] = []
        ends: list[int] = []
        at = 0
        while at < len(data):
            try:
                data[at:].decode("utf-8")
                stop, bad = len(data), None
            except UnicodeDecodeError as e:
                stop = at + e.start
                bad = None if e.reason == "unexpected end of data" else (stop, at + e.end)
            if stop > at and not self._spell(data, at, stop, ids, ends):
                break
            if bad is None:
                break
            for at in range(*bad):
                if data[at] not in self.byte_ids:
                    return ids, ends
                ids.append(self.byte_ids[data[at]])
                ends.append(at + 1)
            at = bad[1]
        return ids, ends

    def _spell(self, data: bytes, at: int, stop: int, ids: list[int], ends: list[int]) -> bool:
        """Append the canonical tokens of data[at:stop] (whole characters) to ids and ends; False
        where a token's bytes depart from the data (what precedes it is kept)."""
        for i in self._tok.encode(data[at:stop].decode("utf-8"), add_special_tokens=False).ids:
            piece = self.pieces[i] if i < len(self.pieces) else None
            if piece is None or data[at:at + len(piece)] != piece:
                return False
            at += len(piece)
            ids.append(i)
            ends.append(at)
        return True


class VocabMap:
    """The draft's and the target's vocabularies and their intersection: `shared_draft` (n,)
    draft ids whose bytes are exactly the ordinary target tokens `shared_target` (n,)."""

    def __init__(self, target: TokenBytes, draft: TokenBytes):
        self.target, self.draft = target, draft
        by_bytes = {piece: i for i, piece in enumerate(target.pieces) if piece}
        pairs = [(d, by_bytes[piece]) for d, piece in enumerate(draft.pieces) if piece and piece in by_bytes]
        self.shared_draft = torch.tensor([d for d, _ in pairs], dtype=torch.long)        # (n,)
        self.shared_target = torch.tensor([t for _, t in pairs], dtype=torch.long)       # (n,)
        self.draft_to_target = torch.full((len(draft.pieces),), -1, dtype=torch.long)   # (V_draft,)
        self.draft_to_target[self.shared_draft] = self.shared_target
        self.target_size = len(target.pieces)
        self.share = len(pairs) / max(1, sum(p is not None for p in target.pieces))

    @classmethod
    def build(cls, target_tok: Tokenizer, draft_tok: Tokenizer, target_size: int, draft_size: int,
              min_shared: float = MIN_SHARED) -> "VocabMap":
        """The pair's map, or a ConfigError for a pair that cannot draft: a tokenizer that is not
        byte-level BPE, or an intersection below `min_shared` of the target's vocabulary."""
        vmap = cls(TokenBytes(target_tok, target_size, "target"), TokenBytes(draft_tok, draft_size, "draft"))
        if vmap.share < min_shared:
            raise ConfigError(f"the draft shares {len(vmap.shared_draft)} tokens ({vmap.share:.1%}) of the target's "
                              f"{target_size}-token vocabulary as exact single tokens; a draft with another "
                              f"vocabulary needs at least {min_shared:.0%}")
        return vmap


def restrict(q_draft: torch.Tensor, vmap: VocabMap) -> torch.Tensor:
    """q_draft (B, V_draft), the draft's distribution -> (B, V_target): its mass on the
    intersection, renormalised, at the target ids (zero elsewhere). A row with no mass there
    (a filter kept no shared token) gets the uniform law over the intersection."""
    shared = q_draft[:, vmap.shared_draft]                                             # (B, n)
    mass = shared.sum(-1, keepdim=True)                                                # (B, 1)
    shared = torch.where(mass > 0, shared / mass.clamp_min(1e-30), torch.full_like(shared, 1 / shared.shape[1]))
    q = torch.zeros(q_draft.shape[0], vmap.target_size, dtype=q_draft.dtype, device=q_draft.device)
    return q.index_add_(1, vmap.shared_target, shared)             # (B, V_target); duplicates add up
