"""GGUF vocabularies as tokenizers (models/gguf_vocab.py), against transformers' own GGUF
loader; and the real SmolLM2-135M-Instruct Q4_1 file (tests/real_models.py; skipped where
absent): state dict bitwise, tokenizer ids, greedy output."""
from __future__ import annotations

import json

import pytest
import torch
import transformers
from tokenizers import Tokenizer

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.models.gguf_file import read_gguf
from specdec.models.loader import load_model
from tests.models.gguf_writer import SPECIALS, gpt2_vocab, spm_vocab, tiny_hf, write_gguf
from tests.real_models import smollm2_gguf


def _tokenizers(path):
    ck = read_gguf(path)
    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return ck, Tokenizer.from_str(ck.tokenizer_json), ref


@pytest.mark.parametrize("pre", ["gpt-2", "qwen2", "llama-bpe", "smollm"])
def test_a_byte_level_vocabulary_encodes_as_transformers_does(tmp_path, pre):
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
