"""Feature heads from the command line, and the heads it refuses: one line, exit code 2."""
from __future__ import annotations

import json

import pytest
import torch

from specdec.cli import main
from specdec.errors import CheckpointError
from specdec.models.head_loader import load_head, load_mtp, save_head, weights_sha256, write_mtp
from specdec.models.feature_head import HeadConfig
from tests.conftest import make_model
from tests.proposers.heads import random_head


@pytest.fixture(scope="module")
def made(tiny_dirs, tiny_target, tmp_path_factory):
    """(target dir, its head dir, an MTP copy of the target): a head whose config names the target."""
    root = tmp_path_factory.mktemp("head-inputs")
    target_dir, _ = tiny_dirs
    head = random_head(tiny_target, seed=4, draft_vocab=list(range(100)))
    object.__setattr__(head.config, "target_sha256", weights_sha256(target_dir))
    save_head(head, root / "eagle", dtype=torch.float32)
    write_mtp(head, target_dir, root / "mtp", dtype=torch.float32)
    return target_dir, root / "eagle", root / "mtp"


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_with_eagle_and_mtp_is_exact(capsys, made):
    target, head, mtp = made
    common = ["--prompt", "def f(x):", "--max-new-tokens", "10", "--ignore-eos", "--json"]
    code, out, _ = _run(capsys, "generate", "--target", str(target), *common)
    plain = json.loads(out)["token_ids"]
    for extra in (["--target", str(target), "--method", "eagle", "--head", str(head)],
                  ["--target", str(mtp), "--method", "mtp"]):
        code, out, err = _run(capsys, "generate", *extra, "--k", "3", *common)
        res = json.loads(out)
        assert code == 0 and res["token_ids"] == plain and res["stats"]["drafts"] > 0, err


def _one_line_error(capsys, *argv) -> str:
    code, out, err = _run(capsys, *argv)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_bad_heads_exit_2_with_one_line(capsys, made, tmp_path):
    target, head, mtp = made
    gen = ["generate", "--prompt", "x", "--max-new-tokens", "2", "--k", "2"]
    assert "--head" in _one_line_error(capsys, *gen, "--target", str(target), "--method", "eagle")
    assert "no MTP layers" in _one_line_error(capsys, *gen, "--target", str(target), "--method", "mtp")
    assert "no feature head" in _one_line_error(capsys, *gen, "--target", str(target), "--method", "eagle",
                                                "--head", str(tmp_path / "missing"))
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "config.json").write_text((head / "config.json").read_text())
    (corrupt / "model.safetensors").write_bytes(b"\x00" * 64)
    assert "corrupt" in _one_line_error(capsys, *gen, "--target", str(target), "--method", "eagle",
                                        "--head", str(corrupt))
    # the MTP copy's weights file differs from the target the head was trained on: another target
    assert "another target" in _one_line_error(capsys, *gen, "--target", str(mtp), "--method", "eagle",
                                               "--head", str(head))


def test_a_head_for_another_shape_is_refused(made, tmp_path):
    _, head, _ = made
    for kw, what in ((dict(hidden_size=32), "hidden size"), (dict(vocab=1000), "vocabulary")):
        other = make_model(1, **kw)
        with pytest.raises(CheckpointError, match=what):
            load_head(head, other)
    cfg = json.loads((head / "config.json").read_text())
    cfg["draft_vocab_size"] = 10 ** 6
    bad = tmp_path / "big"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="draft_vocab_size"):
        load_head(bad, make_model(0))


def test_head_config_round_trips_and_rejects_other_files():
    cfg = HeadConfig.for_target(make_model(0).config, 100, "ab" * 32)
    assert HeadConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(CheckpointError, match="not a specdec feature head"):
        HeadConfig.from_dict({"architectures": ["LlamaForCausalLM"]})


def test_mtp_weights_sit_in_deepseek_v3s_layout(made):
    from safetensors.torch import load_file
    target, _, mtp = made
    cfg = json.loads((mtp / "config.json").read_text())
    assert cfg["num_nextn_predict_layers"] == 1
    L = cfg["num_hidden_layers"]
    keys = {k for k in load_file(str(mtp / "model.safetensors")) if k.startswith(f"model.layers.{L}.")}
    assert {f"model.layers.{L}.{n}.weight" for n in ("enorm", "hnorm", "eh_proj", "shared_head.norm",
                                                       "self_attn.q_proj", "mlp.down_proj")} <= keys
    with pytest.raises(CheckpointError, match="no MTP layers"):
        load_mtp(target, make_model(0))
