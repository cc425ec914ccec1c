"""One `specdec analyze` session: plan the grid, measure costs, decode, summarize, report.

The command line (commands/analyze.py) loads the models and prompts and hands them here;
this module only uses the engine's public API (`make_engine`, `Engine.step`, per-request
stats), the cost model and the analysis modules.
"""
from __future__ import annotations

import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as _Rich, TextColumn, TimeElapsedColumn

from ..config import EngineConfig
from ..errors import ConfigError
from ..build import make_engine
from ..adaptive.calibrate import round_timer
from .costs import load_costs
from ..cpu_load import busy_cores, load_average
from .machine_load import busy_warning, free_threads
from .measure import Plan, plan_cells, run_plan
from .settings import QUICK_DEADLINE_S
from .regimes import HARD, predictable_workload, roles_for
from .report import write_report
from .samples import regime_samples
from .summarize import summarize


class Progress:
    """Rich progress bars on stderr (or nothing, when disabled)."""

    def __init__(self, disabled: bool = False):
        self.console = Console(stderr=True)
        self._p = _Rich(TextColumn("[bold]{task.description:<34}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.fields[detail]}"), console=self.console,
                        disable=disabled)
        self.disabled = disabled

    def __enter__(self):
        self._p.__enter__()
        return self

    def __exit__(self, *exc):
        return self._p.__exit__(*exc)

    def add(self, description: str, total: float):
        return self._p.add_task(description, total=total, detail="")

    def update(self, task, **kw):
        self._p.update(task, **kw)

    def note(self, text: str) -> None:
        if not self.disabled:
            self.console.log(text)

    def warn(self, text: str) -> None:
        """Printed even without progress bars."""
        self.console.print(text, style="bold yellow", highlight=False)


def sweeps(names: list[str], quick: bool) -> dict:
    """plan_cells' sweeps: with `quick`, the batch sweep on the predictable regime's workload
    (else the first) and the temperature sweep on the one whose regime is sampled (the hard
    chat regime at T = 1), else on the same; without, every workload but long-code, which
    decodes at the full context: batch 1 only (a batch of such prompts is minutes)."""
    if not quick:
        return {"sweep_workloads": [w for w in names if w != HARD]}
    first = [w for w in names if w == predictable_workload(names)] or names[:1]
    sampled = [w for _what, w, temp in roles_for(names).values() if temp is not None and w in names]
    return {"sweep_workloads": first, "temperature_workloads": sampled or first}


def analyze(models, prompts: dict[str, list[list[int]]], spec_for_k, s: dict, method: str, out: Path,
            bars: Progress, full: bool = False, quick: bool = False, device: str = "cpu",
            remeasure: bool = True, threads_fixed: bool = False, tree: int | str = 0,
            compare: tuple = ()) -> dict[str, Path]:
    """Run the whole analysis with settings `s` (k, batch_sizes, temperatures, repeats,
    max_new_tokens, prompt_tokens) and write the report into `out`. Returns the paths. `tree`
    (a node budget or "auto") also decodes a token tree beside every batch-1 chain (trees.py);
    `compare`, other methods at each batch-1 k (compare.py).
    Unless `threads_fixed` (the user chose them), a CPU analysis uses only the threads that
    the cores other processes hold leave free (machine_load.py)."""
    t_start, load_start = time.perf_counter(), load_average()
    cpus, in_use = os.cpu_count(), busy_cores()
    busy = busy_warning(max(load_start or 0.0, in_use or 0.0), cpus)
    if busy:
        bars.warn(busy)
    threads = torch.get_num_threads()
    free = threads if device != "cpu" or threads_fixed else free_threads(in_use, cpus, threads)
    if free < threads:
        torch.set_num_threads(free)
        bars.warn(f"running on {free} of {threads} threads: other processes hold "
                  f"{in_use:.1f} of {cpus} cores (--threads sets it)")
    try:
        limit = models.target.config.max_position_embeddings - s["max_new_tokens"] - 8
        prompts = {w: [p for p in ps if len(p) <= limit] for w, ps in prompts.items()}
        if not all(prompts.values()):
            empty = [w for w, ps in prompts.items() if not ps]
            raise ConfigError(f"no prompt of {', '.join(empty)} fits the context ({limit} prompt tokens "
                              f"+ {s['max_new_tokens']} new)")
        names = list(prompts)
        cells = plan_cells(names, s["k"], s["batch_sizes"], s["temperatures"], full=full, **sweeps(names, quick))
        plan = Plan(cells, prompts, groups=s["repeats"], max_new_tokens=s["max_new_tokens"], tree=tree,
                    compare=tuple(compare))
        k_top = max(s["k"])
        probe = make_engine(models, spec_for_k(k_top), EngineConfig(max_batch=1, max_model_len=64, device=device))
        task = bars.add("measuring step costs t(b, q)", total=100)
        q_max = max(k_top, 8) + 1          # the theory curves and break-even table go to k = 8
        # only the rounds the cells decode: their k and, per sampling mode, their batch sizes
        rows = {sampled: sorted({c.batch for c in cells if (c.temperature > 0) == sampled}) for sampled in (False, True)}
        modes = [m for m in (False, True) if rows[m]]
        timer = round_timer(models.target, spec_for_k(k_top), models.draft, prompt_len=s["prompt_tokens"], steps=40,
                            head=models.head)
        costs = load_costs(models.target, probe.proposer, batch_sizes=s["batch_sizes"], q_max=q_max,
                           context=s["prompt_tokens"] + s["max_new_tokens"] // 2,
                           remeasure=remeasure, round_timer=timer, modes=modes, ks=s["k"], rows=rows,
                           on_progress=lambda f: bars.update(task, completed=100 * f),
                           longest=max(len(p) for ps in prompts.values() for p in ps) + s["max_new_tokens"])
        del probe
        bars.update(task, completed=100)
        t_costs = time.perf_counter()

        task = bars.add("decoding: plain vs speculative", total=plan.num_runs())
        ran: dict = {"extend_budget_s": 0.0, "extra_groups": []}
        results = run_plan(models, plan, spec_for_k, device=device, extend_s=s["extend_s"],
                           extend_share=s["extend_share"],
                           deadline=t_start + QUICK_DEADLINE_S if quick and s["extend_s"] is None else None,
                           info=ran,
                           on_run=lambda d: bars.update(task, advance=1, detail=d))

        t_decoded = time.perf_counter()
        task = bars.add("predicting and writing the report", total=2)
        summary = summarize([r.as_dict() for r in results], costs, method, s["batch_sizes"], s["temperatures"],
                            q_max=q_max, new_tokens=plan.max_new_tokens - 1)
        bars.update(task, advance=1)
        meta = {"target": str(models.target_path), "draft": str(models.draft_path) if models.draft_path else None,
                "target_weights": getattr(models.target, "provenance", None),
                "device": device, "threads": torch.get_num_threads(), "groups": plan.groups,
                "max_new_tokens": plan.max_new_tokens, "prompt_tokens": s["prompt_tokens"],
                "settings": s, "workloads": names, "grid": "full" if full else "star", "quick": quick,
                "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "torch": torch.__version__, "costs_remeasured": remeasure, "tree": tree,
                "compare": list(compare),
                "machine": platform.processor() or platform.machine(),
                "wall_s": time.perf_counter() - t_start, "cpus": os.cpu_count(),
                "phase_s": {"costs": t_costs - t_start, "decoding": t_decoded - t_costs},
                "load_average": [load_start, load_average()], "cores_in_use": in_use, "busy_warning": busy,
                **ran}
        summary["cost_model_table"] = costs.raw
        # after the measurements and their wall time: illustrations, neither timed nor summarised
        summary["samples"] = regime_samples(models, prompts, summary["regimes"], spec_for_k, device)
        paths = write_report(out, summary, costs, meta)
        bars.update(task, advance=1)
        return paths
    finally:
        torch.set_num_threads(threads)          # the caller's setting, for API callers
