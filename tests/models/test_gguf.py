"""GGUF files load as checkpoints (models/gguf_file.py): small files (gguf_writer.py) for the
layouts, the quantization types and every way a file can be broken. Vocabularies and the real
file: test_gguf_vocab.py."""
from __future__ import annotations

import hashlib
import time

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from specdec.errors import CheckpointError, ResourceError
from specdec.models import gguf_file, loader, memory
from specdec.models.gguf_file import SUPPORTED_TYPES, read_gguf
from specdec.models.head_loader import weights_sha256
from specdec.models.loader import load_model
from specdec.models.quantize import dequantize, int4_groupwise, quantized_linears, quantized_names, quantized_weight
from tests.models.gguf_writer import gpt2_vocab, tiny_hf, write_gguf


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
