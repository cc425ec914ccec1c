"""`specdec analyze`: measure and predict when speculative decoding pays off, and report it.

    specdec analyze --quick --out report/          # bundled models, all workloads, ~4 minutes

Runs plain and speculative decoding side by side over (workload, k, batch, temperature),
fits acceptance, predicts the speed-up from measured step costs, and writes results.json,
report.md and a self-contained report.html (see analysis/report.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..analysis.remote import add_remote_args
from ..analysis.settings import FULL, QUICK, grid_settings
from ..analysis.conversations import TURNS, encode_fitting, read_prompts
from ..analysis.workloads import ANALYSIS_WORKLOADS, NAMED_ONLY, load_workload, long_prompt_tokens, pick_workloads
from ..errors import ConfigError
from .common import parse_tree, add_load_args, load_kwargs, add_method_args, spec_from_args


def _list(kind):
    def parse(text: str):
        try:
            vals = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}, got {text!r}")
        if not vals:
            raise argparse.ArgumentTypeError("empty list")
        return vals
    return parse


def add_parser(sub) -> None:
    p = sub.add_parser("analyze", conflict_handler="resolve",
                       help="measure and predict when speculative decoding pays off; write a report")
    p.add_argument("--target", type=Path, help="target checkpoint dir (default: bundled target)")
    p.add_argument("--draft", type=Path, help="draft checkpoint dir (default: bundled draft when "
                                              "--target is not given)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workload", choices=["auto", "all", *ANALYSIS_WORKLOADS, *NAMED_ONLY], default="auto",
                     help="auto (default): chat for a target with a chat template, else all; all: every "
                          "built-in workload; chat: the chat workloads, chat-rewrite (a given passage to rewrite "
                          "or proofread) and ShareGPT first turns (pip install 'specdec[data]')")
    src.add_argument("--prompts", type=Path, help="a ShareGPT JSON file, or JSONL of {\"messages\": [...]} "
                                                  "(OpenAI chat) or {\"prompt\": text} lines")
    p.add_argument("--turns", choices=TURNS, default="first",
                   help="a conversation's prompt: up to its first user turn (default) or its last")
    add_load_args(p)
    add_method_args(p, k_table=False, tree=False)  # --method and proposer options; --k and --tree below
    p.add_argument("--k", type=_list(int), help="draft lengths to measure, e.g. 1,2,4,8")
    p.add_argument("--tree", type=parse_tree, default=0, metavar="N|auto|off",
                   help="also decode a token tree of depth k (node budget N, or sized by the costs: auto) "
                        "beside every batch-1 chain, and compare them (the methods of generate --tree; default off)")
    p.add_argument("--compare", type=_list(str), default=[], metavar="M1,M2|auto",
                   help="also decode these methods at every batch-1 k, side by side with --method "
                        "(e.g. draft,ngram; eagle uses --head or the shipped head for the target); auto: every "
                        "proposer this target has (a loaded draft, eagle where a head is found, ngram, suffix, "
                        "layerskip)")
    p.add_argument("--batch-sizes", type=_list(int), help="e.g. 1,4,16")
    p.add_argument("--temperatures", type=_list(float), help="e.g. 0,0.7,1,1.5 (the first is the base)")
    p.add_argument("--quick", action="store_true", help="small grid that finishes in about 4 minutes")
    p.add_argument("--grid", choices=["star", "full"], default="star",
                   help="star: every workload/k at batch 1, sweeps around it (default); full: every combination")
    p.add_argument("--repeats", type=int, help="repeats per cell, each on different prompts")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--extend-s", type=float, help="seconds of extra groups for cells whose 95%% interval is "
                                                  f"wider than +-10%% (default: {QUICK['extend_share'] * 100:.0f}%% of "
                                                  f"the decode time with --quick, {FULL['extend_share'] * 100:.0f}%% "
                                                  "without; 0: none)")
    p.add_argument("--prompt-tokens", type=int, help="prompt length for code/prose/random")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    p.add_argument("--cached-costs", action="store_true",
                   help="reuse the cost model's cached step times instead of timing them now")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--out", type=Path, default=Path("specdec-analysis"), help="output directory")
    w = p.add_argument_group("what if (costs of a shape without its weights; analysis/what_if.py)")
    w.add_argument("--what-if-shape", type=Path, metavar="CONFIG.json",
                   help="predict the speed-up curve of this model shape from the measured costs of a "
                        "random-weight model of it (with --dtype) and assumed acceptance rates")
    w.add_argument("--draft-shape", type=Path, metavar="CONFIG.json",
                   help="the draft's shape, timed likewise (default: a draft step at 0.1 x a target step)")
    w.add_argument("--alpha", type=_list(float), help="acceptance rates to predict at (default 0.5,...,0.9)")
    add_remote_args(p)
    p.set_defaults(func=run)


def _settings(args) -> dict:
    return grid_settings(args.quick, **{key: getattr(args, key, None) for key in QUICK})


def _prompts(args, found, tokenizer, n, prompt_tokens, long_tokens, bars) -> dict[str, list[list[int]]]:
    """The workloads' prompts as token ids: `found` (the --prompts file, read) or built ones."""
    if found is not None:
        if found.truncated or found.skipped:
            bars.note(f"{args.prompts}: {len(found.items)} prompts; {found.skipped} skipped "
                      f"({'a truncated file; ' if found.truncated else ''}conversations without a user turn)")
        fitting = encode_fitting(found.items, tokenizer, n, long_tokens)
        if not fitting:
            raise ConfigError(f"{args.prompts}: no prompt fits the context ({long_tokens} prompt tokens)")
        return {args.prompts.stem: fitting}
    names, why = pick_workloads(args.workload, tokenizer)
    print(f"specdec: workloads {', '.join(names)} ({why})", file=sys.stderr, flush=True)
    return {w: load_workload(w, tokenizer, n=n, prompt_tokens=prompt_tokens, long_tokens=long_tokens) for w in names}


DRAFT_FREE = ("ngram", "suffix", "layerskip")    # proposers every target has: no model to train
DEFAULT_FREE = "ngram"      # analyzed without --method or a draft: the cheapest proposer, no model to load


def proposers_of(models) -> list[str]:
    """The proposers this target has: a loaded draft (and parallel drafting where it has a mask
    token), a loaded EAGLE head, the draft-free ones."""
    return ((["draft"] if models.draft is not None else [])
            + (["parallel"] if getattr(models.draft, "mask_token", None) is not None else [])
            + (["eagle"] if getattr(models.head, "source", "") == "eagle" else []) + list(DRAFT_FREE))


def resolve_compare(methods: list[str], analyzed: str, models) -> list[str]:
    """`--compare` with `auto` replaced by proposers_of(models), less the analyzed method."""
    out = []
    for m in methods:
        out += [x for x in proposers_of(models) if x != analyzed] if m == "auto" else [m]
    return list(dict.fromkeys(out))


def check_compare(methods: list[str], models) -> None:
    """Refuse compared methods that do not exist or whose models are not loaded."""
    from ..proposers import available
    for m in methods:
        if m not in available() or m in ("none", "auto"):
            raise ConfigError(f"--compare: {m!r} is not a proposer to compare; choose among "
                              + ", ".join(x for x in available() if x not in ("none", "auto")))
        if (m == "draft" and models.draft is None) or (m in ("eagle", "mtp") and getattr(models.head, "source", "") != m):
            raise ConfigError(f"--compare {m}: its model is not loaded (" + {"draft": "--draft DIR", "eagle": "--head DIR",
                                                                              "mtp": "--method mtp"}[m] + ")")
        if m == "parallel" and getattr(models.draft, "mask_token", None) is None:
            raise ConfigError("--compare parallel: the loaded draft has no mask token (--draft DIR of a draft "
                              "trained by `specdec train parallel`; it also drafts step by step as `draft`)")


def run(args) -> int:
    if args.what_if_shape:
        from ..analysis.what_if import run_what_if
        return run_what_if(args)
    if any(getattr(args, name, None) for name in ("endpoint", "emit_vllm_config", "check_config")):
        from ..analysis.remote import run_remote
        return run_remote(args)
    from ..analysis.session import Progress, analyze
    from ..build import default_pair, find_head, load_models

    s = _settings(args)
    target, draft = default_pair(args.target, args.draft, args.method)
    found = read_prompts(args.prompts, args.turns) if args.prompts else None     # a bad file: before loading
    with Progress(disabled=args.no_progress) as bars:
        bars.note("loading models and prompts")
        load = load_kwargs(args)
        if {"eagle", "auto"} & set(args.compare) and load["head"] is None and load["method"] != "mtp":
            load["head"] = find_head(target)       # the target's shipped head, for the compared eagle
        models = load_models(target, draft, **load)
        if args.method is None and models.draft is None:
            args.method = DEFAULT_FREE
            print(f"specdec: no draft and no --method: analyzing {DEFAULT_FREE} (--method NAME, or --compare auto "
                  f"for the others: {', '.join(x for x in proposers_of(models) if x != DEFAULT_FREE)})",
                  file=sys.stderr, flush=True)
        spec = spec_from_args(argparse.Namespace(**{**vars(args), "k": max(s["k"])}),
                              has_draft=models.draft is not None)
        if spec.method == "none":
            raise ConfigError("nothing to analyze with method 'none': give --draft DIR or --method NAME")
        args.compare = resolve_compare(args.compare, spec.method, models)
        check_compare(args.compare, models)
        n = s["repeats"] * max(s["batch_sizes"])
        long_tokens = long_prompt_tokens(models.target.config.max_position_embeddings, s["max_new_tokens"])
        prompts = _prompts(args, found, models.tokenizer, n, s["prompt_tokens"], long_tokens, bars)

        def spec_for_k(k: int):   # a chain; trees are the session's (analysis/trees.py)
            ns = argparse.Namespace(**{**vars(args), "k": k, "method": "none" if k == 0 else spec.method, "tree": 0})
            return spec_from_args(ns, has_draft=models.draft is not None)

        method = (f"the draft model `{models.draft_path.name}`" if spec.method == "draft"
                  else f"method `{spec.method}`")
        paths = analyze(models, prompts, spec_for_k, s, method, args.out, bars,
                        full=args.grid == "full", quick=args.quick, device=args.device,
                        remeasure=not args.cached_costs, threads_fixed=args.threads is not None, tree=spec.tree,
                        compare=args.compare)
    print(f"wrote {paths['html']}, {paths['md']} and {paths['json']}")
    return 0
