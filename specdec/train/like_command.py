"""`specdec train draft --like TARGET --out DIR`: a small draft for any chat target, distilled toward it.

Data: what `specdec train eagle` trains a chat target's head on (train/chat_data.py): ShareGPT
V3's training split rendered through the target's chat template (held-out conversation ids
left out: they are the chat benchmark's prompts), and the target's own replies to 320 first
turns, greedy and at T = 1 (cached in the work folder; the same file as eagle's for the same
seed). Two losses, alternating step by step:
- windows of the conversations' text: the target's next-token distribution as soft labels
  (train/distill.py: total variation, which is one minus the acceptance, plus forward KL);
- windows of the target's own replies: their tokens as hard labels (sequence-level distillation:
  a greedy reply's next token is the target's argmax, a sampled one a draw from p), which needs
  no teacher forward, so a step costs about a third of a soft one.
Shape and start: train/like.py. The card records the measured step-cost ratio.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..costs.profiling import time_forwards
from ..errors import ConfigError
from ..models.llama import LlamaModel
from ..models.loader import load_model, load_tokenizer
from .data import Batches
from .distill import distill_loss
from .eagle_command import chat_streams
from .like import COST_BOUND, check_like_target, export_like, init_from_target, like_config
from .trainer import init_weights, lm_loss, train

TEXT_EVERY = 2        # every TEXT_EVERY-th batch is the conversations' text (soft labels), the rest
                      # the target's replies (hard labels): 70k reply tokens would repeat too often alone
L_CACHED = 256        # cached tokens when timing a decode step: a chat prompt and part of a reply


def train_like(args, tc, work: Path, out: Path) -> dict:
    """Build (or resume) the draft for `args.like` in `work`, train it and export it to `out`."""
    target_path = Path(args.like)
    check_like_target(target_path)
    tok = load_tokenizer(target_path)
    if not tok.chat_template:
        raise ConfigError(f"--like {target_path}: it has no chat template; `train draft --like` trains on chats "
                          "rendered with it (`specdec train distill` distils a draft on code)")
    target = load_model(target_path)                    # frozen; compiled for its generations
    for p in target.parameters():
        p.requires_grad_(False)
    torch.set_num_threads(tc.threads)
    work.mkdir(parents=True, exist_ok=True)
    data, what = chat_streams(target_path, tc.seed, target, work, args.chat_prompts)
    cfg = like_config(target.config, args.hidden, args.layers)
    torch.manual_seed(tc.seed)
    draft = LlamaModel(cfg)
    init_weights(draft)
    init_from_target(draft, target)
    if args.init is not None:                           # a warm start: a draft of this shape
        start = load_model(args.init, prepare=False, weights="float32")
        if start.config != cfg:
            raise ConfigError(f"--init {args.init}: its shape is not the draft's ({cfg.hidden_size} wide, "
                              f"{cfg.num_hidden_layers} layers)")
        draft.load_state_dict(start.state_dict())
    cost = step_costs(target, draft, target_path, work / "shape-probe")
    print(f"draft {cfg.num_params / 1e6:.1f}M parameters: a step {cost['draft_ms']:.3f} ms against the "
          f"target's {cost['target_ms']:.2f} ms ({cost['ratio']:.3f}; bound {COST_BOUND})", flush=True)
    gen = Batches(data["gen"].numpy(), tc.batch, tc.seq_len, tc.seed)
    text = Batches(data["text"].numpy(), tc.batch, tc.seq_len, tc.seed + 1)

    def batch_fn(step: int):
        return (text.get(step)[0], None) if step % TEXT_EVERY == 0 else gen.get(step)

    soft = distill_loss(target)

    def loss_fn(model, x, y):
        return soft(model, x, None) if y is None else lm_loss(model, x, y)

    return train(draft, tc, batch_fn, loss_fn, work, out, out / "tokenizer.json",
                 card_fn=lambda s: _card(cfg, s, target_path, what, cost, args.init),
                 export_fn=lambda card: export_like(draft, target_path, out, card))


@torch.no_grad()
def step_costs(target: LlamaModel, draft: LlamaModel, target_path: Path, probe: Path) -> dict:
    """A decode step's milliseconds (batch 1, L_CACHED cached) of the target and of the draft as
    `--draft` loads it (written to `probe`, loaded with the fastest kernels), float32."""
    loaded = load_model(export_like(draft, target_path, probe, None), exact=False)
    t = time_forwards(target, 1, L_CACHED, [1], min_time=0.3)[1] * 1e3
    d = time_forwards(loaded, 1, L_CACHED, [1], min_time=0.3)[1] * 1e3
    return {"target_ms": t, "draft_ms": d, "ratio": d / t}


def _card(cfg, state: dict, target_path: Path, what: str, cost: dict, init) -> str:
    start = f", warm-started from `{init}`" if init else ""
    return (f"# specdec draft for {target_path.name}\n\nLlama architecture (LlamaForCausalLM), "
            f"{cfg.num_params / 1e6:.1f}M parameters: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
            f"SwiGLU {cfg.intermediate_size}, {cfg.num_attention_heads} heads ({cfg.num_key_value_heads} key/value), "
            f"the target's tokenizer and its {cfg.vocab_size:,}-token vocabulary, tied embeddings started from the "
            f"target's projected on their first {cfg.hidden_size} principal directions{start}. Trained by "
            f"`specdec train draft --like` on {what}: soft labels (the target's distribution) on the text, "
            f"hard labels on the target's replies.\n\n"
            f"- tokens trained: {state['tokens']:,}\n- steps: {state['step']:,}\n"
            f"- wall time: {state['elapsed'] / 60:.1f} min\n- final train loss (EMA): {state['loss']:.3f}\n"
            f"- step cost, measured when training began (float32, batch 1, {L_CACHED} tokens cached): "
            f"{cost['draft_ms']:.3f} ms against the target's {cost['target_ms']:.2f} ms, "
            f"ratio {cost['ratio']:.3f} (bound {COST_BOUND})\n")
