"""`specdec trace`: one request's rounds in full, as JSON, tensors and a self-contained page.

    specdec trace --prompt "def parse_args(argv):" --k 4 --temperature 1 --seed 0 --out out/trace

writes into --out:
- trace.json: per round the drafts with q(x), p(x), u and the decision; at a rejection the
  top entries of norm(max(0, p - q)) and the token drawn; the target forward's time against
  a plain step's (specdec/engine/trace.py);
- trace.safetensors: the full p (k+1, V), q (k, V) and u (k+1) of every round, for replay;
- trace.html: the text coloured by origin; clicking a token shows its round.
"""
from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file

from ..build import default_pair, load_models, make_engine
from ..config import EngineConfig, SamplingParams
from ..engine.trace import trace_request
from ..errors import ConfigError, PromptError
from .common import add_load_args, load_kwargs, add_method_args, spec_from_args
from .trace_page import render

DEFAULT_K = 4               # a fixed k shows what verification does at that k; "auto" also works
DEFAULT_NEW_TOKENS = 48     # a few dozen rounds: enough to see both regimes, small enough to read


def add_parser(sub) -> None:
    p = sub.add_parser("trace", help="record one request's rounds (q, p, u, decisions, timings) "
                                     "as JSON and an HTML page")
    p.add_argument("--target", type=Path, help="target checkpoint dir (default: bundled target)")
    p.add_argument("--draft", type=Path, help="draft checkpoint dir (default: bundled draft)")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_NEW_TOKENS)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int)
    p.add_argument("--out", type=Path, required=True, help="directory for trace.json, .safetensors, .html")
    add_load_args(p)
    add_method_args(p, k_table=False, tree=False)  # one request: a table by batch size has nothing to pick
    p.set_defaults(func=run, k=DEFAULT_K)


def run(args) -> int:
    if not args.prompt:
        raise PromptError("empty prompt")
    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                            max_new_tokens=args.max_new_tokens, ignore_eos=args.ignore_eos)
    models = load_models(*default_pair(args.target, args.draft, args.method), **load_kwargs(args))
    spec = spec_from_args(args, has_draft=models.draft is not None)
    engine = make_engine(models, spec, EngineConfig(max_batch=1, device=args.device,
                                                    max_model_len=models.target.config.max_position_embeddings))
    tok = models.tokenizer
    record, tensors = trace_request(engine, tok.encode(args.prompt), params)
    add_text(record, tok)
    record.update(prompt=args.prompt, method=spec.method, k=spec.k, target=str(models.target_path),
                  draft=str(models.draft_path) if models.draft_path else None, device=args.device)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {args.out}: {e}") from e
    (args.out / "trace.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    save_file({name: t.contiguous() for name, t in tensors.items()}, str(args.out / "trace.safetensors"))
    (args.out / "trace.html").write_text(render(record), encoding="utf-8")
    r = record["stats"]
    print(f"{len(record['rounds'])} rounds, {len(record['output_ids'])} tokens, {r['accepted_tokens']} accepted "
          f"drafts of {r['draft_tokens']}: {args.out / 'trace.html'}")
    return 0


def add_text(record: dict, tok) -> None:
    """Give every token in the record its text: the output's pieces (engine/origins.py's
    views), each draft's and each top entry's own decoding."""
    emitted = list(record["first_token"]) + [t for r in record["rounds"] for t in r["emitted"]]
    pieces = tok.pieces(emitted)
    record["first_text"] = pieces[0] if pieces else ""
    i = 1
    for r in record["rounds"]:
        r["emitted_text"] = pieces[i:i + len(r["emitted"])]
        i += len(r["emitted"])
        for d in r["drafts"]:
            d["text"] = tok.decode([d["token"]])
            d["target_argmax_text"] = tok.decode([d["target_argmax"]])
        r["next"]["text"] = tok.decode([r["next"]["token"]])
        r["next"]["top"] = [[t, pr, tok.decode([t])] for t, pr in r["next"]["top"]]
    record["prompt_text"] = tok.decode(record["prompt_ids"])
