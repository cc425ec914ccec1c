"""The Python API: LLM.generate and LLM.stream agree with `specdec generate`, vLLM's
speculative_config is understood, bad input raises one-line SpecdecErrors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import specdec
from specdec import LLM, CheckpointError, ConfigError, PromptError, SamplingParams, SpecdecError
from specdec.cli import main

PROMPT = "def f(x):"
NEW = 12  # tokens per request in these tests


@pytest.fixture(scope="module")
def tiny_llm(tiny_dirs) -> LLM:
    t, d = tiny_dirs
    return LLM(t, d, k=3)


def cli_json(capsys, *argv) -> dict:
    assert main(["generate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_bundled_greedy_tokens_equal_the_command_line(capsys):
    # one prompt: the command line runs it at batch 1, so the API does too (LLM() with every
    # default runs in tests/test_docs_examples.py, README's example)
    out = LLM(max_batch=1).generate([PROMPT], SamplingParams(max_new_tokens=NEW))[0]
    cli = cli_json(capsys, "--prompt", PROMPT, "--max-new-tokens", str(NEW))
    assert out.token_ids == cli["token_ids"] and out.text == cli["text"]
    assert out.finish_reason in ("stop", "length") and out.prompt == PROMPT
    assert set(out.stats.as_dict()) == set(cli["stats"])
    s = out.stats
    assert s.num_drafts > 0 and s.num_accepted_tokens <= s.num_draft_tokens
    assert s.mean_acceptance_length == pytest.approx(1 + s.num_accepted_tokens / s.num_drafts)
    assert s.per_position_acceptance == [a / s.num_drafts for a in s.num_accepted_tokens_per_pos]


def test_fixed_k_on_tiny_models_matches_the_command_line_and_plain_decoding(capsys, tiny_dirs, tiny_llm):
    t, d = tiny_dirs
    params = SamplingParams(max_new_tokens=NEW, ignore_eos=True)
    out = tiny_llm.generate(PROMPT, params)[0]
    cli = cli_json(capsys, "--target", str(t), "--draft", str(d), "--k", "3", "--prompt", PROMPT,
                   "--max-new-tokens", str(NEW), "--ignore-eos")
    plain = LLM(t).generate(PROMPT, params)[0]
    assert out.token_ids == cli["token_ids"] == plain.token_ids and len(out.token_ids) == NEW
    assert out.finish_reason == "length" and plain.stats.num_drafts == 0
    assert out.stats.num_draft_tokens == 3 * out.stats.num_drafts and len(out.stats.num_accepted_tokens_per_pos) <= 3


def test_batches_mixed_prompt_forms_with_one_params_each(tiny_llm):
    ids = tiny_llm.tokenizer.encode("import os")
    params = [SamplingParams(max_new_tokens=4), SamplingParams(max_new_tokens=6, temperature=1.0, seed=5),
              SamplingParams(max_new_tokens=5)]
    outs = tiny_llm.generate(["x = 1", ids, {"prompt_token_ids": ids}], params)
    assert [len(o.token_ids) <= p.max_new_tokens for o, p in zip(outs, params)] == [True] * 3
    assert outs[1].prompt is None and outs[1].prompt_token_ids == ids and outs[0].prompt == "x = 1"
    alone = tiny_llm.generate([ids], [params[1]])[0]           # a seed reproduces, batched or not
    assert alone.token_ids == outs[1].token_ids
    assert tiny_llm.generate([]) == []


def test_stream_deltas_join_to_the_generated_text(tiny_llm):
    params = SamplingParams(max_new_tokens=NEW, ignore_eos=True)
    deltas = list(tiny_llm.stream(PROMPT, params))
    assert len(deltas) > 1 and all(deltas)
    assert "".join(deltas) == tiny_llm.generate(PROMPT, params)[0].text


def test_an_abandoned_stream_leaves_nothing_behind(tiny_llm):
    it = tiny_llm.stream(PROMPT, SamplingParams(max_new_tokens=NEW, ignore_eos=True))
    next(it)
    unread = tiny_llm.stream("never read", SamplingParams(max_new_tokens=NEW))
    out = tiny_llm.generate("x", SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert len(out) == 1 and len(out[0].token_ids) == 3
    assert not tiny_llm.engine.has_unfinished()
    del it, unread


def test_vllm_speculative_config(tiny_dirs):
    t, d = tiny_dirs
    llm = LLM(model=t, speculative_config={"method": "draft_model", "model": d, "num_speculative_tokens": 2})
    assert (llm.spec.method, llm.spec.k, llm.draft_path) == ("draft", 2, d)
    inferred = LLM(t, speculative_config={"model": str(d), "num_speculative_tokens": 4})
    assert (inferred.spec.method, inferred.spec.k) == ("draft", 4)
    ngram = LLM(t, speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                       "prompt_lookup_min": 2, "prompt_lookup_max": 5})
    assert ngram.spec.method == "ngram" and (ngram.spec.opts["ngram_min"], ngram.spec.opts["ngram_max"]) == (2, 5)
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    assert llm.generate(PROMPT, params)[0].token_ids == ngram.generate(PROMPT, params)[0].token_ids


def test_eagle_by_name_and_by_vllm_config(tiny_dirs, tiny_target, tmp_path):
    from specdec.models.head_loader import save_head
    from tests.proposers.heads import random_head
    t, _ = tiny_dirs
    head = save_head(random_head(tiny_target, seed=5, draft_vocab=list(range(300))), tmp_path / "head",
                     dtype=torch.float32)
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    plain = LLM(t).generate(PROMPT, params)[0].token_ids
    by_name = LLM(t, method="eagle", k=3, head=head)
    vllm = LLM(t, speculative_config={"method": "eagle", "model": str(head), "num_speculative_tokens": 3})
    for llm in (by_name, vllm):
        assert llm.spec.method == "eagle" and llm.generate(PROMPT, params)[0].token_ids == plain


def bad_inputs(tiny_dirs, tiny_llm):
    t, d = tiny_dirs
    return {
        "unknown method": (ConfigError, lambda: LLM(t, method="medusa")),
        "vllm method": (ConfigError, lambda: LLM(t, speculative_config={"method": "medusa"})),
        "eagle without a head": (ConfigError, lambda: LLM(t, method="eagle")),
        "vllm eagle without a head": (ConfigError, lambda: LLM(t, speculative_config={"method": "eagle3"})),
        "vllm key": (ConfigError, lambda: LLM(t, speculative_config={"draft_tensor_parallel_size": 1})),
        "draft twice": (ConfigError, lambda: LLM(t, d, speculative_config={"model": d})),
        "target twice": (ConfigError, lambda: LLM(t, model=t)),
        "draft without a draft": (ConfigError, lambda: LLM(t, method="draft")),
        "k": (ConfigError, lambda: LLM(t, d, k=99)),
        "option typo": (ConfigError, lambda: LLM(t, max_tokens=4)),
        "max_batch": (ConfigError, lambda: LLM(t, max_batch=0)),
        "max_model_len": (ConfigError, lambda: LLM(t, max_model_len=0)),
        "missing checkpoint": (CheckpointError, lambda: LLM(t.parent / "nowhere")),
        "empty prompt": (PromptError, lambda: tiny_llm.generate([""])),
        "flat ids": (PromptError, lambda: tiny_llm.generate([1, 2, 3])),
        "not a prompt": (PromptError, lambda: tiny_llm.generate([3.5])),
        "ids out of range": (PromptError, lambda: tiny_llm.generate([[10 ** 6]])),
        "too long": (PromptError, lambda: tiny_llm.generate("x", SamplingParams(max_new_tokens=10 ** 5))),
        "params count": (ConfigError, lambda: tiny_llm.generate(["a", "b"], [SamplingParams()])),
        "params type": (ConfigError, lambda: tiny_llm.generate("a", {"temperature": 1})),
        "sampling": (ConfigError, lambda: SamplingParams(temperature=-1)),
        "stream": (PromptError, lambda: tiny_llm.stream("")),
        "analyze method none": (ConfigError, lambda: specdec.analyze(t, k=[1], method="none")),
        "analyze workload": (ConfigError, lambda: specdec.analyze(t, d, workload="poetry")),
        "analyze grid": (ConfigError, lambda: specdec.analyze(t, d, k=[99])),
    }


def test_bad_input_raises_one_line_specdec_errors(tiny_dirs, tiny_llm):
    for name, (kind, call) in bad_inputs(tiny_dirs, tiny_llm).items():
        with pytest.raises(kind) as e:
            call()
        assert isinstance(e.value, SpecdecError) and str(e.value) and "\n" not in str(e.value), name
    assert not tiny_llm.engine.has_unfinished()     # a refused batch queues nothing


def test_analyze_returns_what_results_json_holds(tiny_dirs, tmp_path):
    t, d = tiny_dirs
    res = specdec.analyze(t, d, workload="code", k=[1, 2], batch_sizes=[1], temperatures=[0.0], repeats=1,
                          max_new_tokens=6, prompt_tokens=12, out=tmp_path)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert res.to_dict() == on_disk and res.paths["json"] == tmp_path / "results.json"
    assert res.paths["html"].stat().st_size > 0 and res.verdict == on_disk["verdict"]
    assert {(c["k"], c["batch"]) for c in res.cells} == {(1, 1), (2, 1)}
    assert res.errors["greedy_identical"] is True
    assert specdec.Analysis.load(tmp_path) == res
    assert res.k_table is not None and res.paths["k_table"].exists()
    from specdec.config import KTable
    assert KTable.from_vllm(res.k_table["num_speculative_tokens_per_batch_size"]).rows[0][0] == 1


def test_public_names_and_a_light_import():
    for name in specdec.__all__:
        assert getattr(specdec, name) is not None
    with pytest.raises(AttributeError):
        specdec.nothing_here  # noqa: B018
    probe = "import sys, specdec.errors; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "False"
