"""Pure helper logic of the peer benchmark: roofline arithmetic, log parsing, identity, table."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import llamacpp  # noqa: E402
import report  # noqa: E402
import roofline  # noqa: E402

CFG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
       "num_key_value_heads": 2, "vocab_size": 1000}


def test_weight_bytes_counts_every_matrix_once():
    d, f, L, V, hd, kvh = 64, 128, 2, 1000, 16, 2
    per_layer = d * d + 2 * d * kvh * hd + d * d + 3 * d * f + 2 * d
    assert roofline.weight_bytes(CFG) == 4 * (L * per_layer + d + V * d)


def test_weight_bytes_matches_parameter_count_of_a_tied_model():
    torch = pytest.importorskip("torch")
    from specdec.models.config import ModelConfig
    from specdec.models.llama import LlamaModel
    cfg = ModelConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=1)
    n = sum(p.numel() for p in LlamaModel(cfg).parameters())  # tied: the V x d matrix counted once
    assert roofline.weight_bytes(CFG) == 4 * n
    del torch


def test_plain_bound_and_kv():
    kv = roofline.kv_bytes(CFG, 100)
    assert kv == 4 * 2 * 2 * 2 * 16 * 100
    bw = 1e10
    assert roofline.plain_bound(bw, CFG, 100, 0) == pytest.approx(bw / (roofline.weight_bytes(CFG) + kv))


def test_expected_tokens_and_spec_bound():
    assert roofline.expected_tokens(0.0, 5) == 1.0
    assert roofline.expected_tokens(1.0, 4) == 5.0
    assert roofline.expected_tokens(0.5, 2) == pytest.approx(1.75)
    # free perfect drafts: the bound grows to the largest k
    assert roofline.spec_bound(10.0, 1.0, 0.0, k_max=8) == (90.0, 8)
    # useless drafts: speculation cannot beat plain
    assert roofline.spec_bound(10.0, 0.0, 0.1) == (10.0, 0)
    v, k = roofline.spec_bound(10.0, 0.8, 0.1)
    assert v == pytest.approx(max(10 * roofline.expected_tokens(0.8, j) / (1 + 0.1 * j) for j in range(1, 17)))


def test_identity_and_divergence():
    assert report.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert report.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert report.first_divergence([1, 2], [1, 2, 3]) == 2
    assert report.identity([[1, 2], [3]], [[1, 2], [3]]) == "yes"
    assert report.identity([[1, 2], [3]], [[1, 2], [4]]) == "no (token 0)"
    assert report.identity(["abc"], ["abd"]) == "no (char 2)"
    assert report.identity([[1]], None) == "n/a"


def _row(name, tok_s, group="g"):
    return {"group": group, "name": name, "setting": "s", "cells": {"greedy/code": {"tok_s": tok_s}},
            "identity": {"code": "yes"}}


def test_table_ratios_and_skips():
    rows = [_row("specdec plain", 20.0), _row("specdec draft", 50.0),
            {"group": "llama.cpp", "name": "llama.cpp (all rows)", "skip": "not built"}]
    md = report.markdown_table(rows, ["code"], ["greedy"]).splitlines()
    assert md[0].count("|") == md[1].count("|") == md[2].count("|")
    assert "| 50.0 | 2.50 | yes |" in md[3]
    assert "skipped: not built" in md[4]


def test_goals_met_and_not_met():
    rows = [_row("specdec plain", 20.0), _row("specdec draft", 50.0), _row("HF assisted (defaults)", 30.0),
            _row("HF assisted (fixed k)", 20.0), _row("llama.cpp plain", 100.0),
            _row("llama.cpp speculative", 150.0)]
    g = {x["goal"]: x for x in report.goals(rows, "greedy/code", roofline_plain=40.0)}
    hf, ratio, plain, draft, vs_spec, roof = g.values()
    assert hf["value"] == pytest.approx(50 / 30) and hf["met"] is False
    assert ratio["value"] == pytest.approx(2.5 / 1.5) and ratio["met"] is True
    assert plain["value"] == pytest.approx(0.2) and plain["met"] is False
    assert draft["value"] == pytest.approx(0.5) and draft["target"] == 1.5
    assert vs_spec["value"] == pytest.approx(50 / 150) and vs_spec["met"] is False
    assert roof["value"] == pytest.approx(0.5) and roof["met"] is False and roof["target"] == 0.7
    sampled = {x["goal"]: x for x in report.goals(rows, "greedy/code".replace("greedy", "sample"), 40.0)}
    assert sampled["specdec draft model ≥ 1.2× llama.cpp plain"]["target"] == 1.2
    assert not any("speculative" in k and "llama.cpp speculative" in k for k in sampled)
    assert report.goals(rows[:1], "greedy/code", None)[0]["met"] is None


def test_parse_llamacpp_logs():
    spec = ("encoded  129 tokens in    0.050 seconds, speed: 2580.000 t/s\n"
            "decoded  130 tokens in    1.250 seconds, speed:  104.000 t/s\n"
            "n_draft   = 4\nn_predict = 130\nn_drafted = 100\nn_accept  = 60\n")
    n, s, a = llamacpp.parse_timing("", spec, 128)
    assert (n, a) == (130, 0.6) and s == pytest.approx(1.3)
    comp = ("llama_perf_context_print: prompt eval time =      50.00 ms /   129 tokens\n"
            "llama_perf_context_print:        eval time =    1270.00 ms /   127 runs   (10 ms per token)\n")
    n, s, a = llamacpp.parse_timing("", comp, 128)
    assert (n, a) == (128, None) and s == pytest.approx(1.32)
    assert llamacpp.parse_timing("", "nothing", 7) == (7, None, None)


def test_generated_text_strips_echoed_prompt():
    assert llamacpp.generated_text("\n\n<s>hello world more\n\n", "hello world", True) == " more"
    assert llamacpp.generated_text(" more", "hello world", False) == " more"


class _Fake:
    """A runner whose speed depends on its name and thread count only."""
    group = "g"

    def __init__(self, name, speed, fail=False):
        self.name, self.speed, self.fail, self.setting, self.threads = name, speed, fail, "s", 2

    def run(self, prompt, greedy, seed, n):
        if self.fail:
            raise RuntimeError("boom")
        return {"n_new": n, "seconds": n / (self.speed * self.threads ** 0.5 if self.threads else 1)}


def test_tune_keeps_order_best_k_and_threads():
    import argparse
    import peers
    rows = [_Fake("plain", 10), _Fake("fam k=2", 12), _Fake("fam k=4", 15), _Fake("bad", 1, fail=True),
            _Fake("other", 5)]
    args = argparse.Namespace(threads=[1, 2], seed=0, new_tokens=8, ks=[2, 4])
    kept = peers.tune(rows, [0, 5, 6], args, log=lambda s: None)
    assert [r.name for r in kept] == ["plain", "fam", "bad", "other"]
    assert kept[1].speed == 15 and kept[1].setting.startswith("best of k=[2, 4]")
    assert all(r.threads == 2 for r in kept if not getattr(r, "error", None))
    assert "boom" in kept[2].error


def test_log_flush_patch_is_idempotent(tmp_path):
    f = tmp_path / "common" / "log.cpp"
    f.parent.mkdir()
    f.write_text("x\n" + llamacpp._LOG_ANCHOR + "\n}\n")
    assert llamacpp.patch_log_flush(tmp_path)
    once = f.read_text()
    assert "std::atexit" in once and once.count("set_colors") == 1
    assert llamacpp.patch_log_flush(tmp_path) and f.read_text() == once
    f.write_text("unrelated\n")
    assert not llamacpp.patch_log_flush(tmp_path)


def test_cells_carry_the_repetition_of_their_outputs():
    loop = {"n_new": 40, "seconds": 1.0, "tokens": [1, 2, 3, 4] * 10}
    fresh = {"n_new": 40, "seconds": 1.0, "tokens": list(range(40))}
    assert report.summarize([loop, fresh])["repetition"] == 29 / 80
    assert report.summarize([{"n_new": 4, "seconds": 1.0, "tokens": None}])["repetition"] is None
    rows = [{"group": "g", "name": "specdec plain", "setting": "s", "identity": {"code": "yes"},
             "cells": {"greedy/code": report.summarize([loop])}}]
    assert report.markdown_table(rows, ["code"], ["greedy"]).splitlines()[2].endswith("| 0.72* |")


def test_a_repeated_prompt_does_not_find_its_own_earlier_output(tiny_target):
    """Every specdec run decodes on a fresh engine: the suffix proposer indexes earlier
    requests' outputs, and a reused engine would propose the repeated prompt's own output back
    (acceptance near 1 on the second run)."""
    import runners
    from specdec.build import Models
    from specdec.config import SpecConfig
    from tests.conftest import random_prompts
    row = runners.SpecdecRunner("suffix", Models(tiny_target, None), SpecConfig(method="suffix", k=4), threads=1)
    prompt = random_prompts(1, seed=5, vocab=64)[0]
    first, second = (row.run(prompt, greedy=True, seed=0, n=48) for _ in range(2))
    assert first["tokens"] == second["tokens"] and first["acceptance"] == second["acceptance"]
