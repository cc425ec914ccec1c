"""SmolLM2-135M-Instruct as users hold it: its tokenizer's own rules and its chat template
(read from the GGUF file itself, and from the folder transformers makes of it), greedy output
of the GGUF file equal to transformers' on the same weights, speculative output equal to
plain, and the server and the CLI on the file."""
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


# llama.cpp's ids for a text where a digit follows a whitespace run (llama-tokenize on the file):
# the file's pre-tokenizer ("smollm") splits digits off first, so "\n\n" stays one token
LLAMACPP_IDS = ("x.\n\n2. ab", [104, 30, 1116, 34, 30, 453])


@pytest.fixture(scope="module")
def hf_tokenizer(hf_folder):
    """transformers' tokenizer of the folder it wrote: the reference for the folder, and for
    the prompt ids the model comparisons feed."""
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(hf_folder)


@pytest.fixture(scope="module", params=["gguf", "folder"])
def pair(request, gguf_path, hf_folder):
    """(specdec's tokenizer, transformers' reference) from the GGUF file's metadata and from
    transformers' folder (tokenizer_config.json, chat_template.jinja). transformers' GGUF reader
    leaves out the digit split the file's `smollm` pre-tokenizer declares (llama.cpp and the
    model's own tokenizer make it), so the GGUF's reference is transformers' with that split."""
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer
    ref = AutoTokenizer.from_pretrained(hf_folder)
    if request.param == "gguf":
        ref.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return load_tokenizer(gguf_path if request.param == "gguf" else hf_folder), ref


@pytest.fixture(scope="module")
def tokenizer(gguf_path):
    return load_tokenizer(gguf_path)


@pytest.fixture(scope="module")
def target(gguf_path):
    torch.set_num_threads(1)
    return load_model(gguf_path)


def hf_chat_ids(hf_tokenizer, msgs) -> list[int]:
    return list(hf_tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)["input_ids"])


def test_plain_prompts_get_the_checkpoints_special_tokens(pair):
    ours, ref = pair
    texts = plain_texts(N_PLAIN)
    assert [ours.encode(t) for t in texts] == [ref(t).input_ids for t in texts]
    assert ours.prefix == []                 # SmolLM2 adds no BOS to plain text


def test_the_gguf_tokenizer_splits_as_llama_cpp(tokenizer):
    text, ids = LLAMACPP_IDS
    assert tokenizer.encode(text) == ids


def test_chat_prompts_equal_transformers_template(pair):
    ours, ref = pair
    template = ChatTemplate(ours)
    assert template.kind == "checkpoint"     # found in chat_template.jinja, or in the GGUF's metadata
    for msgs in chats(N_CHATS):
        ids = template.encode(msgs)
        assert ids == hf_chat_ids(ref, msgs), msgs
        assert ids[0] == ours.bos_id and ids[1] != ours.bos_id   # one <|im_start|>, not two


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


def test_generate_chat_on_the_gguf_file_says_how_its_weights_were_read(gguf_path, hf_tokenizer, target, capsys):
    import json
    from specdec.cli import main
    msg = "Write a haiku about the sea."
    assert main(["generate", "--target", str(gguf_path), "--chat", msg, "--method", "ngram", "--k", "3",
                 "--max-new-tokens", "12", "--threads", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [want] = plain_greedy(target, [hf_chat_ids(hf_tokenizer, [{"role": "user", "content": msg}])], 12)
    assert out["token_ids"] == want
    assert out["weights"]["stored"]["Q4_1"] > 0 and out["weights"]["how"] == "dequantized to float32 at load"


def test_llm_chat_on_the_gguf_file_equals_plain_greedy(gguf_path, hf_tokenizer, target):
    from specdec import LLM, SamplingParams
    msgs = [{"role": "user", "content": "Name three colours."}]
    llm = LLM(target=gguf_path, method="ngram", k=3, max_batch=1, max_model_len=512, threads=1)
    [out] = llm.chat(msgs, SamplingParams(max_new_tokens=12))
    [want] = plain_greedy(target, [hf_chat_ids(hf_tokenizer, msgs)], 12)
    assert out.token_ids == want


def test_method_eagle_finds_the_shipped_head_and_equals_plain_greedy(gguf_path, target):
    """The head trained for the file as its package ships it (specdec/bundled/eagle-smollm2/)
    is found by the file's hash, with no head named; its greedy output is plain's."""
    from specdec import LLM, SamplingParams
    from specdec.build import find_head
    from specdec.defaults import MODELS_DIR
    if not (MODELS_DIR / "eagle-smollm2" / "config.json").exists():
        pytest.skip("no head shipped for SmolLM2-135M-Instruct (specdec/bundled/eagle-smollm2/)")
    assert find_head(gguf_path) == MODELS_DIR / "eagle-smollm2"
    torch.set_num_threads(1)
    llm = LLM(target=gguf_path, method="eagle", k=4, max_batch=1, max_model_len=512, threads=1)
    for msgs in chats(2, seed=13):
        [out] = llm.chat(msgs, SamplingParams(max_new_tokens=SPEC_TOKENS))
        assert out.token_ids == plain_greedy(target, [out.prompt_token_ids], SPEC_TOKENS)[0]
    assert llm.engine.metrics.num_accepted_tokens > 0
    auto = LLM(target=gguf_path, method="auto", k=4, auto_arms="ngram,eagle", max_batch=1, max_model_len=512,
               threads=1)                                  # auto's eagle arm reads the same head, unasked
    [out] = auto.chat(chats(1, seed=17)[0], SamplingParams(max_new_tokens=SPEC_TOKENS))
    assert out.token_ids == plain_greedy(target, [out.prompt_token_ids], SPEC_TOKENS)[0]
