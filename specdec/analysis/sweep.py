"""The concurrency sweep behind `--emit-vllm-config`, and `--check-config`'s replay.

Emit: measure (concurrency, k) cells on a server, as few as the prediction needs first: at
each level plain and the largest k (which also measures acceptance at every position), then
the other k, each level in turn, while `--budget-s` lasts. `schedule.py` predicts every
(batch, k) from them; the result is vLLM's `speculative_config` with
`num_speculative_tokens_per_batch_size` (vllm_config.json), the predictions and which cells
were measured (vllm_config.md, schedule.json).

A server that cannot switch speculation per request (vLLM) is measured at its own k on
--endpoint and plainly on --endpoint-baseline, at each concurrency: one k per level, which is
what the cost fit needs.

Check: replay the workload at each row's batch sizes against a server that runs the table
(its default), plainly, and at the row's fixed K, and set measured against predicted.
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from ..config import KTable
from ..errors import ConfigError
from . import schedule as S

CHECK_MAX_CONCURRENCY = 64    # a row reaching further (e.g. "5-4096") is replayed at this many


def plan(concurrencies: list[int], ks: list[int]) -> list[tuple[int, int]]:
    """Cells in the order they are worth measuring: plain and the largest k at every level
    (enough to fit), then the other k from the largest down, level by level."""
    top = max(ks)
    first = [(c, k) for c in concurrencies for k in (0, top)]
    return first + [(c, k) for k in sorted(set(ks) - {top}, reverse=True) for c in concurrencies]


def prompts_for(texts: dict[str, list[str]], c: int, n: int) -> dict[str, list[str]]:
    """At least two waves of `c` requests per workload, so the level is held, not just reached."""
    want = max(n, 2 * c)
    return {w: (ps * (want // len(ps) + 1))[:want] for w, ps in texts.items()}


def pooled(c: int, k: int, per_workload: dict) -> S.Cell:
    """One Cell from Endpoint.run results per workload: tokens over time, counters summed."""
    rs = list(per_workload.values())
    wall = sum(r["wall_s"] for r in rs)
    drafts = sum(r["drafts"] for r in rs)
    width = max((len(r["per_position_acceptance"]) for r in rs), default=0)
    per_pos = tuple(sum(r["per_position_acceptance"][j] * r["drafts"] for r in rs
                        if j < len(r["per_position_acceptance"])) for j in range(width))
    return S.Cell(c, k, sum(r["completion_tokens"] for r in rs) / wall if wall else 0.0, drafts, per_pos)


def sweep(ep, baseline, texts: dict[str, list[str]], s: dict, budget_s: float | None, log) -> list[S.Cell]:
    """Measure the planned cells until the budget would run out (the first level's pair is
    always measured). Returns the measured cells."""
    per_request = ep.supports_speculative()
    if not per_request and baseline is None:
        raise ConfigError("this server cannot switch speculation per request: give --endpoint-baseline "
                          "(the same model served without speculation) to measure plain decoding")
    spec = {"method": s["method"]} if s["method"] else {}
    cells, walls, t0 = [], {}, time.perf_counter()
    todo = plan(s["concurrencies"], s["ks"]) if per_request else [(c, k) for c in s["concurrencies"] for k in (0, -1)]
    for i, (c, k) in enumerate(todo):
        guess = max(walls.get(c, []) or [max(sum(walls.values(), []), default=0.0)])
        if budget_s is not None and i >= 2 and time.perf_counter() - t0 + guess > budget_s:
            log(f"budget of {budget_s:.0f} s reached: {len(cells)} of {len(todo)} cells measured")
            break
        if per_request:
            e, sp = ep, ({"method": "none"} if k == 0 else {**spec, "k": k})
        else:
            e, sp = (baseline if k == 0 else ep), None
        t = time.perf_counter()
        res = {w: asyncio.run(e.run(ps, s["max_tokens"], sp, c)) for w, ps in prompts_for(texts, c, s["n"]).items()}
        walls.setdefault(c, []).append(time.perf_counter() - t)
        if k == -1:                   # the server's own k: read it off the counters
            drafts = sum(r["drafts"] for r in res.values())
            k = round(sum(r["draft_tokens"] for r in res.values()) / drafts) if drafts else 0
        cell = pooled(c, k, res)
        cells.append(cell)
        log(f"concurrency {c}, k {k}: {cell.tokens_per_s:.1f} tok/s")
    return cells


def write_emit(cells: list[S.Cell], base_config: dict, out: Path | None, max_batch: int | None) -> dict | None:
    """The config (None: speculation never pays), and its side files in `out`."""
    table, per_batch = S.schedule(cells, max_batch)
    cfg = S.vllm_config(table, base_config)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "vllm_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        (out / "schedule.json").write_text(json.dumps({"config": cfg, "per_batch": per_batch,
                                                       "cells": [c.__dict__ for c in cells]}, indent=1) + "\n")
        (out / "vllm_config.md").write_text(render(cfg, table, per_batch, cells))
    return cfg


def render(cfg, table: KTable, per_batch: list[dict], cells: list[S.Cell]) -> str:
    alphas = S.pooled_alphas(cells)
    lines_ = S.fit_cost(cells)
    out = ["# vLLM speculative_config, k by batch size", "", "```json", json.dumps(cfg, indent=2), "```", "",
           "Per row: the speed-up over plain decoding predicted at each end of the range, with its 95% "
           "interval (acceptance and the cost fit), and the one measured at a level inside it.", "",
           "| batch sizes | K | predicted (first) | predicted (last) | measured |", "|---|---|---|---|---|"]
    plain = {c.concurrency: c.tokens_per_s for c in cells if c.k == 0}
    for lo, hi, k in table.rows:
        a, b = per_batch[lo - 1], per_batch[hi - 1]
        meas = [f"{c.tokens_per_s / plain[c.concurrency]:.2f}x at {c.concurrency}" for c in cells
                if lo <= c.concurrency <= hi and c.k == k and k > 0 and plain.get(c.concurrency)]
        fmt = lambda r: f"{r['speedup']:.2f}x [{r['low']:.2f}, {r['high']:.2f}]"    # noqa: E731
        out.append(f"| {lo}-{hi} | {k} | {fmt(a)} | {fmt(b)} | {', '.join(meas) or '-'} |")
    out += ["", "Beyond the last row vLLM keeps its K; the sweep did not measure there.", "",
            "Cells: measured speed-up (tokens/s over plain at the same concurrency) beside the "
            "prediction from all cells; `predicted` where the sweep did not measure.", "",
            "| concurrency | k | measured | predicted |", "|---|---|---|---|"]
    k_top = len(alphas)
    for c in sorted(lines_):
        for k in range(1, k_top + 1):
            cell = next((x for x in cells if x.concurrency == c and x.k == k), None)
            pred = S.predict(alphas, lines_[c], k)[0]
            meas = f"{cell.tokens_per_s / plain[c]:.2f}x" if cell else "predicted"
            out.append(f"| {c} | {k} | {meas} | {pred:.2f}x |")
    out += ["", "Acceptance by position (pooled): " + ", ".join(f"{a:.2f}" for a, _, _ in alphas), ""]
    return "\n".join(out)


def check_levels(table: KTable) -> list[int]:
    """The concurrency levels --check-config replays: each row's first and last batch size."""
    return sorted({c for lo, hi, _ in table.rows for c in (lo, min(hi, CHECK_MAX_CONCURRENCY))})


def check(ep, baseline, texts: dict[str, list[str]], s: dict, config_path: Path, log) -> list[dict]:
    """Replay each row of the table in `config_path` at its first and last batch size: the
    server's default (the table), plain, and the row's K fixed (where the server switches per
    request). Rows: {range, k, concurrency, table_vs_plain, table_vs_fixed, predicted, flag}."""
    table = KTable.read(config_path)
    side = Path(config_path).with_name("schedule.json")
    predicted = {r["batch"]: r for r in json.loads(side.read_text())["per_batch"]} if side.exists() else {}
    per_request = ep.supports_speculative()
    if not per_request and baseline is None:
        raise ConfigError("--check-config on a server that cannot switch speculation per request needs "
                          "--endpoint-baseline (the same model served without speculation)")
    spec = {"method": s["method"]} if s["method"] else {}
    rows = []
    for lo, hi, k in table.rows:
        for c in sorted({lo, min(hi, CHECK_MAX_CONCURRENCY)}):
            ps = prompts_for(texts, c, s["n"])
            tps = {}
            modes = {"table": (ep, None), "plain": (ep, {"method": "none"}) if per_request else (baseline, None)}
            if per_request and k > 0:
                modes["fixed"] = (ep, {**spec, "k": k})
            for mode, (e, sp) in modes.items():
                res = {w: asyncio.run(e.run(p, s["max_tokens"], sp, c)) for w, p in ps.items()}
                tps[mode] = pooled(c, k, res).tokens_per_s
            vs_plain = tps["table"] / tps["plain"]
            pred = predicted.get(c)
            rows.append({"range": f"{lo}-{hi}", "k": k, "concurrency": c, "table_vs_plain": vs_plain,
                         "table_vs_fixed": tps["table"] / tps["fixed"] if "fixed" in tps else None,
                         "predicted": pred["speedup"] if pred and pred["k"] == k else None,
                         "flag": k > 0 and vs_plain < 1.0})
            log(f"rows {lo}-{hi} (K {k}) at concurrency {c}: {vs_plain:.2f}x plain")
    return rows


def render_check(rows: list[dict]) -> str:
    out = ["| batch sizes | K | concurrency | measured vs plain | predicted | table vs fixed K | |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        pred = f"{r['predicted']:.2f}x" if r["predicted"] else "-"
        fixed = f"{r['table_vs_fixed']:.3f}" if r["table_vs_fixed"] else "-"
        flag = "**drafts and loses**" if r["flag"] else ""
        out.append(f"| {r['range']} | {r['k']} | {r['concurrency']} | {r['table_vs_plain']:.2f}x | {pred} | "
                   f"{fixed} | {flag} |")
    return "\n".join(out) + "\n"
