"""Arguments shared by generate, analyze and serve: which proposer, and k."""
from __future__ import annotations

import argparse

from ..config import SpecConfig
from ..errors import ConfigError


def _k(value: str):
    if value in ("auto", "heuristic"):
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be an integer, 'auto' or 'heuristic', got {value!r}")


def add_compile_arg(p) -> None:
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="run the compiled decoder: on the CPU the native decoder (built once per "
                        "machine with the C compiler and cached), on CUDA captured CUDA graphs; "
                        "default: where it builds, else eager PyTorch with one warning")


def add_method_args(p) -> None:
    p.add_argument("--method", help="proposer: draft, ngram, suffix, layerskip, auto or none "
                                    "(default: draft when a draft model is given, else none)")
    p.add_argument("--k", type=_k, default="auto",
                   help="draft tokens per round: an integer 0..16, 'auto' (adaptive, default) or 'heuristic'")
    p.add_argument("--k-max", type=int, default=8, help="largest k the adaptive policy may choose")
    p.add_argument("--ngram-min", type=int, default=1)
    p.add_argument("--ngram-max", type=int, default=4)
    p.add_argument("--layerskip-layers", type=int, help="layers of the target used as the draft")


def spec_from_args(args, has_draft: bool) -> SpecConfig:
    method = args.method or ("draft" if has_draft else "none")
    if method == "draft" and not has_draft:
        raise ConfigError("method 'draft' needs a draft model (--draft DIR)")
    k = 0 if method == "none" else args.k
    opts = {"ngram_min": args.ngram_min, "ngram_max": args.ngram_max}
    if args.layerskip_layers is not None:
        opts["layerskip_layers"] = args.layerskip_layers
    k_max = max(args.k_max, k) if isinstance(k, int) else args.k_max
    return SpecConfig(method=method, k=k, k_max=k_max, options=opts)
