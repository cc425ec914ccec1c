"""`specdec train eagle --target DIR_OR_GGUF --out DIR [--mtp DIR]`: a feature head for a frozen target.

Two kinds of data (train/eagle.py trains on either the same way):
- `--corpus stdlib|extended` (a target without a chat template, the bundled one): code windows
  of the corpus and the target's continuations of corpus prompts;
- `--corpus sharegpt` (the default for a target with a chat template): ShareGPT first turns
  rendered through that template, the target's own replies to them, and the conversations' own
  replies as text (train/chat_data.py).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from ..models.feature_head import FeatureHead, HeadConfig
from ..models.head_loader import load_head, save_head, weights_bytes, weights_sha256, write_mtp
from ..models.loader import load_model
from . import chat_data
from .data import Batches
from .eagle import DRAFT_VOCAB, TTT_STEPS, frequent_tokens, generations, head_batches, ttt_loss
from .trainer import train

N_PROMPTS = 64        # corpus prompts the target continues, greedy and sampled: 128 generations
PROMPT_TOKENS = 64    # each prompt's length
NEW_TOKENS = 224      # each continuation's: prompt + continuation = 288 tokens, a 256-window with room
N_CHAT_PROMPTS = 320  # chat first turns the target answers, greedy and sampled: 640 replies
CHAT_DRAFT_VOCAB = 8192  # chat is wider than code: of SmolLM2's own replies, its 4096 most frequent
                         # tokens cover 85%, 8192 91%, 16384 95%; each row is read every draft step
TEXT_EVERY = 3        # chat data: every TEXT_EVERY-th batch is ShareGPT's replies, the rest the target's


def check_target(path: Path) -> None:
    """A checkpoint folder or a GGUF file; ConfigError otherwise."""
    if not ((path.is_dir() and (path / "config.json").is_file()) or (path.is_file() and path.suffix == ".gguf")):
        raise ConfigError(f"--target {path}: no checkpoint there (a folder with config.json, or a .gguf file)")


def train_head(args, tc, work: Path, out: Path, corpus_data=None) -> dict:
    """Train (or resume) the head in `work`; export it to `out`, and with --mtp the MTP copy.
    `corpus_data`: (tokenizer, Batches) of a code corpus; None for --corpus sharegpt."""
    check_target(args.target)
    if args.mtp is not None and not args.target.is_dir():
        raise ConfigError("--mtp writes into a copy of a checkpoint folder; --target is a file")
    target = load_model(args.target)                        # frozen; compiled for its generations
    for p in target.parameters():
        p.requires_grad_(False)
    torch.set_num_threads(tc.threads)
    work.mkdir(parents=True, exist_ok=True)
    if corpus_data is None:
        batch_fn, vocab_stream, n_vocab, what = _chat_data(args, tc, target, work)
    else:
        batch_fn, vocab_stream, n_vocab = _corpus_data(tc, target, work, *corpus_data)
        what = f"{args.corpus} corpus windows and the target's own greedy and T = 1 generations"
    cfg = HeadConfig.for_target(target.config, min(n_vocab, target.config.vocab_size),
                                weights_sha256(args.target), weights_bytes(args.target))
    torch.manual_seed(tc.seed)
    head = FeatureHead(cfg)
    _init(head, target)
    head.draft_vocab.copy_(frequent_tokens(vocab_stream, cfg.draft_vocab_size, cfg.vocab_size))
    if args.init is not None:                               # a warm start: a head of this shape, any target's
        with torch.no_grad():
            head.load_state_dict(load_head(args.init, target).state_dict())

    def export(card):
        save_head(head, out, card)
        if args.mtp is not None:
            write_mtp(head, args.target, args.mtp)

    return train(head, tc, batch_fn, ttt_loss(target), work, out, args.tokenizer,
                 card_fn=lambda s: _card(cfg, s, args, what), export_fn=export)


def _corpus_data(tc, target, work: Path, tok, batches):
    """The code corpus's windows and the target's continuations of corpus prompts."""
    cached = work / "generations.pt"
    if cached.exists():
        samples = torch.load(cached)
    else:
        t0 = time.time()
        g = torch.Generator().manual_seed(tc.seed)
        starts = torch.randint(0, len(batches.stream) - PROMPT_TOKENS, (N_PROMPTS,), generator=g).tolist()
        prompts = [[tok.bos_id] + batches.stream[s:s + PROMPT_TOKENS - 1].tolist() for s in starts]
        samples = generations(target, prompts, NEW_TOKENS, tc.seed)
        torch.save(samples, cached)
        print(f"target generations: {samples.shape[0]} x {samples.shape[1]} tokens in {time.time() - t0:.0f} s")
    return head_batches(batches, samples, tc.seed), batches.stream.numpy(), DRAFT_VOCAB


def _chat_data(args, tc, target, work: Path):
    """ShareGPT's training split through the target's chat template: windows of the target's
    own replies and, every TEXT_EVERY-th step, of the conversations' replies."""
    data, what = chat_streams(args.target, tc.seed, target, work, args.chat_prompts)
    gen, text = data["gen"].numpy(), data["text"].numpy()
    batch_fn = chat_data.chat_batches(Batches(gen, tc.batch, tc.seq_len, tc.seed),
                                      Batches(text, tc.batch, tc.seq_len, tc.seed + 1), TEXT_EVERY)
    return batch_fn, np.concatenate([gen, gen, text]), CHAT_DRAFT_VOCAB, what   # the target's replies weigh double


def chat_streams(target_path: Path, seed: int, target, work: Path, n_prompts: int | None = None,
                 refusal: str = "--corpus sharegpt renders chats with the target's chat template; {} has none "
                                "(--corpus extended trains on code)") -> tuple[dict, str]:
    """({"gen": the target's prompts and replies, "text": the conversations' replies as text, both
    (tokens,) int64 tensors, "prompts", "new_tokens"}, a sentence saying what they are), built once
    and cached in `work/chat-data.pt` (train/chat_data.py), the target answering `n_prompts`
    (default N_CHAT_PROMPTS) first turns; a cache with fewer is extended by the target's replies to the next ones (the prompts'
    order is seeded: the cached ones are the first of the longer list); `refusal`: the error for a
    target without a chat template ({} is the target)."""
    n_prompts = N_CHAT_PROMPTS if n_prompts is None else n_prompts
    if n_prompts < 1:
        raise ConfigError(f"--chat-prompts must be at least 1; got {n_prompts}")
    from ..models.chat_template import ChatTemplate
    from ..models.loader import load_tokenizer
    tok = load_tokenizer(target_path)
    if not tok.chat_template:
        raise ConfigError(refusal.format(target_path))
    template = ChatTemplate(tok)
    cached = work / "chat-data.pt"
    data = torch.load(cached) if cached.exists() else None
    if data is None or data.get("asked", data["prompts"]) < n_prompts:   # "asked": the split may hold fewer
        t0 = time.time()
        exchanges = chat_data.training_exchanges()
        done = 0 if data is None else data["prompts"]
        prompts = chat_data.chat_prompts(template, exchanges, n_prompts, seed)[done:]
        text = chat_data.reply_stream(template, exchanges, seed=seed) if data is None else data["text"].numpy()
        print(f"{len(exchanges)} training conversations; {len(prompts)} prompts" + (
              f" beyond the {done} cached" if done else "") + f", {len(text):,} tokens of replies as text "
              f"({time.time() - t0:.0f} s); the target answers each greedy and at T = 1", flush=True)
        seqs = [] if not prompts else chat_data.chat_generations(
            target, prompts, seed + done,
            on_done=lambda i, n: print(f"  {i}/{n} replies, {time.time() - t0:.0f} s", flush=True))
        gen = torch.from_numpy(chat_data.sequence_stream(seqs))
        new_tokens = sum(len(s) for s in seqs) - 2 * sum(map(len, prompts))
        data = {"gen": gen if data is None else torch.cat([data["gen"], gen]), "text": torch.from_numpy(text),
                "prompts": done + len(prompts), "asked": n_prompts,
                "new_tokens": new_tokens + (0 if data is None else data["new_tokens"])}
        torch.save(data, cached)
        print(f"target replies: {data['new_tokens']:,} new tokens; stream {len(data['gen']):,} tokens, "
              f"{time.time() - t0:.0f} s", flush=True)
    what = (f"ShareGPT V3 conversations of the training split (first user turn through the target's chat "
            f"template): the target's own replies to {data['prompts']} of them, greedy and at T = 1 "
            f"({data['new_tokens']:,} tokens), and {chat_data.N_REPLIES} of the conversations' own first "
            f"replies as text ({len(data['text']):,} tokens)")
    return data, what


def _init(head: FeatureHead, target) -> None:
    """The layer starts as a copy of the target's last layer (a feature-to-feature map of the right
    scale) with its residual branches' output projections at zero, eh_proj as [0 | I] and unit
    norms: the untrained head passes the target's (already normed) feature through, so its first
    guess is the target's distribution one position back. (A copied layer acting on a unit-scale
    input, or the target's norm weights applied a second time, can swamp that: on SmolLM2 they
    gave a loss of 16 that 50 steps barely moved.)"""
    last = target.model.layers[-1]
    with torch.no_grad():
        for name, p in head.named_parameters():
            src = dict(last.named_parameters()).get(name)
            if src is not None and src.shape == p.shape:
                p.copy_(src)
        d = head.config.hidden_size
        head.eh_proj.weight.zero_()
        head.eh_proj.weight[:, d:].copy_(torch.eye(d))
        head.self_attn.o_proj.weight.zero_()
        head.mlp.down_proj.weight.zero_()


def _card(cfg: HeadConfig, state: dict, args, what: str) -> str:
    start = f", starting from the head in `{args.init}`" if args.init else ""
    return (f"# specdec feature head (EAGLE)\n\nOne decoder layer (d={cfg.hidden_size}, SwiGLU "
            f"{cfg.intermediate_size}) in DeepSeek-V3's MTP layout, drafting from the final hidden states of "
            f"`{args.target.name}` (weights SHA-256 {cfg.target_sha256[:16]}...), scoring its "
            f"{cfg.draft_vocab_size} most frequent tokens (FR-Spec). Trained by `specdec train eagle` with a "
            f"{TTT_STEPS}-step training-time test on {what}{start}.\n\n- tokens trained: {state['tokens']:,}\n"
            f"- steps: {state['step']:,}\n- wall time: {state['elapsed'] / 60:.1f} min\n"
            f"- final train loss (EMA): {state['loss']:.3f}\n")
