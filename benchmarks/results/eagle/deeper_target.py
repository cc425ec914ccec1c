"""What a deeper target would change: eagle against the draft model on the analyzer's 32-layer
curve (`specdec analyze --what-if-shape`, run.sh) with each proposer's measured per-token
cost and acceptance on the bundled pair, by Leviathan's formula (analysis/predict.py):
speed-up(k) = E[tokens | alpha, k] / (t(1, k+1) / t(1, 1) + k * c).

    python benchmarks/results/eagle/deeper_target.py
"""
import json
from pathlib import Path

from specdec.analysis.predict import expected_tokens

HERE = Path(__file__).parent
# measured at batch 1 on held-out code, k = 4 (goal-b1: mean acceptance length; cost: ms per draft token)
LENGTH = {"greedy": {"eagle": 4.10, "draft": 3.80}, "T=1": {"eagle": 3.22, "draft": 3.12}}


def alpha_of(length: float, k: int = 4) -> float:
    """The i.i.d. per-token acceptance alpha whose expected tokens per round at k is `length`."""
    lo, hi = 0.0, 0.9999
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < length else (lo, mid)
    return lo


MEASURED = {mode: {m: alpha_of(L) for m, L in per.items()} for mode, per in LENGTH.items()}
cost = json.loads((HERE / "cost/cost.json").read_text())["results"]
ms = {m: cost[m]["per_draft_token_ms"] for m in ("eagle", "draft")}
for shape in ("bundled-8-layers", "target-32-layers"):
    t = json.loads((HERE / f"what-if-{shape}/what_if.json").read_text())["t_target_s"]
    t1 = t["1,1"]
    for mode, alphas in MEASURED.items():
        best = {}
        for m, a in alphas.items():
            c = ms[m] / 1e3 / t1
            best[m] = max((expected_tokens(a, k) / (t[f"1,{k + 1}"] / t1 + k * c), k, c) for k in range(1, 9))
        (se, ke, ce), (sd, kd, cd) = best["eagle"], best["draft"]
        print(f"{shape:17s} {mode:6s} t(1,1) {t1 * 1e3:5.1f} ms | alpha {alphas['eagle']:.3f} / {alphas['draft']:.3f} | "
              f"eagle c {ce:.3f} k={ke} {se:.2f}x | "
              f"draft c {cd:.3f} k={kd} {sd:.2f}x | eagle/draft {se / sd:.2f}")
