"""A GGUF file as a checkpoint: what a Hugging Face folder holds, read from llama.cpp's format.

    ck = read_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")   # metadata only: checked, nothing dequantized
    ck.config            # config.json's fields          ck.tokenizer_json, ck.tokenizer_config
    ck.tensor_types      # {"model.layers.0.mlp.up_proj.weight": "Q4_1", ...}
    ck.state_dict()      # Hugging Face names, float32, dequantized tensor by tensor

The file is read with the `gguf` package only (its reader, its dequantizers); `read_gguf` checks
everything before any tensor is dequantized: the architecture (ARCHITECTURES), every tensor's
name, shape and type (SUPPORTED_TYPES) against the config, and that each tensor's bytes lie
inside the file. A truncated or corrupt file is a CheckpointError, never a numpy error or a hang.

Layout facts: a GGUF lists a tensor's dimensions innermost first (ggml's ne0 = columns), so its
numpy shape is the reverse: (out_features, in_features) for a linear, as PyTorch's. llama.cpp's
converter reorders the rows of `llama` q_proj and k_proj weights (and biases) within each head,
from Hugging Face's rotate-half rope layout (the first half of a head's dimensions pairs with the
second) to ggml's interleaved one (dimension pairs adjacent); `_unpermute` reorders them back, as
transformers' GGUF loader does. Qwen2 is written unpermuted.
"""
from __future__ import annotations

import copy
import functools
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader
from gguf.constants import GGUF_MAGIC, MODEL_TENSOR, TENSOR_NAMES, GGMLQuantizationType as Q, GGUFValueType, Keys
from gguf.quants import dequantize

from ..errors import CheckpointError
from .config import ModelConfig
from .gguf_int4 import q4_0_to_int4, rows as int4_rows
from .gguf_vocab import build_tokenizer

# general.architecture -> the Hugging Face class whose layout it holds
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}
# architectures whose q/k rows llama.cpp's converter reorders for ggml's rope (Mistral models are
# written as `llama`; a file naming `mistral` has the same lineage)
PERMUTED = ("llama", "mistral")
# weight types `gguf.quants.dequantize` turns into float32 (Q8_K and Q8_1, llama.cpp's activation
# types, it cannot; integer tensors are no weights of these models)
SUPPORTED_TYPES = (Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K,
                   Q.Q5_K, Q.Q6_K, Q.IQ1_S, Q.IQ1_M, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S,
                   Q.IQ4_NL, Q.IQ4_XS, Q.TQ1_0, Q.TQ2_0)
MAGIC = GGUF_MAGIC.to_bytes(4, "little")        # b"GGUF", the file's first bytes
ROPE_FACTORS = TENSOR_NAMES[MODEL_TENSOR.ROPE_FREQS] + ".weight"
# the least bytes an array element of each metadata type takes (a string: its 8-byte length; an
# array: its type and length), so that a corrupt array length is caught before it is looped over
ITEM_BYTES = {GGUFValueType.STRING: 8, GGUFValueType.ARRAY: 12, GGUFValueType.BOOL: 1, GGUFValueType.UINT8: 1,
              GGUFValueType.INT8: 1, GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2, GGUFValueType.UINT32: 4,
              GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4, GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8,
              GGUFValueType.FLOAT64: 8}

READ_CACHE = 2       # files whose checked metadata stays in memory (a target and its draft)
# GGUF tensor -> Hugging Face module, outside the layers and inside each (blk.{bid} / model.layers.{bid})
GLOBAL = {MODEL_TENSOR.TOKEN_EMBD: "model.embed_tokens", MODEL_TENSOR.OUTPUT_NORM: "model.norm",
          MODEL_TENSOR.OUTPUT: "lm_head"}
LAYER = {MODEL_TENSOR.ATTN_NORM: "input_layernorm", MODEL_TENSOR.FFN_NORM: "post_attention_layernorm",
         MODEL_TENSOR.ATTN_Q: "self_attn.q_proj", MODEL_TENSOR.ATTN_K: "self_attn.k_proj",
         MODEL_TENSOR.ATTN_V: "self_attn.v_proj", MODEL_TENSOR.ATTN_OUT: "self_attn.o_proj",
         MODEL_TENSOR.FFN_GATE: "mlp.gate_proj", MODEL_TENSOR.FFN_UP: "mlp.up_proj",
         MODEL_TENSOR.FFN_DOWN: "mlp.down_proj"}


ARRAY = int(GGUFValueType.ARRAY)                # as an int: compared once per metadata value
ITEMSIZE: dict = {}                             # numpy dtype -> bytes, for the reads of `_Bounded`


class _Bounded(GGUFReader):
    """gguf's reader, refusing every read past the end of the file. Its own reads return a short
    or empty array there, and its loops then run on for as long as a corrupt length says (a hang,
    or an error deep in numpy); here such a read, and an array longer than the bytes left could
    hold, is an error at once."""

    def _get(self, offset, dtype, count=1, override_order=None):
        size = ITEMSIZE.get(dtype) or ITEMSIZE.setdefault(dtype, np.dtype(dtype).itemsize)
        end = int(offset) + size * int(count)
        if end > self.data.size:
            raise EOFError(f"the file ends at byte {self.data.size}, inside a field or tensor that runs to byte {end}")
        return super()._get(offset, dtype, count, override_order)

    def _get_field_parts(self, orig_offs, raw_type):
        if raw_type == ARRAY:
            item, n = int(self._get(orig_offs, np.uint32)[0]), int(self._get(orig_offs + 4, np.uint64)[0])
            if n * ITEM_BYTES.get(item, 1) > self.data.size - orig_offs:
                raise EOFError(f"an array at byte {orig_offs} declares {n} elements, more than the file holds")
        return super()._get_field_parts(orig_offs, raw_type)


@dataclass(frozen=True)
class GGUFCheckpoint:
    """A checked GGUF file. `config`: config.json's fields; `tokenizer_json`: a `tokenizers`
    JSON; `tokenizer_config`: tokenizer_config.json's special tokens, add_bos_token /
    add_eos_token (where the file sets them) and chat_template (where it has one);
    `tensor_types`: each parameter's GGML type name, by Hugging Face name."""
    path: Path
    config: dict
    tokenizer_json: str
    tokenizer_config: dict
    tensor_types: dict[str, str]
    # (Hugging Face name, the reader's tensor over the file's memory map, heads to un-permute or 0)
    _tensors: tuple = field(default=(), repr=False, compare=False)

    @property
    def numel(self) -> int:
        """Parameters stored (a tied lm_head once): the float32 load's size / 4."""
        return sum(int(t.n_elements) for _, t, _ in self._tensors)

    def type_counts(self) -> dict[str, int]:
        """{GGML type name: tensors of that type}, e.g. {"Q4_1": 210, "F32": 61, "Q8_0": 1}."""
        out: dict[str, int] = {}
        for t in self.tensor_types.values():
            out[t] = out.get(t, 0) + 1
        return out

    def state_dict(self, int4: Collection[str] = ()) -> dict[str, torch.Tensor]:
        """Every parameter, dequantized to float32 by `gguf.quants.dequantize` one tensor at a
        time, in Hugging Face names and layout (lm_head absent when tied). `int4`: linears
        ("model.layers.0.mlp.up_proj", "lm_head"...) whose Q4_0 weights come in specdec's int4
        layout instead, exactly (gguf_int4.py): "<name>.weight" uint8 and "<name>.weight_scale";
        a tied lm_head then gets the embedding's."""
        out, keep = {}, set(int4)
        tied = "lm_head" in keep and self.config["tie_word_embeddings"]
        for name, t, heads in self._tensors:
            module = name.rsplit(".", 1)[0]
            if t.tensor_type == Q.Q4_0 and name.endswith(".weight") and (module in keep or (
                    tied and module == "model.embed_tokens")):
                q, s = q4_0_to_int4(t.data)
                q, s = (int4_rows(q, heads), int4_rows(s, heads)) if heads else (q, s)
                out[("lm_head" if module == "model.embed_tokens" else module) + ".weight_scale"] = s
                if module != "model.embed_tokens":
                    out[name] = q
                    continue
                out["lm_head.weight"] = q                  # and the embedding itself in float32 below
            w = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)   # numpy shape: dims reversed
            if heads:
                w = _unpermute(w, heads)
            if not w.flags.writeable:                      # a view of the read-only memory map (F32)
                w = w.copy()
            out[name] = torch.from_numpy(w)
        return out


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a llama.cpp q/k weight (heads x head_dim, ...) or bias back in Hugging Face's
    order: the converter stored each head's rows as (head_dim/2, 2), dimension i next to
    i + head_dim/2; they are put back as (2, head_dim/2)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def is_gguf(path: str | Path) -> bool:
    """Whether `path` is a file that starts with GGUF's magic (a directory is not)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _open(path: Path) -> tuple[GGUFReader, dict[str, Any]]:
    """The reader and its metadata (key -> value), or a one-line CheckpointError."""
    if not path.is_file():
        raise CheckpointError(f"GGUF file not found: {path}")
    if not is_gguf(path):
        raise CheckpointError(f"{path.name} is not a GGUF file (it does not start with {MAGIC.decode()!r})")
    try:
        reader = _Bounded(path)
        meta = {k: f.contents() for k, f in reader.fields.items()}
    except Exception as e:                     # noqa: BLE001 - whatever the reader makes of bad bytes
        detail = " ".join(str(e).split())[:200] or type(e).__name__
        raise CheckpointError(f"corrupt or truncated GGUF file {path.name}: {detail}") from e
    return reader, meta


def _number(meta: dict, key: str, arch: str, where: str, kind=int, default: Any = ...):
    name = key.format(arch=arch)
    v = meta.get(name, default)
    if v is ...:
        raise CheckpointError(f"{where}: metadata {name} is missing")
    if isinstance(v, list):                    # per-layer values: one is all specdec decodes
        if not v or len(set(v)) != 1:
            raise CheckpointError(f"{where}: {name} differs between layers ({v[:4]}...); specdec needs one value")
        v = v[0]
    try:
        return kind(v) if v is not None else None
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: metadata {name} = {v!r} is not a number") from e


def _config(meta: dict, arch: str, tensors: dict, where: str) -> dict:
    """config.json's fields from the metadata (shapes the file's own tensors confirm later)."""
    heads = _number(meta, Keys.Attention.HEAD_COUNT, arch, where)
    hidden = _number(meta, Keys.LLM.EMBEDDING_LENGTH, arch, where)
    head_dim = _number(meta, Keys.Attention.KEY_LENGTH, arch, where, default=None)
    if head_dim is None and arch in PERMUTED:  # llama / mistral rotate whole heads: this is head_dim
        head_dim = _number(meta, Keys.Rope.DIMENSION_COUNT, arch, where, default=None)
    embed = tensors.get(TENSOR_NAMES[MODEL_TENSOR.TOKEN_EMBD] + ".weight")
    if embed is None:
        raise CheckpointError(f"{where}: no token embedding ({TENSOR_NAMES[MODEL_TENSOR.TOKEN_EMBD]}.weight)")
    cfg = {
        "architectures": [ARCHITECTURES[arch]], "model_type": arch,
        "vocab_size": int(embed.shape[-1]),                  # rows of the embedding: dims reversed
        "hidden_size": hidden,
        "intermediate_size": _number(meta, Keys.LLM.FEED_FORWARD_LENGTH, arch, where),
        "num_hidden_layers": _number(meta, Keys.LLM.BLOCK_COUNT, arch, where),
        "num_attention_heads": heads,
        "num_key_value_heads": _number(meta, Keys.Attention.HEAD_COUNT_KV, arch, where, default=heads),
        "head_dim": head_dim or (hidden // heads if heads else None),
        "max_position_embeddings": _number(meta, Keys.LLM.CONTEXT_LENGTH, arch, where, default=2048),
        "rms_norm_eps": _number(meta, Keys.Attention.LAYERNORM_RMS_EPS, arch, where, float, 1e-6),
        "rope_theta": _number(meta, Keys.Rope.FREQ_BASE, arch, where, float, 10000.0),
        "tie_word_embeddings": TENSOR_NAMES[MODEL_TENSOR.OUTPUT] + ".weight" not in tensors,
        "attention_bias": TENSOR_NAMES[MODEL_TENSOR.ATTN_Q].format(bid=0) + ".bias" in tensors,
        "bos_token_id": meta.get(Keys.Tokenizer.BOS_ID),
        "eos_token_id": meta.get(Keys.Tokenizer.EOS_ID),
    }
    sizes = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim")
    bad = [k for k in sizes if not (isinstance(cfg[k], int) and cfg[k] >= 1)]
    if bad or cfg["num_hidden_layers"] * len(LAYER) > len(tensors) or (arch in PERMUTED and cfg["head_dim"] % 2):
        detail = ", ".join(f"{k} = {cfg[k]}" for k in (bad or sizes))
        raise CheckpointError(f"{where}: corrupt metadata ({detail}) for its {len(tensors)} tensors")
    scaling = meta.get(Keys.Rope.SCALING_TYPE.format(arch=arch))
    if scaling not in (None, "none"):
        cfg["rope_scaling"] = {"rope_type": scaling,
                               "factor": _number(meta, Keys.Rope.SCALING_FACTOR, arch, where, float, 1.0)}
        orig = _number(meta, Keys.Rope.SCALING_ORIG_CTX_LEN, arch, where, default=None)
        if orig:
            cfg["rope_scaling"]["original_max_position_embeddings"] = orig
    if ROPE_FACTORS in tensors:
        raise CheckpointError(f"{where}: per-frequency rope factors ({ROPE_FACTORS}, Llama 3.1-style context "
                              "extension) are not supported yet")
    return cfg


def _expected(c: ModelConfig, arch: str) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """GGUF tensor name -> (Hugging Face name, numpy shape, heads to un-permute or 0)."""
    d, hd, f, v = c.hidden_size, int(c.head_dim or 0), c.intermediate_size, c.vocab_size   # head_dim: set
    q, kv = c.num_attention_heads * hd, c.num_key_value_heads * hd
    shapes = {MODEL_TENSOR.TOKEN_EMBD: (v, d), MODEL_TENSOR.OUTPUT_NORM: (d,), MODEL_TENSOR.OUTPUT: (v, d),
              MODEL_TENSOR.ATTN_NORM: (d,), MODEL_TENSOR.FFN_NORM: (d,), MODEL_TENSOR.ATTN_Q: (q, d),
              MODEL_TENSOR.ATTN_K: (kv, d), MODEL_TENSOR.ATTN_V: (kv, d), MODEL_TENSOR.ATTN_OUT: (d, q),
              MODEL_TENSOR.FFN_GATE: (f, d), MODEL_TENSOR.FFN_UP: (f, d), MODEL_TENSOR.FFN_DOWN: (d, f)}
    heads = {MODEL_TENSOR.ATTN_Q: c.num_attention_heads, MODEL_TENSOR.ATTN_K: c.num_key_value_heads}
    out = {}
    for t, hf in GLOBAL.items():
        if t != MODEL_TENSOR.OUTPUT or not c.tie_word_embeddings:
            out[TENSOR_NAMES[t] + ".weight"] = (hf + ".weight", shapes[t], 0)
    for i in range(c.num_hidden_layers):
        for t, hf in LAYER.items():
            g, h = TENSOR_NAMES[t].format(bid=i), f"model.layers.{i}.{hf}"
            n = heads.get(t, 0) if arch in PERMUTED else 0
            out[g + ".weight"] = (h + ".weight", shapes[t], n)
            if c.attention_bias and t in (MODEL_TENSOR.ATTN_Q, MODEL_TENSOR.ATTN_K, MODEL_TENSOR.ATTN_V):
                out[g + ".bias"] = (h + ".bias", shapes[t][:1], n)
    return out


def read_gguf(path: str | Path) -> GGUFCheckpoint:
    """Read and check GGUF file `path` (metadata only: tensors stay in the file, memory-mapped,
    until `state_dict`). CheckpointError for anything specdec cannot load. The last READ_CACHE
    files read are kept, so that reading one again (its tokenizer after its model, its size
    before its load) costs nothing; a file changed since is read anew."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        raise CheckpointError(f"GGUF file not found: {path}") from None
    ck = _read(path.resolve(), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return replace(ck, config=copy.deepcopy(ck.config), tokenizer_config=dict(ck.tokenizer_config),
                   tensor_types=dict(ck.tensor_types))            # the cached one stays as read


@functools.lru_cache(maxsize=READ_CACHE)
def _read(path: Path, identity: tuple) -> GGUFCheckpoint:
    reader, meta = _open(path)
    where = path.name
    arch = meta.get(Keys.General.ARCHITECTURE)
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"{where}: unsupported GGUF architecture {arch!r}; specdec loads "
                              f"{', '.join(ARCHITECTURES)}")
    tensors = {t.name: t for t in reader.tensors}
    size = path.stat().st_size
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size or t.data.nbytes != t.n_bytes:
            raise CheckpointError(f"{where}: tensor {t.name}'s data runs past the end of the file (truncated?)")
        if t.tensor_type not in SUPPORTED_TYPES:
            raise CheckpointError(f"{where}: tensor {t.name} is stored as {t.tensor_type.name}, which specdec cannot "
                                  f"dequantize; supported: {', '.join(q.name for q in SUPPORTED_TYPES)}")
    raw = _config(meta, arch, tensors, where)
    try:
        cfg = ModelConfig.from_dict(raw)
    except CheckpointError as e:
        raise CheckpointError(f"{where}: {e}") from e
    expected = _expected(cfg, arch)
    missing = [n for n in expected if n not in tensors]
    extra = [n for n in tensors if n not in expected]
    if missing or extra:
        what = "; ".join(s for s in (f"missing {', '.join(missing[:3])}" if missing else "",
                                     f"unexpected {', '.join(extra[:3])}" if extra else "") if s)
        raise CheckpointError(f"{where}: its tensors do not match a {arch} model of its metadata: {what}")
    for g, (hf, shape, _) in expected.items():
        got = tuple(int(n) for n in reversed(tensors[g].shape.tolist()))
        if got != shape:
            raise CheckpointError(f"{where}: tensor {g} has shape {got}, the metadata implies {shape}")
    tokenizer_json, tokenizer_config = build_tokenizer(meta, where)
    order = [(hf, tensors[g], heads) for g, (hf, _, heads) in expected.items()]
    return GGUFCheckpoint(path, raw, tokenizer_json, tokenizer_config,
                          {hf: t.tensor_type.name for hf, t, _ in order}, tuple(order))
