"""`specdec analyze --what-if-shape`: random-weight models of a shape, and the prediction's
arithmetic on known cost curves."""
from __future__ import annotations

import json

import pytest
import torch

from specdec.analysis.what_if import predict, random_model
from specdec.cli import main


def test_a_random_model_of_a_shape_decodes_in_every_weight_type(tiny_dirs):
    config = tiny_dirs[0] / "config.json"
    for weights in ("float32", "int8", "int4"):
        m = random_model(config, weights)
        assert m.weight_dtype == weights
        with torch.inference_mode():
            logits = m(torch.tensor([[3, 4, 5]]), torch.arange(3)[None], m.new_cache(1, 8))
        assert logits.shape == (1, 3, m.config.vocab_size) and torch.isfinite(logits).all()


def test_free_verification_pays_at_any_acceptance_and_linear_cost_never_does():
    ks, bs = 4, [1]
    flat = {(1, q): 1.0 for q in range(1, ks + 2)}                       # scoring q positions costs one step
    out = predict(flat, {1: 0.0}, [0.5, 0.9], bs, ks)[1]
    assert out["break_even_alpha"] == 0.0 and out["best"][0.9] == (4, pytest.approx((1 - 0.9 ** 5) / 0.1))
    linear = {(1, q): float(q) for q in range(1, ks + 2)}                # compute-bound: q steps,
    out = predict(linear, {1: 0.1}, [0.9], bs, ks)[1]                    # and drafting costs something
    assert out["break_even_alpha"] is None and out["best"][0.9] == (0, 1.0)


def test_the_command_writes_its_table(tiny_dirs, tmp_path, capsys):
    config = tiny_dirs[0] / "config.json"
    assert main(["analyze", "--what-if-shape", str(config), "--dtype", "int8", "--batch-sizes", "1,2",
                 "--k-max", "2", "--alpha", "0.7", "--out", str(tmp_path)]) == 0
    assert "break-even alpha" in capsys.readouterr().out
    data = json.loads((tmp_path / "what_if.json").read_text())
    assert set(data["predicted"]) == {"1", "2"} and data["weights"] == "int8"
    assert (tmp_path / "what_if.md").exists()


def test_a_shape_that_would_not_fit_is_refused_before_allocation(tiny_dirs, tmp_path, capsys):
    cfg = json.loads((tiny_dirs[0] / "config.json").read_text())
    cfg.update(hidden_size=65536, intermediate_size=262144, num_hidden_layers=200)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["analyze", "--what-if-shape", str(tmp_path / "config.json"), "--out", str(tmp_path / "o")]) == 2
    assert "memory" in capsys.readouterr().err
