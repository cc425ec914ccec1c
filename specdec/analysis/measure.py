"""Measure speculative decoding against plain decoding over a grid of cells.

A cell is (workload, k, batch, temperature). Cells sharing (workload, batch, temperature)
form a block: the same prompts are decoded plainly and with every k, in groups of `batch`
prompts, all in lockstep (`lockstep_runs`) so that drift in machine speed hits both sides
alike. Throughput counts only decode steps: admission steps (prefill and the first token)
are excluded, as they are the same work for both. The cell's speed-up pools its groups: total decode tokens per second with
speculation over the same without (each group's ratio is kept as well). Groups decode
different prompts, whose acceptance differs, so pooling (rather than taking the median
group) is what a prediction from the groups' own acceptance can be compared with.

Every timed step is kept as (progress, wall seconds, thread CPU seconds, tokens), so a
group splits into paired stretches and the cell's speed-up gets a bootstrap interval
(interval.py); blocks whose cells stay wider than ±10% get extra groups (extend.py).

Collected per cell: per-position acceptance counts, accepted length of every round,
per-prompt alpha (also grouped as the rows of each group), tokens per target step, the
repetition of the outputs (repetition.py), the mean cache length while decoding, and, for
greedy cells, whether every output was identical to plain decoding.
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import product

from ..config import EngineConfig, SamplingParams
from ..build import Models, make_engine
from .couplings import COUPLED_GROUPS, coupled_pass, coupling_entry, round_lengths
from .acceptance import prompt_counts
from .extend import extend_wide
from .interval import bootstrap, half_width, stretches
from .predict import fit_alpha
from ..repetition import repetition_fraction
from .compare import VS, compare_specs
from .trees import TREE, TreeSide, tree_specs


@dataclass(frozen=True)
class Cell:
    workload: str
    k: int
    batch: int
    temperature: float


@dataclass
class Plan:
    """What to run. `prompts[workload]` holds enough prompts for the largest block."""
    cells: list[Cell]
    prompts: dict[str, list[list[int]]]
    groups: int = 3                   # repeats per cell (each on different prompts)
    max_new_tokens: int = 32
    warmup_tokens: int = 6
    tree: int | str = 0               # a node budget or "auto": batch-1 blocks also decode trees (trees.py)
    compare: tuple = ()               # methods batch-1 blocks also decode at each k (compare.py)

    def blocks(self) -> dict[tuple[str, int, float], list[int]]:
        """(workload, batch, temperature) -> sorted ks."""
        out: dict[tuple[str, int, float], list[int]] = {}
        for c in self.cells:
            out.setdefault((c.workload, c.batch, c.temperature), []).append(c.k)
        return {key: sorted(set(ks)) for key, ks in out.items()}

    def num_runs(self) -> int:
        """Lockstep groups to decode (each runs plain and every k of its block together)."""
        return self.groups * len(self.blocks())


def plan_cells(workloads, ks, batch_sizes, temperatures, full: bool = False,
               sweep_workloads=None, temperature_workloads=None) -> list[Cell]:
    """The grid. full: every combination. Otherwise a star around (batch 1, temperatures[0]):
    every workload and k there, plus, for `sweep_workloads` (default: all), the batch sweep at
    temperatures[0] and, for `temperature_workloads` (default: the same), the temperature
    sweep at batch 1."""
    if full:
        return [Cell(w, k, b, t) for w, k, b, t in product(workloads, ks, batch_sizes, temperatures)]
    sweep = list(sweep_workloads) if sweep_workloads is not None else list(workloads)
    temps = list(temperature_workloads) if temperature_workloads is not None else sweep
    t0 = temperatures[0]
    cells = [Cell(w, k, 1, t0) for w, k in product(workloads, ks)]
    cells += [Cell(w, k, 1, t) for w, k, t in product(temps, ks, temperatures[1:])]
    cells += [Cell(w, k, b, t0) for w, k, b in product(sweep, ks, batch_sizes) if b != 1]
    return list(dict.fromkeys(cells))


@dataclass
class Run:
    tok_s: float                       # decode tokens per second (admission steps excluded)
    tokens: int                        # decode tokens (admission steps excluded)
    decode_s: float                    # seconds of the decode steps
    step_s: float                      # median seconds per decode step
    outputs: list[list[int]]
    stats: list                        # SeqStats of each sequence
    metrics: dict = field(default_factory=dict)   # the engine's: k_hist, acceptance_rate, ...
    steps: list = field(default_factory=list)     # interval.Step of every timed decode step


def lockstep_runs(models: Models, specs: dict, prompts: list[list[int]], params: list[SamplingParams],
                  max_len: int, device: str = "cpu", max_batch: int | None = None, cost_model=None) -> dict:
    """Decode `prompts` once per spec ({name: SpecConfig}), `max_batch` (default: all) at a
    time, stepping the engines in turn, and time their decode steps (see below). Returns
    {name: Run}. `cost_model` goes to engines with k="auto".

    The machine this runs on is shared: its speed drifts by tens of percent within seconds.
    Runs one after another would each catch a different spell; stepping every engine in
    turn, always the one least far through its tokens, spreads each run's steps evenly over
    the same wall-clock window, so drift hits plain and speculative decoding alike.

    Steps that only admit requests (prefill and their first tokens: identical work for every
    spec) are neither timed nor counted, the first one as well as those of later waves when
    there are more prompts than `max_batch`."""
    engines, seqs, times, n0, steps = {}, {}, {}, {}, {}
    for name, spec in specs.items():
        eng = make_engine(models, spec, EngineConfig(max_batch=max_batch or len(prompts), max_model_len=max_len,
                                                     device=device), cost_model=cost_model)
        seqs[name] = [eng.add_request(p, sp) for p, sp in zip(prompts, params)]
        eng.step()                                            # admission: prefill, first tokens
        engines[name], times[name], steps[name] = eng, [], []
        n0[name] = sum(s.num_output for s in seqs[name])
    total = sum(sp.max_new_tokens for sp in params)
    while True:
        live = [n for n, e in engines.items() if e.has_unfinished()]
        if not live:
            break
        name = min(live, key=lambda n: sum(s.num_output for s in seqs[n]) / total)
        eng, before = engines[name], engines[name].metrics.steps
        out_before = sum(s.num_output for s in seqs[name])
        c0, t0 = time.thread_time(), time.perf_counter()
        eng.step()
        dt, dc = time.perf_counter() - t0, time.thread_time() - c0
        gained = sum(s.num_output for s in seqs[name]) - out_before
        if eng.metrics.steps == before:                       # an admission step: prefill
            n0[name] += gained
        else:
            times[name].append(dt)
            steps[name].append((out_before / total, dt, dc, gained))
    out = {}
    for name, eng in engines.items():
        eng.collect_finished()
        n, dt = sum(s.num_output for s in seqs[name]) - n0[name], sum(times[name])
        m = eng.metrics
        out[name] = Run(n / dt if dt > 0 else 0.0, n, dt, statistics.median(times[name]) if times[name] else 0.0,
                        [s.output_ids for s in seqs[name]], [s.stats for s in seqs[name]],
                        {"k_hist": dict(m.k_hist), "acceptance_rate": m.acceptance_rate,
                         "mean_acceptance_length": m.mean_acceptance_length,
                         "branch_accepts": m.branch_accepts}, steps[name])
    return out


@dataclass
class CellResult:
    cell: Cell
    plain_tok_s: list[float] = field(default_factory=list)
    spec_tok_s: list[float] = field(default_factory=list)
    plain_step_s: list[float] = field(default_factory=list)
    spec_step_s: list[float] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)
    draft_lengths: list[int] = field(default_factory=list)
    accepted_per_pos: list[int] = field(default_factory=list)
    prompt_alphas: list[float] = field(default_factory=list)
    prompt_counts: list[tuple[int, int]] = field(default_factory=list)   # (accepted, rejections) per prompt
    group_alphas: list[list[float]] = field(default_factory=list)   # per group, alpha of each row
    group_rows: list[list] = field(default_factory=list)   # per group, [alpha or None, draft rate] of every row
    rounds: list[int] = field(default_factory=lambda: [0, 0])   # decode rounds, those that drafted
    totals: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])  # plain tok, s; spec tok, s
    identical: bool | None = None
    units: list = field(default_factory=list)        # interval.stretches of every group, wall time
    units_cpu: list = field(default_factory=list)    # the same in the stepping thread's CPU time
    repetition: list = field(default_factory=list)   # (tokens, repetition fraction) of each output
    context: list = field(default_factory=list)      # mean cache length while decoding, per group
    extra_groups: int = 0                            # groups added because the interval was wide
    coupled: tuple | None = None     # ((accepted, draft lengths) standard, the same invariant): same prompts
    tree: TreeSide | None = None     # the token tree of depth k beside this chain (trees.py)
    sides: dict = field(default_factory=dict)   # compared method -> its TreeSide record (compare.py)

    def add(self, plain: Run, spec: Run, context: float = 0.0) -> None:
        self.units += stretches(plain.steps, spec.steps)
        self.units_cpu += stretches(plain.steps, spec.steps, cpu=True)
        self.repetition += [(len(o), repetition_fraction(o)) for o in spec.outputs]
        self.context.append(context)
        self.plain_tok_s.append(plain.tok_s)
        self.spec_tok_s.append(spec.tok_s)
        for i, x in enumerate((plain.tokens, plain.decode_s, spec.tokens, spec.decode_s)):
            self.totals[i] += x
        self.group_alphas.append([])
        self.group_rows.append([])
        self.plain_step_s.append(plain.step_s)
        self.spec_step_s.append(spec.step_s)
        for st in spec.stats:
            n = max(st.target_forwards - 1, len(st.accepted_lengths), 1)   # decode rounds (admission's forward apart)
            self.rounds[0] += n
            self.rounds[1] += len(st.accepted_lengths)
            self.group_rows[-1].append([fit_alpha(st.accepted_lengths, self.cell.k, st.draft_lengths)
                                        if st.accepted_lengths else None, len(st.accepted_lengths) / n])
            self.accepted_lengths += st.accepted_lengths
            self.draft_lengths += st.draft_lengths
            if len(self.accepted_per_pos) < len(st.accepted_per_pos):
                self.accepted_per_pos += [0] * (len(st.accepted_per_pos) - len(self.accepted_per_pos))
            for j, a in enumerate(st.accepted_per_pos):
                self.accepted_per_pos[j] += a
            if st.accepted_lengths:
                self.prompt_alphas.append(fit_alpha(st.accepted_lengths, self.cell.k, st.draft_lengths))
                self.prompt_counts.append(prompt_counts(st.accepted_lengths, st.draft_lengths))
                self.group_alphas[-1].append(self.prompt_alphas[-1])
        if self.cell.temperature == 0:
            same = plain.outputs == spec.outputs
            self.identical = same if self.identical is None else (self.identical and same)

    def as_dict(self) -> dict:
        c, L = self.cell, self.accepted_lengths
        drafts, acc = len(L), sum(L)
        ratios = [s / p for s, p in zip(self.spec_tok_s, self.plain_tok_s) if p > 0]
        pn, pt, sn, st = self.totals
        pooled = (sn / st) / (pn / pt) if pn and pt and st else 0.0
        _, lo, hi = bootstrap(self.units) if self.units else (pooled, pooled, pooled)
        cpu, cpu_lo, cpu_hi = bootstrap(self.units_cpu) if self.units_cpu else (0.0, 0.0, 0.0)
        n_rep = sum(n for n, _ in self.repetition)
        return {
            "workload": c.workload, "k": c.k, "batch": c.batch, "temperature": c.temperature,
            "groups": len(ratios),
            "speedup": pooled, "speedups": ratios, "ci": [lo, hi], "ci_half": half_width(pooled, lo, hi),
            "speedup_cpu": cpu, "ci_cpu": [cpu_lo, cpu_hi], "ci_half_cpu": half_width(cpu, cpu_lo, cpu_hi),
            "repetition": sum(n * f for n, f in self.repetition) / n_rep if n_rep else 0.0,
            "context": statistics.mean(self.context) if self.context else 0.0,
            "plain_tok_s": statistics.median(self.plain_tok_s) if self.plain_tok_s else 0.0,
            "spec_tok_s": statistics.median(self.spec_tok_s) if self.spec_tok_s else 0.0,
            "plain_step_s": statistics.median(self.plain_step_s) if self.plain_step_s else 0.0,
            "spec_step_s": statistics.median(self.spec_step_s) if self.spec_step_s else 0.0,
            "drafts": drafts, "accepted_tokens": acc,
            "alpha": fit_alpha(L, c.k, self.draft_lengths),
            "acceptance_rate": acc / (drafts * c.k) if drafts and c.k else 0.0,
            "tokens_per_step": 1 + acc / drafts if drafts else 1.0,
            "accepted_per_pos": self.accepted_per_pos,
            "accepted_length_hist": {str(n): m for n, m in sorted(Counter(L).items())},
            "prompt_alphas": self.prompt_alphas, "prompt_counts": self.prompt_counts,
            "group_alphas": self.group_alphas, "group_rows": self.group_rows,
            "draft_rate": self.rounds[1] / self.rounds[0] if self.rounds[0] else 1.0,
            "identical_to_plain": self.identical, "extra_groups": self.extra_groups,
            "couplings": None if self.coupled is None else {
                "standard": coupling_entry(c.k, *self.coupled[0]), "invariant": coupling_entry(c.k, *self.coupled[1])},
            "tree": None if self.tree is None else self.tree.as_dict(),
            "compare": {m: side.as_dict() for m, side in self.sides.items()},
        }


def _group_prompts(prompts: list[list[int]], g: int, b: int) -> list[list[int]]:
    """Prompts of group g (wrapping around if the workload has fewer than needed)."""
    return [prompts[(g * b + i) % len(prompts)] for i in range(b)]


def run_plan(models: Models, plan: Plan, spec_for_k, device: str = "cpu",
             on_run=None, extend_s: float | None = 0.0, extend_share: float = 0.0,
             info: dict | None = None, deadline: float | None = None) -> list[CellResult]:
    """Run every block of `plan`, then extra groups for blocks whose cells' intervals are
    still wider than interval.WIDE, for at most `extend_s` seconds (None: `extend_share` of
    the time the planned groups took; see extend.py), and never past `deadline` (a
    time.perf_counter() reading; None: no limit). `info`, when given, receives the
    budget and the extra groups run. `spec_for_k(k)`
    gives the SpecConfig (k = 0: plain). `on_run(description)` is called after each decode
    run (for progress bars). A cell's `extra_groups` counts the groups added for it."""
    results: dict[Cell, CellResult] = {}
    blocks, warmed = plan.blocks(), set()

    def run_group(block, g: int) -> None:
        w, b, temp = block
        ks, prompts = blocks[block], plan.prompts[w]
        longest = max(len(p) for p in prompts)
        max_len = min(longest + plan.max_new_tokens + 8, models.target.config.max_position_embeddings)
        specs = {k: spec_for_k(k) for k in [0] + ks} | (tree_specs(spec_for_k, ks, plan.tree) | compare_specs(
            spec_for_k, ks, plan.compare) if b == 1 else {})
        if b not in warmed:  # first calls at a new batch shape pay one-off costs
            wp = [SamplingParams(max_new_tokens=plan.warmup_tokens, ignore_eos=True)] * b
            lockstep_runs(models, specs, _group_prompts(prompts, 0, b), wp, max_len, device)
            warmed.add(b)
        group = _group_prompts(prompts, g, b)
        params = [SamplingParams(temperature=temp, seed=10_000 * g + i, max_new_tokens=plan.max_new_tokens,
                                 ignore_eos=True) for i in range(b)]
        runs = lockstep_runs(models, specs, group, params, max_len, device)
        if on_run:
            on_run(f"{w} b={b} T={temp:g} k={','.join(map(str, ks))}" + (" (extra)" if g >= plan.groups else ""))
        context = statistics.mean(len(p) for p in group) + plan.max_new_tokens / 2
        for k in ks:
            cell = Cell(w, k, b, temp)
            results.setdefault(cell, CellResult(cell)).add(runs[0], runs[k], context)
            results[cell].extra_groups += g >= plan.groups
            if (TREE, k) in runs:
                results[cell].tree = results[cell].tree or TreeSide(plan.tree)
                results[cell].tree.add(runs[TREE, k], runs[k], greedy=temp == 0)
            for m in [m for m in plan.compare if (VS, m, k) in runs]:
                results[cell].sides.setdefault(m, TreeSide(m)).add(runs[VS, m, k], runs[k], greedy=temp == 0)
        if temp > 0 and b == 1 and g < COUPLED_GROUPS:   # the same prompts and seeds, invariant
            inv = coupled_pass(lockstep_runs, models, {k: specs[k] for k in ks}, group, params, max_len, device)
            for k in ks:
                results[Cell(w, k, b, temp)].coupled = (round_lengths(runs[k]), inv[k])

    durations: dict = {}
    for block in blocks:
        for g in range(plan.groups):
            t0 = time.perf_counter()
            run_group(block, g)
            durations.setdefault(block, []).append(time.perf_counter() - t0)
    budget = extend_s if extend_s is not None else extend_share * sum(map(sum, durations.values()))
    if deadline is not None:
        budget = min(budget, deadline - time.perf_counter())
    if budget > 0:
        def width(block) -> float:
            w, b, temp = block
            return max(results[Cell(w, k, b, temp)].as_dict()["ci_half"] for k in blocks[block])
        extra = extend_wide(run_group, width, {blk: plan.groups for blk in blocks}, durations, budget)
        if info is not None:
            info.update(extend_budget_s=budget, extra_groups=[[*blk, g] for blk, g in extra])
    return [results[c] for c in plan.cells if c in results]
