"""`specdec generate`: decode prompts plainly or speculatively and report the statistics."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from ..config import COUPLINGS, EngineConfig, SamplingParams
from ..build import default_pair, load_models, make_engine
from ..engine.origins import RoundLog
from ..errors import PromptError
from .show_rounds import show
from ..analysis.conversations import encode_prompts, read_prompts as read_prompt_file
from ..models.chat_template import ChatTemplate
from .common import add_load_args, load_kwargs, read_template, add_method_args, spec_from_args


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="generate text, plainly or with speculative decoding")
    p.add_argument("--target", type=Path, help="target checkpoint dir (default: bundled target)")
    p.add_argument("--draft", type=Path, help="draft checkpoint dir (default: bundled draft when "
                                              "--target is not given; otherwise none)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt")
    src.add_argument("--chat", help="one user message, rendered with the target's chat template")
    src.add_argument("--prompt-file", type=Path)
    src.add_argument("--batch-file", type=Path, help="JSONL, one {\"prompt\": ...} or {\"messages\": [...]} per "
                                                     "line, or a ShareGPT JSON file (chats use the template)")
    p.add_argument("--chat-template", type=Path, help="a Jinja chat template file for --chat "
                                                          "(default: the checkpoint's own)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--sampling-coupling", choices=COUPLINGS, default="standard",
                   help="invariant: the same text for a seed whatever the proposer, k or batch "
                        "(at some cost in acceptance); standard: rejection sampling")
    p.add_argument("--ignore-eos", action="store_true", help="always generate max-new-tokens tokens")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    p.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    p.add_argument("--show-rounds", action="store_true",
                   help="print every round (k, accepted, time) and the text coloured by each token's "
                        "origin: accepted draft, recovered at a rejection, bonus, plain")
    add_load_args(p)
    add_method_args(p)
    p.set_defaults(func=run)


def read_prompts(args) -> list:
    """The prompts: texts, or conversations (`--chat`, or chat lines of a --batch-file in any
    format `analyze --prompts` reads: analysis/conversations.py)."""
    if args.chat is not None:
        return [[{"role": "user", "content": args.chat}]]
    if args.prompt is not None:
        return [args.prompt]
    if args.prompt_file:
        try:
            return [args.prompt_file.read_text(encoding="utf-8")]
        except (OSError, UnicodeDecodeError) as e:
            raise PromptError(f"cannot read {args.prompt_file}: {e}") from e
    return read_prompt_file(args.batch_file).items


def run(args) -> int:
    prompts = read_prompts(args)
    template = read_template(args.chat_template)        # a bad file stops us before loading
    if any(not p for p in prompts):
        raise PromptError("empty prompt")
    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                            seed=args.seed, max_new_tokens=args.max_new_tokens, ignore_eos=args.ignore_eos,
                            coupling=args.sampling_coupling)
    target, draft = default_pair(args.target, args.draft, args.method)
    models = load_models(target, draft, **load_kwargs(args))
    spec = spec_from_args(args, has_draft=models.draft is not None)
    # a batch never holds more rows than there are prompts: fewer rows to size the cache for
    # and to price when k = auto measures the machine (one prompt: batch 1 only)
    engine = make_engine(models, spec, EngineConfig(max_batch=min(args.max_batch, len(prompts)), device=args.device,
                                                    max_model_len=models.target.config.max_position_embeddings))
    tok = models.tokenizer
    ids = encode_prompts(prompts, tok, ChatTemplate(tok, template))
    stream = not args.json and not args.show_rounds and len(prompts) == 1
    log = RoundLog() if args.show_rounds else None
    engine.on_round = log
    shown = [0]

    def on_step(seqs):
        if stream and seqs:
            text = tok.decode(seqs[0].output_ids)
            sys.stdout.write(text[shown[0]:])
            sys.stdout.flush()
            shown[0] = len(text)

    seqs = engine.generate(ids, params, on_step=on_step)
    if log is not None:
        console = Console()
        for i, seq in enumerate(seqs):
            show(console, tok, log, seq, label=f"[{i}] " if len(seqs) > 1 else "")
    for seq in seqs:
        stats = seq.stats.as_dict(seq.num_output)
        if args.json:
            print(json.dumps({"text": tok.decode(seq.output_ids), "token_ids": seq.output_ids, "stats": stats,
                              "weights": models.target.provenance}))
        else:
            if stream:
                print()
            elif log is None:
                print(tok.decode(seq.output_ids))
            print(json.dumps(stats), file=sys.stderr)
    return 0
