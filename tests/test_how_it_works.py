"""docs/how-it-works.md: its plots come from the stored results by the script, and the
figures it quotes are the ones the script and the stored trace give."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "how-it-works.md").read_text()
PLOTS = ("how_cost_curve", "how_tokens_per_round", "how_speedup_formula", "how_speedup_spread")


def test_script_draws_the_plots_and_the_doc_quotes_its_figures(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "how_it_works_plots.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    fig = json.loads(out)
    for name in PLOTS:
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"(img/{name}.png)" in DOC and (ROOT / "docs" / "img" / f"{name}.png").exists()
    c = fig["cost_curve"]
    assert f"{c['batch1_t_over_t1']['5']:.2f} at q = 5" in DOC
    lo, mid, hi = c["trace_verify_over_plain"]
    assert f"{lo:.2f}–{hi:.2f}× (median {mid:.2f}×)" in DOC
    f = fig["speedup_formula"]
    assert f"median error is {f['median_abs_err']:.0%}" in DOC and f"the largest {f['max_abs_err']:.0%}" in DOC
    s = fig["speedup_spread"]
    assert f"{s['min'][3]:.2f}×" in DOC and f"{s['max'][3]:.2f}×" in DOC and s["in_band"] == 0
    for w, row in fig["tokens_per_round"].items():
        cells = " | ".join(f"{m:.2f} / {p:.2f}" for m, p in (row[f"k={k}"] for k in (2, 4, 8)))
        assert f"| {w} | {row['alpha_k1']:.2f} | {cells} |" in DOC


def test_worked_example_is_the_stored_trace():
    trace = json.loads((ROOT / "benchmarks" / "results" / "trace" / "trace.json").read_text())
    s = trace["stats"]
    assert (f"{len(trace['rounds'])} rounds, {len(trace['output_ids'])} tokens, {s['accepted_tokens']} of "
            f"{s['draft_tokens']} drafts accepted") in DOC
    for r in trace["rounds"][:3]:
        for d in r["drafts"]:
            if d["reached"]:
                assert f"`{d['text']!r}` | {d['q']:.{4 if d['q'] < 0.01 else 3}f}" in DOC
    first = trace["rounds"][0]
    assert f"`{first['next']['text']!r}` ({first['next']['prob']:.3f})" in DOC


def test_regime_rows_quote_the_stored_analysis():
    res = json.loads((ROOT / "benchmarks" / "results" / "analyze" / "quick-10" / "results.json").read_text())
    spec_doc = (ROOT / "docs" / "speculation.md").read_text()
    assert len(res["regimes"]) == 3
    for r in res["regimes"]:
        c = r["cell"]
        cell = f"`{c['workload']}`, b={c['batch']}, T={c['temperature']:g}, k={c['k']}"
        figures = f"{c['alpha']:.2f} | {c['tokens_per_step']:.2f} | {c['speedup']:.2f}×"
        for doc in (DOC, spec_doc):
            row = next((line for line in doc.splitlines() if cell in line), "")
            assert figures in row and f"{c['pred']:.2f}×" in row, (cell, row)
    assert f"Median absolute error over {res['errors']['cells']} cells: {res['errors']['median_abs_err']:.0%}" in spec_doc
