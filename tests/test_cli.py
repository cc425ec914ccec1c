"""`specdec generate`: output formats, and one-line errors with exit code 2 for bad input."""
import json
import subprocess
import sys

import pytest
import torch

from specdec.cli import main
from specdec.models.loader import save_checkpoint
from tests.conftest import TOKENIZER, make_model


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_output_and_identity(capsys, tiny_dirs):
    t, d = tiny_dirs
    args = ["generate", "--target", str(t), "--prompt", "def f(x):", "--max-new-tokens", "12",
            "--ignore-eos", "--json"]
    code, out, _ = run(capsys, *args)
    plain = json.loads(out)
    assert code == 0 and len(plain["token_ids"]) == 12 and plain["stats"]["drafts"] == 0
    code, out, _ = run(capsys, *args, "--draft", str(d), "--k", "3")
    spec = json.loads(out)
    assert spec["token_ids"] == plain["token_ids"]
    s = spec["stats"]
    assert s["drafts"] > 0 and s["draft_tokens"] == 3 * s["drafts"]
    assert s["mean_acceptance_length"] == pytest.approx(1 + s["accepted_tokens"] / s["drafts"])
    assert set(s) >= {"target_forwards", "acceptance_rate", "per_position_acceptance", "tokens_per_s", "wall_s"}


def test_streams_text_and_stats_to_stderr(capsys, tiny_dirs):
    t, d = tiny_dirs
    code, out, err = run(capsys, "generate", "--target", str(t), "--draft", str(d), "--k", "2",
                         "--prompt", "x = ", "--max-new-tokens", "8", "--ignore-eos")
    assert code == 0 and out.strip()
    assert "mean_acceptance_length" in json.loads(err.strip().splitlines()[-1])


def test_batch_file(capsys, tiny_dirs, tmp_path):
    t, _ = tiny_dirs
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a"}\n\n{"prompt": "import os"}\n')
    code, out, _ = run(capsys, "generate", "--target", str(t), "--batch-file", str(f),
                       "--max-new-tokens", "4", "--json", "--temperature", "1", "--seed", "3")
    assert code == 0 and len(out.strip().splitlines()) == 2


@pytest.fixture(scope="module")
def other_vocab_dir(tmp_path_factory):
    m = make_model(seed=2, vocab=4096)
    return save_checkpoint(m, TOKENIZER, tmp_path_factory.mktemp("v") / "draft", dtype=torch.float32)


def bad_cases(tiny_dirs, other_vocab_dir, tmp_path):
    t, d = tiny_dirs
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "config.json").write_text((t / "config.json").read_text())
    (corrupt / "model.safetensors").write_bytes(b"not safetensors")
    arch = tmp_path / "arch"
    arch.mkdir()
    (arch / "config.json").write_text(json.dumps({"architectures": ["GPTNeoXForCausalLM"]}))
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"prompt": "ok"}\n{"prompt": \n')
    base = ["generate", "--target", str(t), "--prompt", "x"]
    return {
        "missing checkpoint": (["generate", "--target", str(tmp_path / "none"), "--prompt", "x"], "not found"),
        "corrupt checkpoint": (["generate", "--target", str(corrupt), "--prompt", "x"], "corrupt"),
        "unsupported architecture": (["generate", "--target", str(arch), "--prompt", "x"], "GPTNeoXForCausalLM"),
        "draft vocabulary": (base + ["--draft", str(other_vocab_dir)], "vocabulary"),
        "empty prompt": (["generate", "--target", str(t), "--prompt", ""], "empty prompt"),
        "too long": (base + ["--max-new-tokens", "100000"], "exceeds the context length"),
        "k too large": (base + ["--draft", str(d), "--k", "17"], "k must be"),
        "k negative": (base + ["--draft", str(d), "--k", "-1"], "k must be"),
        "temperature": (base + ["--temperature", "-0.5"], "temperature"),
        "top_p zero": (base + ["--top-p", "0"], "top_p"),
        "top_p above one": (base + ["--top-p", "1.5"], "top_p"),
        "top_k negative": (base + ["--top-k", "-1"], "top_k"),
        "malformed jsonl": (["generate", "--target", str(t), "--batch-file", str(jsonl)], "bad.jsonl:2"),
        "unknown method": (base + ["--method", "telepathy"], "unknown method"),
        "parallel without a mask token": (base + ["--draft", str(d), "--method", "parallel", "--k", "3"], "mask token"),
        "parallel without a draft": (base + ["--method", "parallel", "--k", "3"], "needs a parallel draft"),
    }


def test_bad_input_exits_2_with_one_line(capsys, tiny_dirs, other_vocab_dir, tmp_path):
    for name, (argv, needle) in bad_cases(tiny_dirs, other_vocab_dir, tmp_path).items():
        code, out, err = run(capsys, *argv)
        assert code == 2, name
        lines = err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (name, err)


def test_no_traceback_in_a_real_process(tiny_dirs):
    t, _ = tiny_dirs
    r = subprocess.run([sys.executable, "-m", "specdec.cli", "generate", "--target", str(t), "--prompt", "",
                        "--max-new-tokens", "3"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "empty prompt" in r.stderr
