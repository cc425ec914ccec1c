"""`specdec train tokenizer|target|draft|distill`: the steps that build the bundled models."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..defaults import cache_dir
from ..models.llama import LlamaModel
from ..models.loader import load_model
from ..models.tokenizer import Tokenizer
from ..corpus import HELD_OUT_BYTE, corpus_files
from ..errors import ConfigError
from .data import CORPORA, Batches, token_stream
from .like import DRAFT_HIDDEN, DRAFT_LAYERS
from .packages import PACKAGES
from .presets import preset
from .tokenizer import train_tokenizer
from .trainer import TrainConfig, init_weights, lm_loss, train
from .unlikelihood import UL_WEIGHT

DEFAULTS = {"target": dict(tokens=6_000_000, minutes=100, lr=1e-3),
            "eagle": dict(tokens=2_000_000, minutes=45, lr=1e-3),
            "draft": dict(tokens=12_000_000, minutes=30, lr=2e-3),
            "distill": dict(tokens=3_000_000, minutes=20, lr=5e-4),
            "parallel": dict(tokens=3_000_000, minutes=20, lr=5e-4),
            "unlikelihood": dict(tokens=2_000_000, minutes=40, lr=3e-4)}


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train the tokenizer, target, draft, distilled draft, parallel draft or "
                       "feature head; fine-tune the target away from loops (unlikelihood)")
    p.add_argument("what", choices=["tokenizer", "target", "draft", "distill", "parallel", "eagle", "unlikelihood"],
                   help="unlikelihood: fine-tune --init (default --target) away from greedy loops")
    p.add_argument("--out", type=Path, help="checkpoint directory (default models/<what>)")
    p.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer.json"))
    p.add_argument("--target", type=Path, default=Path("models/target"),
                   help="teacher for distill; the frozen target of eagle")
    p.add_argument("--like", type=Path, metavar="TARGET",
                   help="draft: a small draft for this target (a checkpoint folder or .gguf with a chat "
                        "template): its tokenizer, distilled toward it on ShareGPT chats (needs --out)")
    p.add_argument("--hidden", type=int, default=DRAFT_HIDDEN,
                   help=f"--like: the draft's hidden size (default {DRAFT_HIDDEN})")
    p.add_argument("--layers", type=int, default=DRAFT_LAYERS,
                   help=f"--like: the draft's layers (default {DRAFT_LAYERS})")
    p.add_argument("--mtp", type=Path, metavar="DIR",
                   help="eagle: also write the head as MTP layers into a copy of --target in DIR")
    p.add_argument("--init", type=Path, help="start from this checkpoint's weights (a warm start; for "
                   "distill the student, default models/draft; for parallel a draft of the target's "
                   "vocabulary, default models/draft-distill; for eagle a head; for unlikelihood "
                   "default --target)")
    p.add_argument("--corpus", choices=CORPORA + ("sharegpt",),
                   help="stdlib: the standard library's train split; extended (the default): plus pinned "
                        "third-party packages downloaded into the cache (train/packages.py); sharegpt "
                        "(eagle and parallel; their default for a target with a chat template): ShareGPT V3's "
                        "training split through the target's chat template, and the target's replies")
    p.add_argument("--resume", action="store_true", help="continue the run saved in --work")
    p.add_argument("--tokens", type=int)
    p.add_argument("--minutes", type=float, help="the run's training time in all (the schedule's length)")
    p.add_argument("--stop-after", type=float, metavar="MIN",
                   help="end this invocation after MIN minutes of training, saved for --resume (a long "
                        "run in pieces; the schedule still spans --minutes)")
    p.add_argument("--lr", type=float)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: bf16 autocast on the GPU (target and draft; tools/gpu_train.sh)")
    p.add_argument("--bf16", action="store_true",
                   help="bf16 autocast on the CPU: faster where the cores have bf16 instructions "
                        "(AVX-512 bf16, AMX), slower where they have not")
    p.add_argument("--batch", type=int, default=TrainConfig.batch,
                   help="sequences of 256 tokens per step (default 8; a GPU takes 64 or more)")
    p.add_argument("--ul-weight", type=float, default=UL_WEIGHT,
                   help=f"unlikelihood: the loop loss's weight beside the next-token loss (default {UL_WEIGHT})")
    p.add_argument("--chat-prompts", type=int, metavar="N",
                   help="chat data (eagle, draft --like): the training split's first turns the target "
                        "answers, greedy and at T = 1 (default 320); more extends a cached run's replies")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path, help="resumable state folder (default: cache dir)")
    p.set_defaults(func=run)


def model_card(kind: str, cfg, state: dict, corpus: str = "stdlib", init: Path | None = None) -> str:
    held = corpus_files("heldout")
    source = "the Python standard library's train split" + (
        " and " + ", ".join(f"{n} {v}" for n, v in PACKAGES) if corpus == "extended" else "")
    return (f"# specdec {kind}\n\nLlama architecture, {cfg.num_params / 1e6:.1f}M parameters, trained by "
            f"`specdec train {kind}` on {source}"
            + (f", starting from the weights of `{init}` (tokens below are this run's)" if init else "")
            + ".\n\n"
            f"- tokens trained: {state['tokens']:,}\n- steps: {state['step']:,}\n"
            f"- wall time: {state['elapsed'] / 60:.1f} min\n- final train loss (EMA): {state['loss']:.3f}\n\n"
            f"Held-out files (SHA-256(relpath)[0] < {HELD_OUT_BYTE}, {len(held)} files):\n\n"
            + "\n".join(f"- {f}" for f in held) + "\n")


def run(args) -> int:
    if args.like is not None:
        _check_like(args)
    if args.what == "tokenizer":
        path = train_tokenizer(args.tokenizer)
        print(f"wrote {path}")
        return 0
    d = DEFAULTS[args.what]
    if args.device != "cpu" and args.what not in ("target", "draft"):
        raise ConfigError(f"--device {args.device}: only the target and draft train there; "
                          f"{args.what} trains on the CPU")
    tc = TrainConfig(tokens=args.tokens or d["tokens"], minutes=args.minutes or d["minutes"],
                     lr=args.lr or d["lr"], threads=args.threads, seed=args.seed, batch=args.batch,
                     device=args.device, bf16=args.bf16, stop_after=args.stop_after)
    out = args.out or Path("models") / {"distill": "draft-distill", "parallel": "draft-parallel"}.get(args.what, args.what)
    if args.mtp is not None and args.what != "eagle":
        raise ConfigError("--mtp goes with `specdec train eagle`")
    work = args.work or cache_dir() / f"train-{args.what}{'-like' if args.like else ''}"
    saved = (work / "state.pt").exists()
    if saved != args.resume:
        raise ConfigError(f"{work / 'state.pt'} exists: pass --resume to continue that run, or another --work"
                          if saved else f"--resume: no saved run in {work}")
    if args.like is not None:
        from .like_command import train_like
        state = train_like(args, tc, work, out)
        print(json.dumps({"out": str(out), **state}))
        return 0
    tok = Tokenizer.from_file(args.tokenizer, bos_id=0, eos_id=1)
    args.corpus = args.corpus or _default_corpus(args)
    if args.corpus == "sharegpt" and args.what not in ("eagle", "parallel"):
        raise ConfigError("--corpus sharegpt trains a feature head or a parallel draft (`specdec train eagle`, "
                          "`specdec train parallel`)")
    if args.what == "parallel":
        from .parallel_command import train_parallel
        state = train_parallel(args, tc, work, out, tok, model_card)
        print(json.dumps({"out": str(out), **state}))
        return 0
    if args.what == "eagle":
        from .eagle_command import train_head
        data = None
        if args.corpus != "sharegpt":
            data = tok, Batches(token_stream(tok, args.corpus), tc.batch, tc.seq_len, tc.seed)
        state = train_head(args, tc, work, out, data)
        print(json.dumps({"out": str(out), **state}))
        return 0
    stream = token_stream(tok, args.corpus)
    batches = Batches(stream, tc.batch, tc.seq_len, tc.seed)
    if args.what == "distill":
        from .distill import distill_loss, mixed_batches
        teacher = load_model(args.target, prepare=False)
        model = load_model(args.init or Path("models/draft"), prepare=False)
        model.train()
        batch_fn = mixed_batches(batches, teacher, tok, seed=tc.seed)
        loss_fn = distill_loss(teacher)
        cfg = model.config
    elif args.what == "unlikelihood":
        from .unlikelihood import mle_and_unlikelihood
        model = load_model(args.init or args.target, prepare=False, weights="float32")
        model.train()
        cfg = model.config
        batch_fn, loss_fn = batches.get, mle_and_unlikelihood(weight=args.ul_weight)
    else:
        torch.manual_seed(tc.seed)
        cfg = preset(args.what)
        model = LlamaModel(cfg)
        init_weights(model)
        if args.init:                                   # a warm start: same preset, its weights
            start = load_model(args.init, prepare=False, weights="float32")
            if start.config != cfg:
                raise ConfigError(f"--init {args.init}: its config is not the {args.what} preset's")
            model.load_state_dict(start.state_dict())
        batch_fn, loss_fn = batches.get, lm_loss
    state = train(model, tc, batch_fn, loss_fn, work, out, args.tokenizer,
                  card_fn=lambda s: model_card(args.what, cfg, s, args.corpus, args.init))
    print(json.dumps({"out": str(out), **state}))
    return 0


def _check_like(args) -> None:
    """`train draft --like TARGET --out DIR`, TARGET a checkpoint with a tokenizer; else ConfigError."""
    from .like import check_like_target
    if args.what != "draft":
        raise ConfigError("--like goes with `specdec train draft`")
    if args.out is None:
        raise ConfigError("--like: name the draft's folder with --out")
    if args.corpus not in (None, "sharegpt"):
        raise ConfigError(f"--like trains on ShareGPT chats through the target's template; --corpus {args.corpus} "
                          "is for the bundled models")
    check_like_target(args.like)


def _default_corpus(args) -> str:
    """extended; for eagle or parallel on a target with a chat template, sharegpt (its users' chats)."""
    if args.what not in ("eagle", "parallel"):
        return "extended"
    from ..models.loader import load_tokenizer
    from .eagle_command import check_target
    check_target(args.target)
    return "sharegpt" if load_tokenizer(args.target).chat_template else "extended"
