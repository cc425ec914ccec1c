"""`specdec profile`: re-measure the cost model on this machine and print the table.

Rows are batch sizes b, columns q = positions scored per row (q = k + 1 verifies k drafts);
cells are milliseconds per target forward at the reference cache length. Also shown: the
cost of scoring k_max+1 positions relative to one, how much a long cache adds, and the
draft model's milliseconds per proposed token. The table is cached for the engine
(`--k auto`) to reuse; see specdec/costs/cost_model.py.
"""
from __future__ import annotations

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


def run(args) -> int:
    from ..costs.cost_model import CostModel
    from ..build import default_pair, load_models

    if args.k_max < 1 or any(b < 1 for b in args.batch_sizes):
        raise ConfigError("--k-max and --batch-sizes must be >= 1")
    target, draft = default_pair(args.target, args.draft)
    models = load_models(target, draft, **load_kwargs(args))
    cm = CostModel.load_or_measure(models.target, models.draft, k_max=args.k_max, batch_sizes=args.batch_sizes,
                                   remeasure=True)
    table = cost_table(cm)
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        render(table)
    return 0
