"""A checkpoint's tokenizer, with its own rules for special tokens and its chat template.

Special tokens are added the way transformers adds them (its `TokenizersBackend`):
- where tokenizer_config.json says `add_bos_token` or `add_eos_token`, or tokenizer.json has
  no post-processor, a text is framed as [BOS if add_bos_token] + text + [EOS if add_eos_token]
  (both default to false);
- else tokenizer.json's post-processor frames it (a Llama-3 `TemplateProcessing`, say).

So a model whose tokenizer adds no BOS (Qwen2; SmolLM2 on plain text) gets none, and text a
chat template rendered is encoded with `add_special_tokens=False`: the template wrote its
special tokens itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from ..errors import CheckpointError

_PROBE = "a"    # a text whose framing shows the post-processor's prefix and suffix tokens


@dataclass(frozen=True)
class TokenizerRules:
    """What a checkpoint says about its tokenizer beyond tokenizer.json (tokenizer_config.json,
    or a GGUF file's metadata): the special-token flags (None: not said), the special tokens'
    strings by name (bos_token, eos_token, unk_token, pad_token) and the chat template."""
    add_bos: bool | None = None
    add_eos: bool | None = None
    special_tokens: dict = field(default_factory=dict)
    chat_template: str | None = None


class Tokenizer:
    """`tok`: a Hugging Face `tokenizers` tokenizer; `bos_id`, `eos_id`: the ids of the
    model's BOS and (first) EOS; `rules`: see TokenizerRules."""

    def __init__(self, tok: HFTokenizer, bos_id: int | None, eos_id, rules: TokenizerRules | None = None):
        self.tok = tok
        self.rules = rules or TokenizerRules()
        named = tok.token_to_id(self.rules.special_tokens.get("bos_token") or "")
        self.bos_id = named if named is not None else bos_id if bos_id is not None else tok.token_to_id("<s>")
        if isinstance(eos_id, list):
            eos_id = eos_id[0] if eos_id else None
        self.eos_id = eos_id if eos_id is not None else tok.token_to_id("</s>")
        self.prefix, self.suffix = self._framing()

    @classmethod
    def from_file(cls, path: Path, bos_id=None, eos_id=None, rules: TokenizerRules | None = None) -> "Tokenizer":
        try:
            tok = HFTokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception on bad files
            raise CheckpointError(f"cannot read tokenizer {path}: {e}") from e
        return cls(tok, bos_id, eos_id, rules)

    @classmethod
    def from_str(cls, text: str, bos_id=None, eos_id=None, rules: TokenizerRules | None = None,
                 origin: str = "tokenizer") -> "Tokenizer":
        try:
            tok = HFTokenizer.from_str(text)
        except Exception as e:
            raise CheckpointError(f"cannot read {origin}: {e}") from e
        return cls(tok, bos_id, eos_id, rules)

    def _framing(self) -> tuple[list[int], list[int]]:
        """The ids added before and after a text's own: from the flags where the checkpoint
        states either (or tokenizer.json has no post-processor), else the post-processor's."""
        r = self.rules
        if r.add_bos is not None or r.add_eos is not None or self.tok.post_processor is None:
            return ([self.bos_id] if r.add_bos and self.bos_id is not None else [],
                    [self.eos_id] if r.add_eos and self.eos_id is not None else [])
        bare = self.tok.encode(_PROBE, add_special_tokens=False).ids
        framed = self.tok.encode(_PROBE, add_special_tokens=True).ids
        at = next((i for i in range(len(framed) - len(bare) + 1) if framed[i:i + len(bare)] == bare), None)
        if at is None:
            raise CheckpointError("tokenizer.json's post-processor changes the text's own tokens; "
                                  "specdec supports post-processors that only add special tokens")
        return framed[:at], framed[at + len(bare):]

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    @property
    def chat_template(self) -> str | None:
        return self.rules.chat_template

    def special_token(self, name: str) -> str | None:
        """A special token's string by name ("bos_token", "eos_token", ...), as the checkpoint
        names it, else the vocabulary's token at the matching id."""
        if name in self.rules.special_tokens:
            return self.rules.special_tokens[name]
        at = {"bos_token": self.bos_id, "eos_token": self.eos_id}.get(name)
        return self.tok.id_to_token(at) if at is not None else None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; with `add_special_tokens`, framed by the checkpoint's rule
        (module docstring). Special tokens written in the text (`<|im_start|>`) are one id."""
        ids = self.tok.encode(text, add_special_tokens=False).ids
        return self.frame(ids) if add_special_tokens else ids

    def frame(self, ids: list[int]) -> list[int]:
        """`ids` (a text's own tokens) framed as `encode` frames a text."""
        return [*self.prefix, *ids, *self.suffix]

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
