"""Small GGUF files for tests, written with gguf's own writer: a tiny transformers model's
weights in GGUF's layout, a byte-level or sentencepiece vocabulary, and hooks to break them."""
from __future__ import annotations

import gguf
import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType as Q

from tests.models.test_hf_parity import COMMON

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BASE_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "r e", "a t", "1 2", "Ġ w", "o r"]


def gpt2_vocab(size: int) -> dict:
    """A byte-level vocabulary of `size` tokens: control tokens, the byte alphabet, `<think>`
    (user-defined), then merged pieces."""
    from tokenizers.pre_tokenizers import ByteLevel
    tokens, types = SPECIALS + sorted(ByteLevel.alphabet()) + ["<think>"], [3] * 3 + [1] * 256 + [4]
    merges, letters = list(BASE_MERGES), "abcdefghijklmnopqrstuvwxyz"
    pairs = iter(f"{a} {b}" for a in letters for b in letters)
    while len(tokens) + len(merges) < size:
        m = next(pairs)
        if m not in merges:
            merges.append(m)
    tokens += [m.replace(" ", "") for m in merges]
    return {"model": "gpt2", "pre": "smollm", "tokens": tokens, "types": types + [1] * len(merges),
            "merges": merges, "bos": 1, "eos": 2, "unk": 0}


def spm_vocab() -> dict:
    """A sentencepiece vocabulary without merges (they come from the scores)."""
    pieces = ["▁", "t", "h", "e", "a", "n", "d", "o", "w", "r", "l", "▁t", "he", "▁th", "▁the", "▁a", "▁an",
              "▁and", "▁w", "or", "ld", "▁wor", "▁world", "in", "▁in", "er", "▁o", "on"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return {"model": "llama", "tokens": tokens, "types": [2, 3, 3] + [6] * 256 + [1] * len(pieces),
            "scores": scores, "bos": 1, "eos": 2, "unk": 0}


def tiny_hf(arch: str, vocab: int, tied: bool = False):
    torch.manual_seed(0)
    kw = {**COMMON, "vocab_size": vocab, "tie_word_embeddings": tied}
    if arch == "qwen2":
        hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kw))
    else:
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw))
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if n.endswith("bias"):
                p.normal_(0, 0.5)                   # Qwen2's q/k/v biases, non-zero
    return hf.eval()


def to_ggml_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's reordering of q/k rows (what the loader must undo)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, hf, arch: str, vocab: dict, linear: Q = Q.F32, skip=(), meta=None, extra=None, edit=None):
    """`hf`'s weights as a GGUF file of architecture `arch`, its 2-D weights stored as `linear`
    (their quantized bytes passed through `edit`, where given)."""
    c, w = hf.config, gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(COMMON["rope_theta"])
    if arch != "qwen2":
        w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_tokenizer_model(vocab["model"])
    if "pre" in vocab:
        w.add_tokenizer_pre(vocab["pre"])
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    if "merges" in vocab:
        w.add_token_merges(vocab["merges"])
    if "scores" in vocab:
        w.add_token_scores(vocab["scores"])
    w.add_bos_token_id(vocab["bos"])
    w.add_eos_token_id(vocab["eos"])
    w.add_unk_token_id(vocab["unk"])
    for key, value in (meta or {}).items():
        getattr(w, key)(value)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2 if arch == "qwen2" else gguf.MODEL_ARCH.LLAMA,
                                     c.num_hidden_layers)
    for name, t in hf.state_dict().items():
        base, suffix = name.rsplit(".", 1)
        g = f"{names.get_name(base)}.{suffix}"
        if (c.tie_word_embeddings and name == "lm_head.weight") or g in skip:
            continue
        a = t.numpy().astype(np.float32)
        heads = c.num_attention_heads if "q_proj" in name else c.num_key_value_heads
        if arch != "qwen2" and ("q_proj" in name or "k_proj" in name):
            a = to_ggml_rows(a, heads)
        if a.ndim == 2 and linear != Q.F32:
            stored = gguf.quants.quantize(a, linear)
            w.add_tensor(g, edit(stored) if edit else stored, raw_dtype=None if linear == Q.F16 else linear)
        else:
            w.add_tensor(g, a)
    for g, a in (extra or {}).items():
        w.add_tensor(g, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
