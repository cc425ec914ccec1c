"""`specdec trace`: the record replays through the pure verifier functions to the emitted
tokens, the tokens are `generate`'s, and the page works in headless Chromium."""
import json
import re
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import load_file

from specdec.cli import main
from specdec.verify.greedy import greedy_verify
from specdec.verify.rejection import rejection_verify

PROMPT = "def f(x):"
COMMON = ["--prompt", PROMPT, "--k", "3", "--max-new-tokens", "20", "--ignore-eos"]
MODES = {"greedy": [], "T=1": ["--temperature", "1", "--seed", "5"],
         # the bundled target with prompt lookup: no q (one-hot), rounds without drafts and
         # rounds drafting fewer than k (the tiny random models never repeat a prompt n-gram)
         "ngram T=1": ["--method", "ngram", "--temperature", "1", "--seed", "1",
                       "--prompt", "x = 1\ny = 2\nx = 1\ny = 2\nx = 1\n"]}
BUNDLED = {"ngram T=1"}


@pytest.fixture(scope="module", params=list(MODES))
def traced(request, tiny_dirs, tmp_path_factory):
    t, d = tiny_dirs
    out = tmp_path_factory.mktemp("trace")
    models = [] if request.param in BUNDLED else ["--target", str(t), "--draft", str(d)]
    argv = [*models, *COMMON, *MODES[request.param]]
    assert main(["trace", *argv, "--out", str(out)]) == 0
    record = json.loads((out / "trace.json").read_text())
    return request.param, argv, out, record, load_file(str(out / "trace.safetensors"))


def test_replay_through_the_verifier_reproduces_every_token(traced):
    mode, _, _, record, tensors = traced
    out = list(record["first_token"])
    assert any(r["num_draft"] for r in record["rounds"])
    for r in record["rounds"]:
        i, n = r["index"], r["num_draft"]
        p = tensors[f"round{i}.p"][None]                                        # (1, k+1, V)
        tokens = [d["token"] for d in r["drafts"]]
        for j, d in enumerate(r["drafts"]):                                    # the record's numbers are the tensors'
            assert d["p"] == p[0, j, d["token"]].item()
        if mode == "greedy":
            acc, nxt = greedy_verify(p.argmax(-1).tolist(), [tokens], [n])
            acc, nxt = acc[0], nxt[0]
        else:
            q = tensors[f"round{i}.q"][None] if f"round{i}.q" in tensors else None  # (1, k, V) or one-hot
            u = torch.tensor([d["u"] for d in r["drafts"]] + [r["next"]["u"]])  # exact float32s from JSON
            kk = tensors[f"round{i}.p"].shape[0] - 1
            assert torch.equal(u[:n], tensors[f"round{i}.u"][:n]) and u[n] == tensors[f"round{i}.u"][kk]
            for j, d in enumerate(r["drafts"]):
                assert d["q"] == (1.0 if q is None else q[0, j, d["token"]].item())
            acc, nxt = rejection_verify(p, q, torch.tensor([tokens], dtype=torch.long), torch.tensor([n]),
                                        u[None, :n], u[None, n])
            acc, nxt = int(acc[0]), int(nxt[0])
        assert (acc, nxt) == (r["accepted"], r["next"]["token"])
        assert r["emitted"] == tokens[:acc] + [nxt]
        assert [d["accept"] for d in r["drafts"][:acc + 1]] == [True] * acc + [False] * (acc < n)
        assert r["next"]["prob"] > 0                                           # drawn where its law has mass
        out += r["emitted"][:r["kept"]]
    assert out == record["output_ids"] and len(out) == 20
    s = record["stats"]
    assert s["accepted_tokens"] == sum(r["accepted"] for r in record["rounds"])
    assert s["recovered_tokens"] + s["bonus_tokens"] == sum(r["num_draft"] > 0 for r in record["rounds"])


def test_trace_tokens_are_generates(traced, capsys):
    _, argv, _, record, _ = traced
    assert main(["generate", *argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == record["output_ids"]


def test_record_has_timings_and_texts(traced):
    _, _, out, record, _ = traced
    for r in record["rounds"]:
        t = r["time"]
        assert t["target_forward_s"] > 0 and t["plain_forward_s"] > 0
        assert t["ratio"] == pytest.approx(t["target_forward_s"] / t["plain_forward_s"])
        assert len(r["emitted_text"]) == len(r["emitted"]) and len(r["next"]["top"]) == 5
    html = (out / "trace.html").read_text()
    assert not re.search(r'(src|href)="(http|//)', html) and "<script>" in html
    spans = re.findall(r'<span class="tok (\w+)[^"]*" data-round="(\d+)"', html)
    assert len(spans) == 1 + sum(len(r["emitted"]) for r in record["rounds"])


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_page_renders_and_a_click_shows_the_round(traced, tmp_path):
    _, _, out, record, _ = traced
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    rounds = [0] + [r["index"] for r in record["rounds"] for _ in r["emitted"]]
    n = len(rounds) - 2                                    # a token of the last round but one or the last
    url = (out / "trace.html").as_uri() + f"#click={n}"
    dom = subprocess.run(["chromium", *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert dom.count('class="tok ') >= len(rounds)
    assert f'data-shown="{rounds[n]}"' in dom                                   # the script ran the click
    shown = re.findall(r'<section class="round" id="round-(\d+)"(?: hidden="")?>', dom)
    visible = re.findall(r'<section class="round" id="round-(\d+)">', dom)
    assert visible == [str(rounds[n])] and len(shown) == len(record["rounds"]) + 1
    assert "selected" in re.findall(r'<span class="(tok [^"]*)" data-round', dom)[n]


def test_bad_input_is_one_line_exit_2(tiny_dirs, tmp_path, capsys):
    t, d = tiny_dirs
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["trace", "--target", str(t), "--draft", str(d), "--prompt", "x", "--out", str(blocker)]) == 2
    assert main(["trace", "--target", str(t), "--draft", str(d), "--prompt", "", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("specdec: error:") for e in err)
