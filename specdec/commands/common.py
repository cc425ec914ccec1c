"""Arguments shared by generate, analyze and serve: which proposer, and k."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..build import DEFAULT_K_MAX, NGRAM_MAX, NGRAM_MIN, spec_config
from ..config import KTable, SpecConfig
from ..errors import ConfigError
from ..models.quantize import WEIGHT_DTYPES


def _k(value: str):
    if value in ("auto", "heuristic"):
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be an integer, 'auto' or 'heuristic', got {value!r}")


def add_load_args(p) -> None:
    """How the models are loaded: --compile, --dtype, --draft-dtype (see `load_kwargs`)."""
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="run the compiled decoder: on the CPU the native decoder (built once per "
                        "machine with the C compiler and cached), on CUDA captured CUDA graphs; "
                        "default: where it builds, else eager PyTorch with one warning")
    p.add_argument("--dtype", choices=WEIGHT_DTYPES, default=None,
                   help="the target's weights: float32, int8 (rounded at load, one scale per output "
                        "channel) or int4 (one scale per 32 inputs); activations stay float32; "
                        "default: as stored (a folder written by `specdec quantize` loads as its "
                        "type, else float32)")
    p.add_argument("--draft-dtype", choices=WEIGHT_DTYPES, default=None,
                   help="the draft's weights (default: --dtype)")


def load_kwargs(args) -> dict:
    """`build.load_models` keyword arguments from a command's parsed arguments."""
    return {"device": getattr(args, "device", "cpu") or "cpu", "threads": getattr(args, "threads", None),
            "compile": args.compile, "weights": args.dtype, "draft_weights": args.draft_dtype,
            "method": getattr(args, "method", None), "head": getattr(args, "head", None)}


def add_method_args(p, k_table: bool = True, tree: bool = True) -> None:
    p.add_argument("--method", help="proposer: draft, parallel, ngram, suffix, layerskip, eagle, mtp, auto or "
                                    "none (default: draft when a draft model is given, else none; parallel: a "
                                    "draft with a mask token, k drafts from one forward; the bundled one by default)")
    p.add_argument("--head", type=Path, metavar="DIR",
                   help="eagle: the feature head (default: the shipped head for the target, by its weights hash)")
    p.add_argument("--k", type=_k, default=None,
                   help="draft tokens per round: an integer 0..16, 'auto' (adaptive, default) or 'heuristic'")
    if k_table:
        p.add_argument("--k-table", type=Path, metavar="FILE",
                       help="k by batch size instead of --k: a JSON file with vLLM's speculative_config "
                            "(its num_speculative_tokens_per_batch_size) or that mapping alone, as "
                            "`specdec analyze` writes it")
    p.add_argument("--k-max", type=int, default=DEFAULT_K_MAX, help="largest k the adaptive policy may choose")
    if tree:     # trace reads chains of drafts (a tree round: benchmarks/tree_picture.py)
        p.add_argument("--tree", type=parse_tree, default=0, metavar="N|auto|off",
                       help="draft a token tree of up to N nodes and depth --k per round instead of a chain "
                            "(methods draft, eagle, mtp, ngram and suffix, fixed k; greedy or temperature-only sampling; auto: "
                            "a draft model's or feature head's tree, sized each round by the target's measured costs; "
                            "default off)")
    p.add_argument("--ngram-min", type=int, default=NGRAM_MIN)
    p.add_argument("--ngram-max", type=int, default=NGRAM_MAX)
    p.add_argument("--layerskip-layers", type=int, help="layers of the target used as the draft")


def spec_from_args(args, has_draft: bool) -> SpecConfig:
    """The SpecConfig the flags ask for, by `build.spec_config`'s rule."""
    opts: dict[str, object] = {"ngram_min": args.ngram_min, "ngram_max": args.ngram_max}
    if args.layerskip_layers is not None:
        opts["layerskip_layers"] = args.layerskip_layers
    k = getattr(args, "k", None)
    if getattr(args, "k_table", None) is not None:
        if k is not None:
            raise ConfigError("--k and --k-table are mutually exclusive")
        k = KTable.read(args.k_table)
    return spec_config(args.method, "auto" if k is None else k, args.k_max, has_draft, opts,
                       tree=getattr(args, "tree", 0))


def parse_tree(text: str) -> int | str:
    """--tree: 'off' (0), 'auto' or a node budget."""
    if text in ("off", "auto"):
        return 0 if text == "off" else text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tree takes a node budget, 'auto' or 'off', got {text!r}") from None


def read_template(path: Path | None) -> str | None:
    """`--chat-template FILE`'s text (None without one), compiled once here so that a bad file
    stops the command before anything loads."""
    from ..models.chat_template import compile_template
    if path is None:
        return None
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--chat-template {path}: cannot read it ({e})") from e
    compile_template(source, f"--chat-template {path}")
    return source
