"""A GGUF file's vocabulary as a Hugging Face `tokenizers` tokenizer.

A GGUF carries no tokenizer.json: llama.cpp stores the vocabulary as metadata (the
`tokenizer.ggml.*` keys: tokens, token types, merges or scores, special token ids, flags).
`build_tokenizer` rebuilds the tokenizer those describe, as transformers' GGUF loader does, so
that its ids agree with `AutoTokenizer.from_pretrained(dir, gguf_file=...)`:

- "gpt2" (byte-level BPE): the vocabulary (a token spelled outside the byte alphabet is
  respelled byte by byte), the file's merges, and the text split the way `tokenizer.ggml.pre`
  names (PRE_TOKENIZERS; llama.cpp's splits);
- "llama" (sentencepiece as BPE, byte fallback): the file's merges, or merges derived from the
  scores where it has none (`merges_from_scores`); a "▁" before the first word unless
  `tokenizer.ggml.add_space_prefix` is false.

Control tokens (type 3) become special added tokens and user-defined ones (type 4) plain added
tokens, both matched whole in the text (so `<|im_start|>` is one id), as are the BOS, EOS, UNK
and PAD tokens the file names. The post-processor adds BOS (EOS) only where the file's
add_bos_token (add_eos_token) says so; a sentencepiece vocabulary that says nothing gets BOS, as
llama.cpp and transformers give it.
"""
from __future__ import annotations

from collections.abc import Mapping

from gguf.constants import Keys, TokenType
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from ..errors import CheckpointError

TOKENIZER_MODELS = ("gpt2", "llama")   # tokenizer.ggml.model values built here
SPIECE_SPACE = "\u2581"                # sentencepiece's word-start mark "▁"

# llama.cpp's text splits for byte-level vocabularies, by `tokenizer.ggml.pre` (llama-vocab.cpp).
# Llama 3's: letters with one leading non-letter, digits in runs of up to three, newlines apart
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2's: Llama 3's with every digit on its own
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# pre name -> "llama3" | "qwen2" | "digits" (each digit apart, then GPT-2's split: SmolLM,
# StarCoder) | "gpt2" (GPT-2's split, which `ByteLevel` applies itself)
PRE_TOKENIZERS = {
    "llama-bpe": "llama3", "llama3": "llama3", "llama-v3": "llama3", "smaug-bpe": "llama3",
    "qwen2": "qwen2", "deepseek-r1-qwen": "qwen2",
    "smollm": "digits", "starcoder": "digits", "refact": "digits", "codeshell": "digits",
    "default": "gpt2", "gpt-2": "gpt2", "gpt2": "gpt2",
}
DEFAULT_PRE = "gpt2"    # a pre name not listed: GPT-2's split, as transformers falls back to
# tokenizer.ggml.* ids of the named special tokens, by their tokenizer_config.json names
SPECIAL_IDS = {"bos_token": Keys.Tokenizer.BOS_ID, "eos_token": Keys.Tokenizer.EOS_ID,
               "unk_token": Keys.Tokenizer.UNK_ID, "pad_token": Keys.Tokenizer.PAD_ID}


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> character map: printable Latin-1 bytes stand for themselves, the other
    bytes (controls, space, soft hyphen...) for the characters from U+0100 up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def merges_from_scores(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges implied by a sentencepiece vocabulary without any: every way to cut a piece in
    two known pieces is a merge ranked by the piece's score (higher first), ties by the longer
    left then right part, then by vocabulary order (transformers' `generate_merges` rule)."""
    ids = {t: i for i, t in enumerate(tokens)}                 # the last of duplicates, as the vocabulary
    score = dict(zip(tokens, scores))
    found = []
    for piece, s in score.items():
        cuts = [(piece[:i], piece[i:]) for i in range(1, len(piece)) if piece[:i] in ids and piece[i:] in ids]
        found += [(left, right, s) for left, right in sorted(cuts, key=lambda c: (ids[c[0]], ids[c[1]]))]
    found.sort(key=lambda m: (-m[2], -len(m[0]), -len(m[1])))  # stable: equal keys keep their order
    return [(left, right) for left, right, _ in found]


def _split(merges: list[str], vocab: dict[str, int], where: str) -> list[tuple[str, str]]:
    """The file's "left right" merges as pairs, each of known tokens making a known token
    (`tokenizers` panics, uncatchably, on one that does not)."""
    out = []
    for m in merges:
        pair = m.split(" ")
        if len(pair) != 2 or pair[0] not in vocab or pair[1] not in vocab or pair[0] + pair[1] not in vocab:
            raise CheckpointError(f"{where}: merge {m!r} in {Keys.Tokenizer.MERGES} is not two tokens of the "
                                  "vocabulary making a third")
        out.append((pair[0], pair[1]))
    return out


def _pre_tokenizer(pre: str | None):
    kind = PRE_TOKENIZERS.get(pre or "default", DEFAULT_PRE)
    if kind == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    if kind == "digits":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    regex = LLAMA3_SPLIT if kind == "llama3" else QWEN2_SPLIT
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _byte_level(meta: Mapping, tokens: list[str], where: str) -> tuple[Tokenizer, dict[str, int]]:
    spell = byte_alphabet()
    alphabet = set(spell.values())
    vocab = {t if set(t) <= alphabet else "".join(spell[b] for b in t.encode("utf-8")): i
             for i, t in enumerate(tokens)}
    merges = _split(meta.get(Keys.Tokenizer.MERGES) or [], vocab, where)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False))
    tok.pre_tokenizer = _pre_tokenizer(meta.get(Keys.Tokenizer.PRE))
    tok.decoder = decoders.ByteLevel()
    return tok, vocab


def _sentencepiece(meta: Mapping, tokens: list[str], where: str) -> tuple[Tokenizer, dict[str, int]]:
    vocab = {t: i for i, t in enumerate(tokens)}
    if meta.get(Keys.Tokenizer.MERGES) is not None:
        merges = _split(meta[Keys.Tokenizer.MERGES], vocab, where)
    else:
        scores = meta.get(Keys.Tokenizer.SCORES)
        if scores is None or len(scores) != len(tokens):
            raise CheckpointError(f"{where}: a sentencepiece vocabulary needs {Keys.Tokenizer.MERGES} or one "
                                  f"{Keys.Tokenizer.SCORES} entry per token")
        merges = merges_from_scores(tokens, scores)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True, dropout=None))
    prefix = bool(meta.get(Keys.Tokenizer.ADD_PREFIX, True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE_SPACE, split=False,
                                                 prepend_scheme="first" if prefix else "never")
    steps = [decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(steps + ([decoders.Strip(content=" ", left=1, right=0)] if prefix else []))
    return tok, vocab


def _post_processor(bos: str | None, bos_id, eos: str | None, eos_id) -> processors.TemplateProcessing:
    """BOS before and EOS after each sequence, where given (transformers' template)."""
    def seq(part: str, type_id: int) -> list[str]:
        return ([f"{bos}:{type_id}"] if bos else []) + [f"{part}:{type_id}"] + ([f"{eos}:{type_id}"] if eos else [])
    single, pair = seq("$A", 0), seq("$A", 0) + seq("$B", 1)
    return processors.TemplateProcessing(single=" ".join(single), pair=" ".join(pair),
                                         special_tokens=([(bos, bos_id)] if bos else []) + ([(eos, eos_id)] if eos else []))


def build_tokenizer(meta: Mapping, where: str) -> tuple[str, dict]:
    """(tokenizer.json text, tokenizer_config.json-style dict) of the vocabulary in GGUF
    metadata `meta` (key -> value); `where` names the file in errors."""
    kind = meta.get(Keys.Tokenizer.MODEL)
    tokens = meta.get(Keys.Tokenizer.LIST)
    if kind not in TOKENIZER_MODELS:
        raise CheckpointError(f"{where}: tokenizer {kind!r} ({Keys.Tokenizer.MODEL}) is not supported; specdec "
                              f"reads {', '.join(TOKENIZER_MODELS)} vocabularies")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise CheckpointError(f"{where}: no vocabulary ({Keys.Tokenizer.LIST} is missing or not a list of strings)")
    types = meta.get(Keys.Tokenizer.TOKEN_TYPE) or [TokenType.NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise CheckpointError(f"{where}: {Keys.Tokenizer.TOKEN_TYPE} has {len(types)} entries for {len(tokens)} tokens")
    config: dict = {}
    for name, key in SPECIAL_IDS.items():
        i = meta.get(key)
        if i is not None and not (isinstance(i, int) and 0 <= i < len(tokens)):
            raise CheckpointError(f"{where}: {key} = {i!r} is not a token id (the vocabulary has {len(tokens)})")
        config[name] = tokens[i] if i is not None else None

    try:
        tok = _assemble(kind, meta, tokens, types, config, where)
    except CheckpointError:
        raise
    except Exception as e:                      # noqa: BLE001 - tokenizers raises bare Exceptions on bad vocabularies
        raise CheckpointError(f"{where}: its vocabulary does not make a tokenizer: {' '.join(str(e).split())[:200]}") from e
    template = meta.get(Keys.Tokenizer.CHAT_TEMPLATE)
    if isinstance(template, str):
        config["chat_template"] = template
    return tok.to_str(), config


def _assemble(kind: str, meta: Mapping, tokens: list[str], types: list[int], config: dict, where: str) -> Tokenizer:
    """The tokenizer, its added tokens and post-processor; sets `config`'s add_bos/eos_token."""
    tok, vocab = (_byte_level if kind == "gpt2" else _sentencepiece)(meta, tokens, where)
    spelled = set(byte_alphabet().values()) if kind == "gpt2" else None
    control = [t for t, ty in zip(tokens, types) if ty == TokenType.CONTROL and (spelled is None or set(t) <= spelled)]
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
    user = [t for t, ty in zip(tokens, types) if ty == TokenType.USER_DEFINED and t in vocab]
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])
    added = set(control) | set(user)
    named = [t for t in dict.fromkeys(config.values()) if t is not None and t not in added]
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in named])

    for flag in (Keys.Tokenizer.ADD_BOS, Keys.Tokenizer.ADD_EOS):
        if meta.get(flag) is not None:
            config[flag.rsplit(".", 1)[1]] = bool(meta[flag])
    add_bos = config.get("add_bos_token", kind == "llama") and config["bos_token"] is not None
    add_eos = config.get("add_eos_token", False) and config["eos_token"] is not None
    tok.post_processor = _post_processor(config["bos_token"] if add_bos else None, meta.get(Keys.Tokenizer.BOS_ID),
                                         config["eos_token"] if add_eos else None, meta.get(Keys.Tokenizer.EOS_ID))
    return tok

