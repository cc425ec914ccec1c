"""`specdec train eagle --target DIR --out DIR [--mtp DIR]`: a feature head for a frozen target."""
from __future__ import annotations

import time

import torch

from ..errors import ConfigError
from ..models.feature_head import FeatureHead, HeadConfig
from ..models.head_loader import load_head, save_head, weights_sha256, write_mtp
from ..models.loader import load_model
from .eagle import DRAFT_VOCAB, TTT_STEPS, frequent_tokens, generations, head_batches, ttt_loss
from .trainer import train

N_PROMPTS = 64        # corpus prompts the target continues, greedy and sampled: 128 generations
PROMPT_TOKENS = 64    # each prompt's length
NEW_TOKENS = 224      # each continuation's: prompt + continuation = 288 tokens, a 256-window with room


def train_head(args, tc, tok, batches, work, out) -> dict:
    """Train (or resume) the head in `work`; export it to `out`, and with --mtp the MTP copy."""
    if not (args.target / "config.json").is_file():
        raise ConfigError(f"--target {args.target}: no checkpoint there")
    target = load_model(args.target)                        # frozen; compiled for its generations
    for p in target.parameters():
        p.requires_grad_(False)
    cfg = HeadConfig.for_target(target.config, min(DRAFT_VOCAB, target.config.vocab_size),
                                weights_sha256(args.target))
    torch.manual_seed(tc.seed)
    head = FeatureHead(cfg)
    _init(head, target)
    head.draft_vocab.copy_(frequent_tokens(batches.stream.numpy(), cfg.draft_vocab_size, cfg.vocab_size))
    if args.init is not None:                               # a warm start: a head of this shape, any target's
        with torch.no_grad():
            head.load_state_dict(load_head(args.init, target).state_dict())
    work.mkdir(parents=True, exist_ok=True)
    cached = work / "generations.pt"
    if cached.exists():
        samples = torch.load(cached)
    else:
        t0 = time.time()
        g = torch.Generator().manual_seed(tc.seed)
        starts = torch.randint(0, len(batches.stream) - PROMPT_TOKENS, (N_PROMPTS,), generator=g).tolist()
        prompts = [[tok.bos_id] + batches.stream[s:s + PROMPT_TOKENS - 1].tolist() for s in starts]
        torch.set_num_threads(tc.threads)
        samples = generations(target, prompts, NEW_TOKENS, tc.seed)
        torch.save(samples, cached)
        print(f"target generations: {samples.shape[0]} x {samples.shape[1]} tokens in {time.time() - t0:.0f} s")

    def export(card):
        save_head(head, out, card)
        if args.mtp is not None:
            write_mtp(head, args.target, args.mtp)

    return train(head, tc, head_batches(batches, samples, tc.seed), ttt_loss(target), work, out, args.tokenizer,
                 card_fn=lambda s: _card(cfg, s, args), export_fn=export)


def _init(head: FeatureHead, target) -> None:
    """The layer starts as a copy of the target's last layer (a feature-to-feature map of the right
    scale); eh_proj as [0 | I], so the untrained head passes the target's feature through."""
    last = target.model.layers[-1]
    with torch.no_grad():
        for name, p in head.named_parameters():
            src = dict(last.named_parameters()).get(name)
            if src is not None and src.shape == p.shape:
                p.copy_(src)
        d = head.config.hidden_size
        head.eh_proj.weight.zero_()
        head.eh_proj.weight[:, d:].copy_(torch.eye(d))
        head.shared_head.norm.weight.copy_(target.model.norm.weight)


def _card(cfg: HeadConfig, state: dict, args) -> str:
    start = f", starting from the head in `{args.init}`" if args.init else ""
    return (f"# specdec feature head (EAGLE)\n\nOne decoder layer (d={cfg.hidden_size}, SwiGLU "
            f"{cfg.intermediate_size}) in DeepSeek-V3's MTP layout, drafting from the final hidden states of "
            f"`{args.target}` (weights SHA-256 {cfg.target_sha256[:16]}...), scoring its "
            f"{cfg.draft_vocab_size} most frequent tokens (FR-Spec). Trained by `specdec train eagle` with a "
            f"{TTT_STEPS}-step training-time test on {args.corpus} corpus windows and the target's own greedy and "
            f"T = 1 generations{start}.\n\n- tokens trained: {state['tokens']:,}\n- steps: {state['step']:,}\n"
            f"- wall time: {state['elapsed'] / 60:.1f} min\n- final train loss (EMA): {state['loss']:.3f}\n")
