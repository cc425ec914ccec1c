"""Side-by-side peers: specdec vs Hugging Face transformers vs llama.cpp, on the same weights
and the same prompt token ids, against the machine's memory-bandwidth roofline.

    python benchmarks/peers.py --out results/peers            # the full run (tens of minutes)
    python benchmarks/peers.py --quick --out /tmp/peers-quick   # smoke test (a few minutes)
    python benchmarks/peers.py --target FILE.gguf --out DIR      # a real model, no draft (peers_real.py)

Writes results.json and table.md to --out. Protocol: batch 1, fixed-length outputs
(EOS ignored/suppressed), greedy and temperature 1 with a seed; each row is warmed up and
its thread count chosen (best of --threads); rows named '<family> k=<k>' are tuned to
their best k on one greedy prompt; then every (mode, workload) cell is the median of
reps × prompts timed runs, peers alternated (rotated order each repetition).
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import llamacpp  # noqa: E402
import report  # noqa: E402
import roofline  # noqa: E402
from runners import hf_rows, profile, specdec_rows  # noqa: E402


def parse_args(argv=None):
    from specdec.defaults import default_draft, default_target
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=str(default_target()), help="a checkpoint folder, or a GGUF file: "
                    "a real model beside llama.cpp on the same weights, no draft (peers_real.py)")
    ap.add_argument("--draft", default=str(default_draft()))
    ap.add_argument("--out", default="results/peers")
    ap.add_argument("--workloads", default="code,prose")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per workload")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions per prompt (runs = reps x prompts)")
    ap.add_argument("--ks", default="2,3,4,6,8", help="fixed draft lengths to tune over")
    ap.add_argument("--threads", default="1,2", help="thread counts each row may use (best is kept)")
    ap.add_argument("--modes", default="greedy,sample")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--no-hf", action="store_true", help="skip the Hugging Face rows")
    ap.add_argument("--no-build", action="store_true", help="use llama.cpp only if already built")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny settings")
    ap.add_argument("--profile", action="store_true", help="also write profile.txt (specdec plain and draft)")
    a = ap.parse_args(argv)
    if a.quick:
        a.prompts, a.prompt_tokens, a.new_tokens, a.reps, a.ks, a.threads = 1, 32, 16, 1, "2,4", "2"
    a.ks = [int(k) for k in a.ks.split(",")]
    a.threads = [int(t) for t in a.threads.split(",")]
    a.workloads, a.modes = a.workloads.split(","), a.modes.split(",")
    return a


def load_prompts(tok, workloads, n, prompt_tokens, seed=0) -> dict[str, list[list[int]]]:
    """Held-out prompts, re-encoded from their text so that every engine's tokenizer sees a
    canonical tokenization (a window cut mid-document need not round-trip)."""
    from specdec.analysis.workloads import load_workload
    out = {}
    for wl in workloads:
        out[wl] = [tok.frame(tok.encode(tok.decode(p), add_special_tokens=False)[:prompt_tokens])
                   for p in load_workload(wl, tok, n=n, prompt_tokens=prompt_tokens, seed=seed)]
    return out


def llamacpp_rows(args, tok, prompts, log) -> tuple[list, list[dict], dict]:
    """llama.cpp rows (plain, speculative -md, lookup), or skip notes when impossible."""
    info = {}
    if args.no_llamacpp:
        return [], [{"group": "llama.cpp", "name": "llama.cpp (all rows)", "skip": "--no-llamacpp"}], info
    bins, why = llamacpp.ensure_built(allow_build=not args.no_build)
    if bins is None:
        log(f"SKIP llama.cpp rows: {why}")
        return [], [{"group": "llama.cpp", "name": "llama.cpp (all rows)", "skip": why}], info
    try:
        tg, dg = llamacpp.convert(args.target), llamacpp.convert(args.draft)
    except RuntimeError as e:
        return [], [{"group": "llama.cpp", "name": "llama.cpp (all rows)", "skip": str(e)[:300]}], info
    mism = [f"{wl}[{i}]" for wl, ps in prompts.items() for i, p in enumerate(ps)
            if llamacpp.tokenize(bins, tg, tok.decode(p[1:])) != p]
    info = {"bin_dir": str(bins), "target_gguf": str(tg), "draft_gguf": str(dg),
            "tokenization_matches": not mism, "tokenization_mismatches": mism}
    log(f"llama.cpp: {bins}; tokenization of our prompts matches: {not mism} {mism or ''}")
    R, dec = llamacpp.LlamaCppRunner, tok.decode
    rows = [R("llama.cpp plain", "llama-completion", bins, tg, dec, "llama-completion")]
    for k in args.ks:
        rows.append(R(f"llama.cpp speculative k={k}", "llama-speculative", bins, tg, dec,
                      f"llama-speculative -md, --spec-draft-n-max {k}", draft_gguf=dg,
                      extra=["--spec-draft-n-max", str(k)]))
        rows.append(R(f"llama.cpp lookup k={k}", "llama-lookup", bins, tg, dec,
                      f"llama-lookup, --spec-draft-n-max {k}", extra=["--spec-draft-n-max", str(k)]))
    return rows, [], info


def tune(runners, prompt, args, log) -> list:
    """Warm every row up while choosing its thread count; keep the best k of each family."""
    best_tps = {}
    for r in runners:
        times = {}
        for t in args.threads:
            r.threads = t
            try:
                res = r.run(prompt, True, args.seed, args.new_tokens)
                times[t] = res["n_new"] / res["seconds"]
            except Exception as e:  # noqa: BLE001 - a failing row is reported, not fatal
                r.error = f"{type(e).__name__}: {str(e)[:300]}"
                log(f"  {r.name}: ERROR {r.error}")
                break
        if times:
            r.threads = max(times, key=times.get)
            best_tps[r.name] = times[r.threads]
            log(f"  tune {r.name}: " + ", ".join(f"{t} thr {v:.1f} tok/s" for t, v in times.items()))
    fams = {}  # family -> fastest member
    for r in runners:
        m = None if getattr(r, "error", None) else re.match(r"^(.*) k=(\d+)$", r.name)
        if m and (m.group(1) not in fams or best_tps[r.name] > best_tps[fams[m.group(1)].name]):
            fams[m.group(1)] = r
    keep, seen = [], set()
    matches = [None if getattr(r, "error", None) else re.match(r"^(.*) k=(\d+)$", r.name) for r in runners]
    for r, m in zip(runners, matches):  # keep the original order; a family takes its first member's place
        if not m:
            keep.append(r)
        elif m.group(1) not in seen:
            seen.add(m.group(1))
            best = fams[m.group(1)]
            best.setting, best.name = f"best of k={args.ks}: {best.setting}", m.group(1)
            keep.append(best)
    return keep


def measure(runners, prompts, args, log) -> dict:
    """runs[name][f'{mode}/{wl}'] = list of results; peers alternated, each cell warmed up."""
    runs = {r.name: {} for r in runners}
    live = [r for r in runners if not getattr(r, "error", None)]
    for mode in args.modes:
        greedy = mode == "greedy"
        for wl, plist in prompts.items():
            cell = f"{mode}/{wl}"
            for r in live:  # warm-up, discarded
                _safe(r, plist[0], greedy, args.seed, args.new_tokens)
            for rep in range(args.reps):
                order = live[rep % len(live):] + live[:rep % len(live)]
                for i, p in enumerate(plist):
                    for r in order:
                        res = _safe(r, p, greedy, args.seed + i, args.new_tokens)
                        res.update(prompt=i, rep=rep)
                        runs[r.name].setdefault(cell, []).append(res)
            log(f"  {cell}: " + ", ".join(
                f"{r.name} {report.summarize(runs[r.name][cell])['tok_s'] or 0:.1f}" for r in live))
    return runs


def _safe(r, p, greedy, seed, n) -> dict:
    try:
        return r.run(p, greedy, seed, n)
    except Exception as e:  # noqa: BLE001
        return {"n_new": 0, "seconds": None, "error": f"{type(e).__name__}: {str(e)[:300]}"}


def identities(runners, runs, prompts, tok) -> dict:
    """Greedy output identity of each row against specdec plain, per workload (first rep)."""
    out = {}
    for wl, plist in prompts.items():
        ref = [next((x.get("tokens") for x in runs.get("specdec plain", {}).get(f"greedy/{wl}", [])
                     if x.get("prompt") == i and x.get("rep") == 0), None) for i in range(len(plist))]
        for r in runners:
            if "(draft model)" in r.name:
                continue
            got = [next((x for x in runs[r.name].get(f"greedy/{wl}", [])
                         if x.get("prompt") == i and x.get("rep") == 0), {}) for i in range(len(plist))]
            if all(g.get("tokens") is not None for g in got):
                out.setdefault(r.name, {})[wl] = report.identity([g["tokens"] for g in got], ref)
            elif any(ref) and all("text" in g for g in got):  # text rows: compare text, overshoot trimmed
                refs = [tok.decode(x) if x else None for x in ref]
                texts = [g["text"][:len(t)] if t else None for g, t in zip(got, refs)]
                out.setdefault(r.name, {})[wl] = report.identity(texts, refs)
    return out


def machine_info() -> dict:
    from specdec.costs.cache import _cpu_name
    cpu = _cpu_name()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    import transformers
    return {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu, "cores": len(__import__("os").sched_getaffinity(0)), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "git_commit": commit,
            "command": " ".join(["python"] + sys.argv), "loadavg_1m": __import__("os").getloadavg()[0]}


def main(argv=None) -> int:
    from specdec.build import load_models
    args = parse_args(argv)
    if args.target.endswith(".gguf"):
        import peers_real
        return peers_real.main(args, lambda s: print(s, flush=True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = lambda s: print(s, flush=True)  # noqa: E731
    torch.set_num_threads(2)
    load0 = __import__("os").getloadavg()[0]
    if load0 > 1.0:
        log(f"WARNING: load average {load0:.1f} before starting; other processes will distort the timings "
            "(llama.cpp's spinning threads suffer most). Re-run on a quiet machine for publishable numbers.")
    models = load_models(args.target, args.draft)
    tok = models.tokenizer
    prompts = load_prompts(tok, args.workloads, args.prompts, args.prompt_tokens)
    log(f"prompts: " + ", ".join(f"{wl} {len(ps)} x ~{len(ps[0])} tokens" for wl, ps in prompts.items()))
    max_len = args.prompt_tokens + args.new_tokens + 32
    rows, skipped = specdec_rows(models, args.ks, 2, max_len)
    hr, hs = ([], [{"group": "HF transformers", "name": "HF (all rows)", "skip": "--no-hf"}]) if args.no_hf \
        else hf_rows(args.target, args.draft, args.ks, 2)
    lr, ls, linfo = llamacpp_rows(args, tok, prompts, log)
    rows, skipped = rows + hr + lr, skipped + hs + ls
    for s in skipped:
        log(f"SKIP {s['name']}: {s['skip']}")
    t0 = time.time()
    log("tuning (warm-up, threads, best k) ...")
    rows = tune(rows, prompts[args.workloads[0]][0], args, log)
    log("measuring ...")
    runs = measure(rows, prompts, args, log)
    ident = identities(rows, runs, prompts, tok)
    table_rows = []
    for r in rows:
        cells = {c: report.summarize(v) for c, v in runs.get(r.name, {}).items()}
        errs = sorted({x["error"] for v in runs.get(r.name, {}).values() for x in v if x.get("error")})
        table_rows.append({"group": r.group, "name": r.name, "setting": f"{r.setting}; threads={r.threads}",
                           "skip": getattr(r, "error", None), "cells": cells, "identity": ident.get(r.name, {}),
                           "errors": errs})
    table_rows += skipped
    roof = roofline_section(args, models, table_rows, log)
    cols = [f"{m}/{w}" for m in args.modes for w in args.workloads]
    gs = {c: report.goals(table_rows, c, roof.get("target_plain_bound_tok_s")) for c in cols}
    table = report.markdown_table(table_rows, args.workloads, args.modes)
    md = table + "\n\n" + "".join(f"Goals ({c}):\n\n{report.goals_markdown(g)}\n\n" for c, g in gs.items()) \
        + f"Roofline: {json.dumps(roof)}\n"
    results = {"machine": machine_info(), "args": {k: v for k, v in vars(args).items()},
               "llamacpp": linfo, "rows": table_rows, "runs": runs, "roofline": roof, "goals": gs,
               "wall_s": time.time() - t0, "loadavg_1m_start": load0}
    if args.profile:
        p0 = prompts[args.workloads[0]][0]
        text = "".join(profile(r, p0, args.new_tokens) for r in rows
                       if r.name in ("specdec plain", "specdec draft") and not getattr(r, "error", None))
        (out / "profile.txt").write_text(text)
        log(f"wrote {out / 'profile.txt'}")
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "table.md").write_text(md)
    log(md)
    log(f"wrote {out / 'results.json'} and {out / 'table.md'}")
    return 0


def roofline_section(args, models, table_rows, log) -> dict:
    """Bandwidth, plain bound for the target and the speculative bound from measured α and c."""
    tcfg = json.loads((Path(args.target) / "config.json").read_text())
    dcfg = json.loads((Path(args.draft) / "config.json").read_text())
    # the roofline: streaming passes over a buffer the size of the target's weights, which is
    # what a decode step reads (on a CPU whose last-level cache holds them, that is L3 speed)
    bw = roofline.measure_bandwidth(round(roofline.weight_bytes(tcfg) / 2**20))
    plen = args.prompt_tokens + 1
    tp = roofline.plain_bound(bw, tcfg, plen, args.new_tokens)
    dp = roofline.plain_bound(bw, dcfg, plen, args.new_tokens)
    out = {"bandwidth_GBps": bw / 1e9, "target_weight_MB": roofline.weight_bytes(tcfg) / 1e6,
           "target_plain_bound_tok_s": tp, "draft_plain_bound_tok_s": dp, "c_bytes": tp and dp and tp / dp}
    cell = f"greedy/{args.workloads[0]}"
    tok = {r["name"]: r.get("cells", {}).get(cell, {}) for r in table_rows if not r.get("skip")}
    pt, pd = tok.get("specdec plain", {}).get("tok_s"), tok.get("specdec plain (draft model)", {}).get("tok_s")
    out["c_measured"] = pt / pd if pt and pd else None
    lp = tok.get("llama.cpp plain", {}).get("tok_s")
    # llama.cpp's effective bandwidth: the weight bytes it streams per token times its tokens/s
    out["llamacpp_plain_GBps"] = lp * roofline.weight_bytes(tcfg) / 1e9 if lp else None
    out["specdec_plain_GBps"] = pt * roofline.weight_bytes(tcfg) / 1e9 if pt else None
    out["specdec_plain_vs_roofline"] = pt / tp if pt and tp else None
    alpha = tok.get("specdec draft", {}).get("acceptance")
    if alpha is not None:
        out["alpha_measured"] = alpha
        c = out["c_measured"] or out["c_bytes"]
        out["spec_bound_c"] = c
        out["spec_bound_tok_s"], out["spec_bound_k"] = roofline.spec_bound(tp, alpha, c)
    log(f"roofline: {out}")
    return out


if __name__ == "__main__":
    sys.exit(main())
