"""SmolLM2-135M-Instruct as users hold it: its tokenizer's own rules, its chat template, and
greedy output equal to transformers' on the same weights (and speculative output equal to
plain). The GGUF file is read by transformers into a float32 folder (conftest.py)."""
from __future__ import annotations

import pytest
import torch

from prompts import chats, plain_texts
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine.engine import Engine
from specdec.models.chat_template import ChatTemplate
from specdec.models.loader import load_model, load_tokenizer

N_PLAIN, N_CHATS = 60, 50        # the floor: 50 prompts of each kind
N_GREEDY, GREEDY_TOKENS = 20, 64  # chats decoded and compared with transformers, and their length
N_SPEC, SPEC_TOKENS, K = 6, 48, 4  # chats decoded speculatively and compared with plain
SKIP_LAYERS = 12                  # layer-skip's draft depth (of 30): given, so nothing is calibrated


@pytest.fixture(scope="module")
def hf_tokenizer(hf_folder):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(hf_folder)


@pytest.fixture(scope="module")
def tokenizer(hf_folder):
    return load_tokenizer(hf_folder)


@pytest.fixture(scope="module")
def target(hf_folder):
    torch.set_num_threads(1)
    return load_model(hf_folder)


def hf_chat_ids(hf_tokenizer, msgs) -> list[int]:
    return list(hf_tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)["input_ids"])


def test_plain_prompts_get_the_checkpoints_special_tokens(tokenizer, hf_tokenizer):
    texts = plain_texts(N_PLAIN)
    ours = [tokenizer.encode(t) for t in texts]
    theirs = [hf_tokenizer(t).input_ids for t in texts]
    assert ours == theirs
    assert tokenizer.prefix == []           # SmolLM2 adds no BOS to plain text


def test_chat_prompts_equal_transformers_template(tokenizer, hf_tokenizer):
    template = ChatTemplate(tokenizer)
    assert template.kind == "checkpoint"    # found in chat_template.jinja
    for msgs in chats(N_CHATS):
        ids = template.encode(msgs)
        assert ids == hf_chat_ids(hf_tokenizer, msgs), msgs
        assert ids[0] == tokenizer.bos_id and ids[1] != tokenizer.bos_id   # one <|im_start|>, not two


def plain_greedy(target, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    eng = Engine(target, SpecConfig(method="none", k=0), EngineConfig(max_batch=len(prompts), max_model_len=1024))
    return [s.output_ids for s in eng.generate(prompts, SamplingParams(max_new_tokens=max_new))]


def test_greedy_chat_output_equals_transformers(target, hf_folder, tokenizer, hf_tokenizer):
    """Our greedy continuation of each chat, teacher-forced through transformers' model: its
    argmax at every position is the token we chose (so its own greedy decoding gives ours)."""
    from transformers import AutoModelForCausalLM
    prompts = [hf_chat_ids(hf_tokenizer, m) for m in chats(N_GREEDY, seed=7)]
    outs = plain_greedy(target, prompts, GREEDY_TOKENS)
    hf = AutoModelForCausalLM.from_pretrained(hf_folder, dtype=torch.float32).eval()
    assert sum(map(len, outs)) > N_GREEDY * GREEDY_TOKENS // 2      # the answers are not all empty
    for p, out in zip(prompts, outs):
        with torch.no_grad():
            logits = hf(torch.tensor([p + out])).logits[0]
        chosen = logits[len(p) - 1:].argmax(-1).tolist()         # its greedy pick after each prefix
        assert chosen[:-1] == out
        assert len(out) == GREEDY_TOKENS or chosen[-1] in target.config.eos_ids   # stopped at EOS, not early


@pytest.fixture(scope="module")
def spec_case(target, hf_tokenizer):
    """The speculative tests' prompts and their plain greedy outputs."""
    prompts = [hf_chat_ids(hf_tokenizer, m) for m in chats(N_SPEC, seed=11)]
    return prompts, plain_greedy(target, prompts, SPEC_TOKENS)


@pytest.mark.parametrize("method, options", [("ngram", {"ngram_min": 1, "ngram_max": 4}), ("suffix", {}),
                                             ("layerskip", {"layerskip_layers": SKIP_LAYERS})])
def test_speculative_greedy_equals_plain(target, spec_case, method, options):
    from specdec.build import Models, make_engine
    prompts, plain = spec_case
    eng = make_engine(Models(target, None), SpecConfig(method=method, k=K, options=options),
                      EngineConfig(max_batch=N_SPEC, max_model_len=1024))
    seqs = eng.generate(prompts, SamplingParams(max_new_tokens=SPEC_TOKENS))
    assert [s.output_ids for s in seqs] == plain
    assert eng.metrics.num_accepted_tokens > 0           # it did speculate


def test_a_chat_completion_carries_transformers_prompt_ids(target, tokenizer, hf_tokenizer):
    import httpx
    from tests.server.liveserver import live_server
    from specdec.build import Models
    msgs = chats(1, seed=3)[0]
    ids = hf_chat_ids(hf_tokenizer, msgs)
    [want] = plain_greedy(target, [ids], 16)
    with live_server(Models(target, tokenizer), model_name="smollm2") as (url, _):
        r = httpx.post(url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 16, "temperature": 0}, timeout=60).json()
    assert r["usage"]["prompt_tokens"] == len(ids)
    assert r["choices"][0]["message"]["content"] == tokenizer.decode(want)
