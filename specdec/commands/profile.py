"""`specdec profile`: the full cost measurement up front, cached for `--k auto`; prints the table.

Without it, `--k auto` starts from a few forwards and learns what rounds cost while decoding
(docs/adaptive.md); with it, the adaptive policy prices every round from real measurements
from its first. It times the forwards at every batch size and q, and, for `--method` (default:
draft when a draft model is loaded), real rounds greedy and sampled at the batch rows up to
`--max-batch` (for `auto`, each arm's; for layerskip, after choosing its depth by decoding with
each): minutes, once per machine (`--no-rounds`: the forwards alone).

Rows are batch sizes b, columns q = positions scored per row (q = k + 1 verifies k drafts);
cells are milliseconds per target forward at the reference cache length. Also shown: the
cost of scoring k_max+1 positions relative to one, how much a long cache adds, the draft
model's milliseconds per proposed token, and the rounds timed. See specdec/costs/.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import ConfigError
from .common import add_load_args, load_kwargs
from ..analysis.costs import cost_table


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="measure target/draft step costs on this machine (for --k auto)")
    p.add_argument("--target", type=Path, help="target checkpoint dir (default: bundled target)")
    p.add_argument("--draft", type=Path, help="draft checkpoint dir (default: bundled draft when "
                                              "--target is not given; otherwise none)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64],
                   help="batch sizes to measure (others are interpolated)")
    p.add_argument("--k-max", type=int, default=8, help="measure q = 1 .. k_max + 1")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    p.add_argument("--method", help="whose rounds to time: draft, ngram, suffix, layerskip, eagle, mtp or "
                                    "auto (default: draft when a draft model is loaded, else none: forwards only)")
    p.add_argument("--head", type=Path, metavar="DIR", help="eagle: the feature head (default: the shipped head for the target)")
    p.add_argument("--max-batch", type=int, default=8,
                   help="time real rounds at batch rows 1, 2, 4, .. up to this (generate, serve and LLM() "
                        "default to 8)")
    p.add_argument("--rounds", action=argparse.BooleanOptionalAction, default=True,
                   help="time real rounds too (default); --no-rounds: the forwards alone")
    add_load_args(p)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(func=run)


def render(table: dict) -> None:
    """Print `cost_table(CostModel)` as rich tables."""
    from rich.console import Console
    from rich.table import Table

    q_max = table["q_max"]
    t = Table(title=f"target forward, ms (cache length {table['l_ref']})")
    t.add_column("b", justify="right")
    for q in range(1, q_max + 1):
        t.add_column(f"q={q}", justify="right")
    t.add_column(f"t(q={q_max})/t(1)", justify="right")
    t.add_column(f"L={table['l_long']} vs {table['l_ref']}", justify="right")
    for b, row in table["target"].items():
        t.add_row(str(b), *[f"{1e3 * v:.2f}" for v in row], f"{row[-1] / row[0]:.2f}", f"{table['kv_effect'][b]:.2f}x")
    console = Console()
    console.print(t)
    if table.get("contended"):
        console.print("[yellow]measured while other processes competed for the cores: "
                      "re-run `specdec profile` on a quiet machine[/yellow]")
    for key, per_b in table["draft"].items():
        d = Table(title=f"{key}: ms per proposed token")
        for b in per_b:
            d.add_column(f"b={b}", justify="right")
        d.add_row(*[f"{1e3 * v:.2f}" for v in per_b.values()])
        console.print(d)
    for name, rows in table.get("rounds", {}).items():
        r = Table(title=f"{name}: ms per real round drafting k")
        ks = sorted({k for per_k in rows.values() for k in per_k})
        r.add_column("b", justify="right")
        for k in ks:
            r.add_column(f"k={k}", justify="right")
        for b, per_k in rows.items():
            r.add_row(str(b), *[f"{1e3 * per_k[k]:.2f}" if k in per_k else "" for k in ks])
        console.print(r)


def run(args) -> int:
    from ..build import NGRAM_MAX, NGRAM_MIN, calibrate_costs, default_pair, load_models, spec_config
    from ..costs.cost_model import CostModel
    from ..costs.profiling import grid_rows

    if args.k_max < 1 or args.max_batch < 1 or any(b < 1 for b in args.batch_sizes):
        raise ConfigError("--k-max, --max-batch and --batch-sizes must be >= 1")
    target, draft = default_pair(args.target, args.draft, args.method)
    if args.method not in (None, "draft", "parallel") and args.draft is None:
        draft = None                                      # another method: no draft model to load
    models = load_models(target, draft, **load_kwargs(args))
    spec = spec_config(args.method, "auto", args.k_max, models.draft is not None,
                       {"ngram_min": NGRAM_MIN, "ngram_max": NGRAM_MAX})
    rounds = args.rounds and spec.method != "none"
    sizes = sorted(set(args.batch_sizes) | (set(grid_rows(args.max_batch)) if rounds else set()))
    cm = CostModel.load_or_measure(models.target, models.draft, k_max=args.k_max, batch_sizes=sizes,
                                   remeasure=True)
    table = cost_table(cm)
    if rounds:               # the forwards are cached now: calibrate_costs reads them and times rounds
        table["rounds"] = cost_table(calibrate_costs(models, spec, args.max_batch, remeasure=True))["rounds"]
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        render(table)
    return 0
