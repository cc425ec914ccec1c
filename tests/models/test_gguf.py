"""GGUF files load as checkpoints (models/gguf_file.py, gguf_vocab.py): small files written here
with gguf's own writer for the layouts, the types and every way a file can be broken; the real
SmolLM2-135M-Instruct Q4_1 file (tests/real_models.py; skipped where absent) against
transformers' own GGUF loader: state dict bitwise, tokenizer ids, greedy output."""
from __future__ import annotations

import hashlib
import json
import time

import gguf
import numpy as np
import pytest
import torch
import transformers
from gguf import GGMLQuantizationType as Q
from tokenizers import Tokenizer

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.errors import CheckpointError, ResourceError
from specdec.models import gguf_file, loader, memory
from specdec.models.gguf_file import SUPPORTED_TYPES, read_gguf
from specdec.models.head_loader import weights_sha256
from specdec.models.loader import load_model
from specdec.models.quantize import dequantize, int4_groupwise, quantized_linears, quantized_names, quantized_weight
from tests.models.test_hf_parity import COMMON
from tests.real_models import smollm2_gguf

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


@pytest.mark.parametrize("arch,tied", [("llama", False), ("llama", True), ("qwen2", False), ("mistral", False)])
def test_a_gguf_gives_transformers_weights_and_logits(tmp_path, arch, tied):
    hf = tiny_hf(arch, 300, tied)
    path = write_gguf(tmp_path / "m.gguf", hf, arch, gpt2_vocab(300))
    ck = read_gguf(path)
    sd, ref = ck.state_dict(), hf.state_dict()
    assert set(sd) | ({"lm_head.weight"} if tied else set()) == set(ref)
    assert all(torch.equal(sd[k], ref[k]) for k in sd)                      # F32: bitwise, rows un-permuted
    assert ck.config["architectures"] == [gguf_file.ARCHITECTURES[arch]] and ck.config["tie_word_embeddings"] == tied
    ours, tokens = load_model(path), torch.randint(0, 300, (2, 17))
    with torch.no_grad():
        assert torch.allclose(ours(tokens, torch.arange(17).expand(2, 17)), hf(tokens).logits, atol=1e-4)


@pytest.mark.parametrize("qtype", [Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1])
def test_quantized_weights_are_gguf_s_own_dequantization(tmp_path, qtype):
    hf = tiny_hf("llama", 300)
    ck = read_gguf(write_gguf(tmp_path / "m.gguf", hf, "llama", gpt2_vocab(300), linear=qtype))
    sd = ck.state_dict()
    for name in ("model.layers.1.mlp.down_proj.weight", "model.layers.0.self_attn.v_proj.weight"):
        stored = gguf.quants.quantize(hf.state_dict()[name].numpy(), qtype)
        assert torch.equal(sd[name], torch.from_numpy(gguf.quants.dequantize(stored, qtype).astype(np.float32)))
    q = sd["model.layers.0.self_attn.q_proj.weight"]                         # un-permuted after dequantizing
    assert (q - hf.state_dict()["model.layers.0.self_attn.q_proj.weight"]).abs().max() < 0.1
    assert ck.tensor_types["model.layers.0.mlp.up_proj.weight"] == qtype.name
    assert ck.tensor_types["model.norm.weight"] == "F32" and ck.type_counts()[qtype.name] == 16       # 2 x 7 linears, embedding, lm_head


def test_every_supported_type_is_one_gguf_dequantizes():
    for t in SUPPORTED_TYPES:
        block, size = gguf.constants.GGML_QUANT_SIZES[t]
        plain = {Q.F32: np.float32, Q.F16: np.float16}.get(t)
        raw = np.zeros((1, block), plain) if plain else np.zeros((1, size), np.uint8)     # one block of zeros
        assert not gguf.quants.dequantize(raw, t).any(), t.name


def test_quantized_loads_round_the_dequantized_weights(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", tiny_hf("llama", 300), "llama", gpt2_vocab(300), linear=Q.Q8_0)
    plain, tokens = load_model(path), torch.randint(0, 300, (1, 9))
    for weights in ("int8", "int4"):
        m = load_model(path, weights=weights)
        assert m.weight_dtype == weights
        with torch.no_grad():
            assert (m(tokens, torch.arange(9)[None]) - plain(tokens, torch.arange(9)[None])).abs().max() < 0.5


def no_zero_nibble(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (18 bytes: fp16 d, 16 nibble bytes) with no q of 0, as an importance-weighted
    quantizer may write them: re-rounding their weights would not give them back."""
    b = blocks.reshape(blocks.shape[0], -1, 18).copy()
    b[..., 2:] |= 0x11
    return b.reshape(blocks.shape)


@pytest.mark.parametrize("tied", [False, True])
def test_a_q4_0_file_loads_as_int4_exactly(tmp_path, tied):
    path = write_gguf(tmp_path / "m.gguf", tiny_hf("llama", 300, tied), "llama", gpt2_vocab(300), linear=Q.Q4_0,
                      edit=no_zero_nibble)
    ref = read_gguf(path).state_dict()                                       # gguf's dequantization, float32
    model = load_model(path, weights="int4", prepare=False)
    for name, linear in zip(quantized_names(model), quantized_linears(model)):
        want = ref["model.embed_tokens.weight" if tied and name == "lm_head" else name + ".weight"]
        assert torch.equal(dequantize(*quantized_weight(linear)), want), name
        assert not torch.equal(dequantize(*int4_groupwise(want)), want)      # re-rounding would move them
    assert torch.equal(model.model.embed_tokens.weight, ref["model.embed_tokens.weight"])
    tokens, pos = torch.randint(0, 300, (1, 9)), torch.arange(9)[None]      # the int4 kernels on them: the float model
    with torch.no_grad():
        assert torch.allclose(load_model(path, weights="int4")(tokens, pos), load_model(path)(tokens, pos), atol=1e-4)


def test_unsupported_architecture_and_type_are_named(tmp_path):
    hf = tiny_hf("llama", 300)
    with pytest.raises(CheckpointError, match=r"architecture 'phi3'; specdec loads llama, qwen2, mistral"):
        load_model(write_gguf(tmp_path / "a.gguf", hf, "phi3", gpt2_vocab(300)))
    bad = write_gguf(tmp_path / "b.gguf", hf, "llama", gpt2_vocab(300), skip=("blk.0.attn_norm.weight",),
                     extra={"blk.0.attn_norm.weight": np.ones(64, np.float64)})
    with pytest.raises(CheckpointError, match=r"blk.0.attn_norm.weight is stored as F64.*supported: F32, F16, BF16"):
        read_gguf(bad)


def test_tensors_that_do_not_match_the_metadata(tmp_path):
    hf, vocab = tiny_hf("llama", 300), gpt2_vocab(300)
    with pytest.raises(CheckpointError, match="missing blk.1.ffn_up.weight"):
        read_gguf(write_gguf(tmp_path / "a.gguf", hf, "llama", vocab, skip=("blk.1.ffn_up.weight",)))
    with pytest.raises(CheckpointError, match="unexpected blk.0.attn_q_norm.weight"):
        read_gguf(write_gguf(tmp_path / "b.gguf", hf, "llama", vocab, extra={"blk.0.attn_q_norm.weight": np.ones(16, np.float32)}))
    with pytest.raises(CheckpointError, match=r"blk.0.ffn_gate.weight has shape \(96, 64\), the metadata implies \(128, 64\)"):
        read_gguf(write_gguf(tmp_path / "c.gguf", hf, "llama", vocab, meta={"add_feed_forward_length": 128}))
    with pytest.raises(CheckpointError, match="corrupt metadata .*num_hidden_layers = 4000000000"):
        read_gguf(write_gguf(tmp_path / "e.gguf", hf, "llama", vocab, meta={"add_block_count": 4_000_000_000}))
    with pytest.raises(CheckpointError, match="corrupt metadata .*num_key_value_heads = 0"):
        read_gguf(write_gguf(tmp_path / "f.gguf", hf, "llama", vocab, meta={"add_head_count_kv": 0}))
    with pytest.raises(CheckpointError, match="rope_freqs.weight"):
        read_gguf(write_gguf(tmp_path / "d.gguf", hf, "llama", vocab, extra={"rope_freqs.weight": np.ones(8, np.float32)}))


def test_a_broken_vocabulary_is_refused(tmp_path):
    hf, vocab = tiny_hf("llama", 300), gpt2_vocab(300)
    cases = {"merge 'q z' in tokenizer.ggml.merges is not two tokens": {**vocab, "merges": vocab["merges"] + ["q z"]},
             "tokenizer 'bert'": {**vocab, "model": "bert"},
             "tokenizer.ggml.bos_token_id = 999 is not a token id": {**vocab, "bos": 999}}
    for i, (message, bad) in enumerate(cases.items()):
        with pytest.raises(CheckpointError, match=message):
            read_gguf(write_gguf(tmp_path / f"{i}.gguf", hf, "llama", bad))


def test_rope_scaling_metadata(tmp_path):
    hf, vocab = tiny_hf("llama", 300), gpt2_vocab(300)
    linear = {"add_rope_scaling_type": gguf.RopeScalingType.LINEAR, "add_rope_scaling_factor": 4.0}
    ck = read_gguf(write_gguf(tmp_path / "a.gguf", hf, "llama", vocab, meta=linear))
    assert ck.config["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
    with pytest.raises(CheckpointError, match="rope scaling 'yarn' is not supported"):
        read_gguf(write_gguf(tmp_path / "b.gguf", hf, "llama", vocab, meta={**linear, "add_rope_scaling_type":
                                                                             gguf.RopeScalingType.YARN}))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "m.gguf", tiny_hf("llama", 300), "llama", gpt2_vocab(300))


def _refused(path, match: str | None = None) -> str:
    t = time.perf_counter()
    with pytest.raises(CheckpointError, match=match) as e:
        load_model(path)
    assert time.perf_counter() - t < 5 and "\n" not in str(e.value), str(e.value)
    return str(e.value)


def test_truncated_and_corrupt_files_are_one_line_errors(tmp_path, small):
    data = small.read_bytes()
    r = gguf.GGUFReader(small)
    tokens, tensor = r.fields["tokenizer.ggml.tokens"], r.tensors[3].field
    cuts = {"magic": 2, "header": 13, "metadata": (tokens.offset + r.fields["tokenizer.ggml.merges"].offset) // 2,
            "tensor infos": r.tensors[5].field.offset + 3, "before the data": r.data_offset - 1,
            "tensor data": (r.data_offset + len(data)) // 2, "last byte": len(data) - 1}
    for what, n in cuts.items():
        (tmp_path / f"{what}.gguf").write_bytes(data[:n])
        _refused(tmp_path / f"{what}.gguf", "not a GGUF file|corrupt or truncated" if n > 2 else "not a GGUF file")

    def patched(offset: int, value: int, fmt: str = "<Q") -> bytes:
        b = bytearray(data)
        b[offset:offset + np.dtype(fmt).itemsize] = np.array([value], fmt).tobytes()
        return bytes(b)
    name_len = len("tokenizer.ggml.tokens")
    corrupt = {"array length": patched(tokens.offset + 8 + name_len + 4 + 4, 2**60),   # key, type, item type
               "tensor offset": patched(tensor.offset + 8 + len(r.tensors[3].name) + 4 + 8 * len(r.tensors[3].shape) + 4, 2**40),
               "tensor type": patched(tensor.offset + 8 + len(r.tensors[3].name) + 4 + 8 * len(r.tensors[3].shape), 77, "<u4"),
               "version": patched(4, 99, "<u4")}
    for what, b in corrupt.items():
        (tmp_path / "c.gguf").write_bytes(b)
        _refused(tmp_path / "c.gguf", "corrupt or truncated")
    (tmp_path / "n.gguf").write_bytes(b"PK\x03\x04 not a gguf")
    assert "n.gguf is not a GGUF file" in _refused(tmp_path / "n.gguf")
    (tmp_path / "e.gguf").write_bytes(b"")
    _refused(tmp_path / "e.gguf", "not a GGUF file")
    _refused(tmp_path / "absent.gguf", "not found")


def test_an_over_size_gguf_is_refused_before_a_weight_is_read(small, monkeypatch):
    ck = read_gguf(small)
    numel, held = memory.checkpoint_bytes(small)
    assert numel == ck.numel == sum(p.numel() for k, p in tiny_hf("llama", 300).state_dict().items())
    assert held == small.stat().st_size + 4 * numel                         # the file and its float32 copy
    need = held + memory.FP32_COPIES * 4 * numel
    monkeypatch.setattr(memory, "host_available", lambda: need - 1)
    monkeypatch.setattr(gguf_file.GGUFCheckpoint, "state_dict", lambda self: pytest.fail("weights were read"))
    with pytest.raises(ResourceError, match=r"loading m.gguf .* needs about .* GiB"):
        loader.load_model(small)


def test_a_gguf_is_hashed_whole(small):
    assert weights_sha256(small) == hashlib.sha256(small.read_bytes()).hexdigest()


def _tokenizers(path):
    ck = read_gguf(path)
    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return ck, Tokenizer.from_str(ck.tokenizer_json), ref


@pytest.mark.parametrize("pre", ["gpt-2", "qwen2", "llama-bpe", "smollm"])
def test_a_byte_level_vocabulary_encodes_as_transformers_does(tmp_path, small, pre):
    vocab = {**gpt2_vocab(300), "pre": pre}
    path = write_gguf(tmp_path / "v.gguf", tiny_hf("llama", 300), "llama", vocab, meta={"add_add_bos_token": True})
    ck, ours, ref = _tokenizers(path)
    for text in ["the wet sea at 12 o'clock\n\n  on <|im_start|>in<|im_end|>", "Üñí 😀 <think>x</think>", "a 12 1234 112"]:
        ids = ours.encode(text, add_special_tokens=False).ids
        if pre != "smollm":
            assert ids == ref(text, add_special_tokens=False).input_ids, text
        assert ours.decode(ids, skip_special_tokens=False) == text
    assert ours.encode("<|im_start|>").ids == [1, 1]                        # add_bos_token: BOS, then the token
    assert ours.encode(" 12", add_special_tokens=False).ids == ([
        ours.token_to_id("Ġ"), ours.token_to_id("1"), ours.token_to_id("2")] if pre in ("smollm", "qwen2")
        else [ours.token_to_id("Ġ"), ours.token_to_id("12")])              # digits apart, as llama.cpp splits
    assert ck.tokenizer_config == {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
                                   "pad_token": None, "add_bos_token": True}
    added = {t["content"]: t["special"] for t in json.loads(ck.tokenizer_json)["added_tokens"]}
    assert added == {**dict.fromkeys(SPECIALS, True), "<think>": False}


def test_a_sentencepiece_vocabulary_encodes_as_transformers_does(tmp_path):
    vocab = spm_vocab()
    path = write_gguf(tmp_path / "s.gguf", tiny_hf("llama", len(vocab["tokens"])), "llama", vocab)
    ck, ours, ref = _tokenizers(path)
    for text in ["the world and the", "and\nthe  world", "ünknown ☃ bytes", " leading", "</s>the<s>"]:
        ids = ours.encode(text).ids
        assert ids == ref(text).input_ids, text                               # BOS by default, as llama.cpp
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True)  # the first "▁" is no space
    assert "add_bos_token" not in ck.tokenizer_config and "chat_template" not in ck.tokenizer_config


# ---- the real file ----------------------------------------------------------------------------

TEXTS = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "  leading spaces", "trailing spaces   ",
    "tabs\tand\ttabs", "new\nlines\n\n\nmany", "\r\nwindows\r\nlines", "multiple     spaces    between",
    "1234567890", "3.14159265", "year 2024, 12:30pm", "x = 10_000_000", "0x1F 0b1010 1e-9", "123 456 7890 12.5%",
    "$100.00 €50 £20 ¥1000", "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "import numpy as np\nnp.zeros((3, 4))", "<div class=\"a\">text</div>", "SELECT * FROM users WHERE id = 42;",
    'fn main() { println!("hi"); }', '{"key": [1, 2, {"a": null}]}', "Ünïcödé", "日本語のテキスト", "中文文本测试",
    "한국어 텍스트", "Ελληνικά", "Русский текст", "العربية", "emoji 🤖🚀👍🏽", "math ∑ ∫ √ ≈ ≠ ∞", "café naïve résumé",
    "ﬁ ligature", "zero\u200bwidth", "combining e\u0301", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>", "<|endoftext|>", "text<|im_end|>text",
    "<repo_name>owner/repo<file_sep>main.py", "<|im_start|> spaced <|im_end|>", "don't can't I'm you're we've they'll",
    "DON'T SHOUT", "MixedCase camelCase snake_case kebab-case", "a", " ", "\n", "  \n  \n", "!!!???...", "--- *** ###",
    "http://example.com/path?q=1&b=2", "user@example.com", "C:\\Windows\\path", "The the THE tHe",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit.", "a" * 40, "\t\t  \t mixed whitespace \u00a0nbsp",
]
PROMPTS = ["<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
           "def fibonacci(n):", "The quick brown fox",
           "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n"]


@pytest.fixture(scope="module")
def real():
    """(path, our model, transformers' model) for the real file: each loaded once."""
    path = smollm2_gguf()
    ours = load_model(path)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                            dtype=torch.float32).eval()
    return path, ours, ref


def test_the_real_file_s_weights_are_transformers_bitwise(real):
    path, ours, ref = real
    ck = read_gguf(path)
    assert ck.type_counts() == {"Q8_0": 1, "F32": 61, "Q4_1": 210}
    assert ck.tensor_types["model.embed_tokens.weight"] == "Q8_0" and ck.config["tie_word_embeddings"]
    sd, hf = ours.state_dict(), ref.state_dict()
    assert set(sd) == set(hf)
    assert max((sd[k] - hf[k]).abs().max().item() for k in hf) == 0.0


def test_the_real_file_s_greedy_output_is_transformers(real):
    path, ours, ref = real
    tok = Tokenizer.from_str(read_gguf(path).tokenizer_json)
    prompts = [tok.encode(p, add_special_tokens=False).ids for p in PROMPTS]
    eng = Engine(ours, SpecConfig(method="none", k=0), EngineConfig(max_batch=4, max_model_len=128))
    outs = [s.output_ids for s in eng.generate(prompts, SamplingParams(max_new_tokens=32, ignore_eos=True))]
    for p, out in zip(prompts, outs):
        with torch.no_grad():                  # greedy = each output token is transformers' argmax after the ones before
            logits = ref(torch.tensor([p + out])).logits[0, len(p) - 1:-1]
        assert logits.argmax(-1).tolist() == out
    assert tok.decode(outs[0]).startswith("The capital of France is Paris.")


def test_the_real_file_s_tokenizer_is_transformers(real):
    path = real[0]
    ck, ours, ref = _tokenizers(path)
    assert len(TEXTS) >= 50
    for text in TEXTS:
        ids = ours.encode(text, add_special_tokens=False).ids
        assert ids == ref(text, add_special_tokens=False).input_ids, text
        assert ours.decode(ids, skip_special_tokens=False) == text
    assert ours.encode("<|im_start|>user").ids == [1, 4093]                    # one id; no BOS (add_bos_token false)
    assert ck.tokenizer_config["add_bos_token"] is False and "add_eos_token" not in ck.tokenizer_config
    assert ck.tokenizer_config["chat_template"].startswith("{% for message in messages %}")
