"""Pure helpers for the peer benchmark: medians, output identity, goals and the markdown table.

No torch, no models: everything here is unit-tested in tests/test_benchmarks_peers.py.
"""
from __future__ import annotations

import statistics

from specdec.repetition import FLAG, mean_repetition


def median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def first_divergence(a, b) -> int | None:
    """Index of the first position where two sequences differ (a length difference counts);
    None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def identity(outputs, reference) -> str:
    """'yes' when every output equals its reference, else 'no (first diff at token i)'.
    `outputs`/`reference` are lists (one item per prompt) of token lists or strings."""
    if not outputs or reference is None or len(outputs) != len(reference):
        return "n/a"
    for out, ref in zip(outputs, reference):
        if out is None or ref is None:
            return "n/a"
        d = first_divergence(out, ref)
        if d is not None:
            unit = "char" if isinstance(out, str) else "token"
            return f"no ({unit} {d})"
    return "yes"


def summarize(runs: list[dict]) -> dict:
    """Median tokens/s (and acceptance, when reported) over a row's timed runs, and the
    repetition fraction of its outputs (None where a peer returns text, not token ids)."""
    outputs = [r["tokens"] for r in runs if isinstance(r.get("tokens"), list)]
    return {
        "tok_s": median(r["n_new"] / r["seconds"] for r in runs if r.get("seconds")),
        "n_runs": len(runs),
        "acceptance": median(r.get("acceptance") for r in runs),
        "repetition": mean_repetition(outputs) if outputs else None,
    }


def _fmt(x, nd=1) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def markdown_table(rows: list[dict], workloads: list[str], modes: list[str]) -> str:
    """One line per peer row; for each (mode, workload): tok/s, × specdec plain and the
    repetition fraction (* above specdec.repetition.FLAG: the cell measures a loop).
    A row is {'name', 'group', 'setting', 'skip', 'cells': {f'{mode}/{wl}': summary},
    'identity': {wl: str}}."""
    cols = [f"{m}/{w}" for m in modes for w in workloads]
    head = ["peer", "row", "setting"] + [f"{c} tok/s" for c in cols] + [f"{c} ×plain" for c in cols] \
        + [f"greedy/{w} = specdec plain" for w in workloads] + [f"{c} repetition" for c in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = next((r for r in rows if r["name"] == "specdec plain"), None)
    for r in rows:
        if r.get("skip"):
            lines.append(f"| {r['group']} | {r['name']} | skipped: {r['skip']} |" + " |" * (len(head) - 3))
            continue
        cells = r.get("cells", {})
        toks = [_fmt(cells.get(c, {}).get("tok_s")) for c in cols]
        ratios = []
        for c in cols:
            v, b = cells.get(c, {}).get("tok_s"), (base or {}).get("cells", {}).get(c, {}).get("tok_s")
            ratios.append(_fmt(v / b, 2) if v and b else "—")
        ident = [r.get("identity", {}).get(w, "n/a") for w in workloads]
        reps = [cells.get(c, {}).get("repetition") for c in cols]
        reps = [_fmt(x, 2) + ("*" if x is not None and x > FLAG else "") for x in reps]
        lines.append("| " + " | ".join([r["group"], r["name"], r.get("setting", "")] + toks + ratios + ident + reps)
                     + " |")
    return "\n".join(lines)


def best_of(rows: list[dict], names: list[str], col: str) -> tuple[str | None, float | None]:
    """The fastest of the named rows in column `col`."""
    best = (None, None)
    for r in rows:
        v = r.get("cells", {}).get(col, {}).get("tok_s") if r["name"] in names and not r.get("skip") else None
        if v is not None and (best[1] is None or v > best[1]):
            best = (r["name"], v)
    return best


def goals(rows: list[dict], col: str, roofline_plain: float | None) -> list[dict]:
    """The goals, evaluated honestly on column `col` (e.g. 'greedy/code'): against HF's and
    llama.cpp's speculative ratios, against llama.cpp in absolute tokens/s (plain, and the
    draft-model rows: ×1.5 greedy, ×1.2 sampled, ×1.3 llama.cpp speculative greedy), and
    against the bandwidth roofline."""
    def tok(name):
        r = next((r for r in rows if r["name"] == name and not r.get("skip")), None)
        return r and r.get("cells", {}).get(col, {}).get("tok_s")

    spec_names = ["specdec draft", "specdec adaptive", "specdec ngram", "specdec auto"]
    s_name, s_best = best_of(rows, spec_names, col)
    h_name, h_best = best_of(rows, ["HF assisted (defaults)", "HF assisted (fixed k)"], col)
    l_name, l_best = best_of(rows, ["llama.cpp speculative", "llama.cpp lookup"], col)
    plain, lplain = tok("specdec plain"), tok("llama.cpp plain")
    out = []

    def add(goal, value, target, detail):
        out.append({"goal": goal, "value": value, "target": target,
                    "met": None if value is None else value >= target, "detail": detail})

    add("specdec speculative ≥ 2× HF assisted", s_best / h_best if s_best and h_best else None, 2.0,
        f"{s_name} vs {h_name}")
    ratio_s = s_best / plain if s_best and plain else None
    ratio_l = l_best / lplain if l_best and lplain else None
    add("specdec spec/plain ≥ llama.cpp spec/plain", ratio_s / ratio_l if ratio_s and ratio_l else None, 1.0,
        f"specdec {_fmt(ratio_s, 2)} ({s_name}), llama.cpp {_fmt(ratio_l, 2)} ({l_name})")
    add("specdec plain ≥ 1.0× llama.cpp plain", plain / lplain if plain and lplain else None, 1.0,
        f"{_fmt(plain)} vs {_fmt(lplain)} tok/s")
    greedy = col.startswith("greedy")
    d_name, d_best = best_of(rows, ["specdec draft", "specdec adaptive"], col)
    want = 1.5 if greedy else 1.2
    add(f"specdec draft model ≥ {want}× llama.cpp plain", d_best / lplain if d_best and lplain else None, want,
        f"{d_name} {_fmt(d_best)} vs {_fmt(lplain)} tok/s")
    if greedy:
        ls_name, ls_best = best_of(rows, ["llama.cpp speculative"], col)
        add("specdec draft model ≥ 1.3× llama.cpp speculative", d_best / ls_best if d_best and ls_best else None,
            1.3, f"{d_name} {_fmt(d_best)} vs {_fmt(ls_best)} tok/s")
    add("specdec plain ≥ 0.7 × bandwidth roofline", plain / roofline_plain if plain and roofline_plain else None,
        0.7, f"plain {_fmt(plain)} tok/s, roofline {_fmt(roofline_plain)} tok/s")
    return out


def goals_markdown(gs: list[dict]) -> str:
    lines = ["| goal | measured | target | met |", "|---|---|---|---|"]
    for g in gs:
        met = "n/a" if g["met"] is None else ("yes" if g["met"] else "**no**")
        lines.append(f"| {g['goal']} | {_fmt(g['value'], 2)} ({g['detail']}) | {g['target']} | {met} |")
    return "\n".join(lines)
