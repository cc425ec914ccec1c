"""k by batch size, predicted from a few measured (concurrency, k) cells: the arithmetic.

A cell at concurrency c and draft length k measured tokens/s and vLLM's spec-decode counters.
Two facts are read from the cells, and the speed-up of any (c, k) follows from them:

- **Acceptance** does not depend on c: per-position conditional acceptance alpha_j
  (P(draft j+1 accepted | drafts 1..j accepted)) is pooled over every cell that drafted
  position j. A round of k drafts then yields tau(k) = 1 + sum_j prod_{i<=j} alpha_i tokens.
- **The round's cost** relative to a plain step at the same c: a row emits tau tokens per
  round, so r(c, k) = t_round / t_plain = tau_measured * tps_plain / tps_k. It is fitted as
  r = 1 + a_c + b_c k over the measured k at c (a_c = 0 when one k was measured), and a_c,
  b_c are interpolated linearly in log c between measured concurrency levels.

speed-up(c, k) = tau(k) / r(c, k); the table takes the k in 0..k_max with the largest, among
those whose interval (below) stays at or above 1 (k = 0, plain decoding, is 1.0 by
definition): a row drafts only where the measurements say it gains. Measured on specdec serve
(benchmarks/results/k_table): at concurrency 16 the best k's gain was 1.004 [0.91, 1.12], and
drafting there ran 0.94x plain. Nothing past the largest measured k is predicted.
The interval on each prediction moves every alpha_j to the ends of its 95% Wilson interval
and the cost line by twice the fit's residual spread (when three or more k were measured).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import KTable

Z95 = 1.96      # two-sided 95% normal quantile, for the Wilson interval on each alpha_j


@dataclass(frozen=True)
class Cell:
    """One measured (concurrency, k) cell, pooled over the workloads (k = 0: plain)."""
    concurrency: int
    k: int
    tokens_per_s: float
    drafts: float = 0.0
    accepted_per_pos: tuple[float, ...] = ()      # vLLM's per-position accepted counts


@dataclass(frozen=True)
class CostLine:
    """r(k) = 1 + a + b k for k >= 1 at one concurrency; spread: residual RMS of the fit."""
    a: float
    b: float
    spread: float = 0.0

    def ratio(self, k: int) -> float:
        return 1.0 if k == 0 else 1.0 + self.a + self.b * k


def wilson(successes: float, n: float) -> tuple[float, float]:
    """95% Wilson score interval for a proportion."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    den = 1 + Z95 ** 2 / n
    mid = (p + Z95 ** 2 / (2 * n)) / den
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def pooled_alphas(cells: list[Cell]) -> list[tuple[float, float, float]]:
    """[(alpha_j, low, high)] for j = 0 .. the largest k measured - 1, pooled over cells."""
    k_top = max((c.k for c in cells if c.drafts > 0), default=0)
    out = []
    for j in range(k_top):
        num = den = 0.0
        for c in cells:
            if c.k > j and c.drafts > 0 and len(c.accepted_per_pos) > j:
                num += c.accepted_per_pos[j]
                den += c.drafts if j == 0 else c.accepted_per_pos[j - 1]
        a = num / den if den else 0.0
        out.append((a, *wilson(num, den)))
    return out


def tokens_per_round(alphas: list[float], k: int) -> float:
    total, reach = 1.0, 1.0
    for a in alphas[:k]:
        reach *= a
        total += reach
    return total


def fit_cost(cells: list[Cell]) -> dict[int, CostLine]:
    """{concurrency: CostLine} from each level's plain cell and its speculative cells."""
    out = {}
    for c in sorted({x.concurrency for x in cells}):
        plain = [x for x in cells if x.concurrency == c and x.k == 0]
        spec = [x for x in cells if x.concurrency == c and x.k > 0 and x.drafts > 0 and x.tokens_per_s > 0]
        if not plain or not spec or plain[0].tokens_per_s <= 0:
            continue
        pts = []
        for x in spec:
            tau = 1 + _accepted(x) / x.drafts          # tokens a row gains per round
            pts.append((x.k, tau * plain[0].tokens_per_s / x.tokens_per_s - 1))
        if len({k for k, _ in pts}) == 1:
            k = pts[0][0]
            out[c] = CostLine(0.0, sum(y for _, y in pts) / len(pts) / k)
            continue
        n, sx, sy = len(pts), sum(k for k, _ in pts), sum(y for _, y in pts)
        sxx, sxy = sum(k * k for k, _ in pts), sum(k * y for k, y in pts)
        b = (n * sxy - sx * sy) / (n * sxx - sx * sx)
        a = (sy - b * sx) / n
        res = [y - a - b * k for k, y in pts]
        spread = math.sqrt(sum(r * r for r in res) / (n - 2)) if n > 2 else 0.0
        out[c] = CostLine(a, b, spread)
    return out


def _accepted(x: Cell) -> float:
    """Accepted draft tokens of a cell: the per-position counts summed."""
    return float(sum(x.accepted_per_pos))


def cost_at(lines: dict[int, CostLine], batch: int) -> CostLine:
    """The cost line at `batch`: a measured level's, or interpolated in log batch between the
    two around it; outside the measured levels, the nearest one's."""
    levels = sorted(lines)
    if batch <= levels[0]:
        return lines[levels[0]]
    if batch >= levels[-1]:
        return lines[levels[-1]]
    hi = next(c for c in levels if c >= batch)
    lo = max(c for c in levels if c <= batch)
    if lo == hi:
        return lines[lo]
    w = (math.log(batch) - math.log(lo)) / (math.log(hi) - math.log(lo))
    mix = lambda f: (1 - w) * f(lines[lo]) + w * f(lines[hi])          # noqa: E731
    return CostLine(mix(lambda x: x.a), mix(lambda x: x.b), mix(lambda x: x.spread))


def predict(alphas, line: CostLine, k: int) -> tuple[float, float, float]:
    """(speed-up, low, high) of k drafts per round under `line`; k = 0 is (1, 1, 1)."""
    if k == 0:
        return 1.0, 1.0, 1.0
    mid = tokens_per_round([a for a, _, _ in alphas], k) / line.ratio(k)
    low = tokens_per_round([lo for _, lo, _ in alphas], k) / (line.ratio(k) + 2 * line.spread)
    high = tokens_per_round([hi for _, _, hi in alphas], k) / max(1e-9, line.ratio(k) - 2 * line.spread)
    return mid, low, high


def schedule(cells: list[Cell], max_batch: int | None = None) -> tuple[KTable, list[dict]]:
    """The k table over batch sizes 1..max_batch (default: the largest measured level) and,
    per batch size, {batch, k, speedup, low, high, measured (the cell's speed-up or None)}."""
    lines = fit_cost(cells)
    if not lines:
        raise ValueError("no concurrency level has both a plain and a speculative cell to fit")
    alphas = pooled_alphas(cells)
    top = max_batch or max(lines)
    plain = {c.concurrency: c.tokens_per_s for c in cells if c.k == 0}
    per_batch = []
    for b in range(1, top + 1):
        line = cost_at(lines, b)
        sure = [k for k in range(len(alphas) + 1) if predict(alphas, line, k)[1] >= 1.0]
        best = max(sure, key=lambda k: predict(alphas, line, k)[0])
        s, lo, hi = predict(alphas, line, best)
        cell = next((c for c in cells if c.concurrency == b and c.k == best), None)
        measured = cell.tokens_per_s / plain[b] if cell and plain.get(b) else None
        per_batch.append({"batch": b, "k": best, "speedup": s, "low": lo, "high": hi, "measured": measured})
    rows: list[list[int]] = []
    for r in per_batch:
        if rows and rows[-1][2] == r["k"]:
            rows[-1][1] = r["batch"]
        else:
            rows.append([r["batch"], r["batch"], r["k"]])
    return KTable(tuple(tuple(r) for r in rows)), per_batch


def vllm_config(table: KTable, base: dict) -> dict:
    """`base` (vLLM's speculative_config without a schedule) with the table; the schedule's
    largest K becomes num_speculative_tokens (vLLM clamps each row to it); None when the
    table never drafts."""
    if table.max_k == 0:
        return None
    return {**base, "num_speculative_tokens": table.max_k,
            "num_speculative_tokens_per_batch_size": table.to_vllm()}


def table_from_costs(cells: list[dict], ratio, batch_grid, t0: float) -> tuple[KTable, list[dict]] | None:
    """The local analysis's table: at each batch size of the cost model's grid, the k whose
    predicted speed-up (per-position acceptance at batch 1 and temperature t0, each
    workload's from its largest k; `ratio(b, k)` the round's measured cost in plain steps)
    has the largest geometric mean over the workloads. A row runs from its grid point to
    the next one's predecessor. None when no batch-1 cell drafted."""
    refs: dict[str, dict] = {}
    for c in cells:
        if c["batch"] == 1 and c["temperature"] == t0 and c.get("cond_alphas") and (
                c["workload"] not in refs or c["k"] > refs[c["workload"]]["k"]):
            refs[c["workload"]] = c
    if not refs:
        return None
    k_top = min(len(c["cond_alphas"]) for c in refs.values())
    per_batch = []
    for b in batch_grid:
        def gain(k):
            logs = [math.log(tokens_per_round(c["cond_alphas"], k) / ratio(b, k)) for c in refs.values()]
            return math.exp(sum(logs) / len(logs)) if k else 1.0
        best = max(range(k_top + 1), key=gain)
        per_batch.append({"batch": b, "k": best, "speedup": gain(best)})
    grid = list(batch_grid)
    rows = tuple((b, (grid[i + 1] - 1) if i + 1 < len(grid) else b, r["k"])
                 for i, (b, r) in enumerate(zip(grid, per_batch)))
    return KTable(rows), per_batch
