"""Train a parallel draft (PARD's recipe, arXiv 2504.18583): a draft that, fed the context and
k - 1 mask tokens, predicts k tokens in one forward, distilled toward the target.

One training sequence carries its L real tokens and G mask groups. Group g is anchored at a
real position a_g: its K - 1 masks sit at positions a_g + 1 .. a_g + K - 1 and see the real
tokens up to a_g and the earlier masks of their group, nothing else (an attention mask and
explicit positions), so one forward trains L next-token positions and G (K - 1) mask
positions. Every prediction's teacher is the target's p at the position it stands for, given
the true prefix: real position t and mask j of a group at a_g predict the token after t and
after a_g + j, and one teacher forward of the real sequence gives every such p.
The loss is distill.py's: TV(p, q) + KL_WEIGHT KL(p || q), mean over the predictions.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models.llama import LlamaModel
from ..models.loader import save_checkpoint
from ..models.mask_token import write_mask
from .distill import KL_WEIGHT

MAX_K = 8            # the longest draft trained: 7 masks per group; `--k auto` caps k at 8 by default
GROUPS = 32          # mask groups per 256-token sequence: 224 mask positions, under the 256 real ones,
                     # so the draft's forward grows 1.9x while the teacher's (the larger cost) does not


class ParallelDraft(nn.Module):
    """A Llama draft and its learned mask embedding, trained together (what the trainer holds)."""

    def __init__(self, draft: LlamaModel, mask: torch.Tensor | None = None):
        super().__init__()
        self.draft = draft
        emb = draft.model.embed_tokens.weight
        # a start with no information in it: the mean token embedding, where none is given
        self.mask_embedding = nn.Parameter((emb.detach().mean(0) if mask is None else mask).clone().float())

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, is_mask: torch.Tensor,
                attn_mask: torch.Tensor) -> torch.Tensor:
        """tokens, positions, is_mask (B, T) (mask slots' tokens are unread), attn_mask (B, T, T)
        -> logits (B, T, V)."""
        x = self.draft.model.embed_tokens(tokens)                                     # (B, T, d)
        x = torch.where(is_mask[..., None], self.mask_embedding.to(x.dtype), x)
        return self.draft(tokens, positions, embeds=x, attn_mask=attn_mask)


def group_layout(L: int, anchors: torch.Tensor, K: int = MAX_K) -> dict[str, torch.Tensor]:
    """The augmented sequence for L real tokens and one mask group per anchor (G,), each
    anchor <= L - K: {"positions" (T,), "is_mask" (T,), "attn" (T, T) bool, "source" (T,): the
    real position whose teacher p the slot learns}, T = L + G (K - 1)."""
    G, M = len(anchors), K - 1
    j = torch.arange(1, K)                                                            # (M,)
    mpos = (anchors[:, None] + j).flatten()                                           # (G*M,)
    positions = torch.cat([torch.arange(L), mpos])                                    # (T,)
    is_mask = torch.cat([torch.zeros(L, dtype=torch.bool), torch.ones(G * M, dtype=torch.bool)])
    T = L + G * M
    attn = torch.zeros(T, T, dtype=torch.bool)
    attn[:L, :L] = torch.ones(L, L, dtype=torch.bool).tril()                          # real: causal
    ga = anchors.repeat_interleave(M)                                                 # (G*M,) each mask's anchor
    attn[L:, :L] = torch.arange(L)[None, :] <= ga[:, None]                            # the prefix to its anchor
    group = torch.arange(G).repeat_interleave(M)
    jj = j.repeat(G)
    attn[L:, L:] = (group[:, None] == group[None, :]) & (jj[None, :] <= jj[:, None])  # its group, causally
    source = torch.cat([torch.arange(L), mpos])              # mask j at a_g + j: the token after a_g + j
    return {"positions": positions, "is_mask": is_mask, "attn": attn, "source": source}


def draw_anchors(L: int, groups: int, K: int, g: torch.Generator) -> torch.Tensor:
    """`groups` distinct anchors in [0, L - K], sorted (fewer when the window is short)."""
    n = L - K + 1
    return torch.randperm(n, generator=g)[:min(groups, n)].sort().values


def parallel_loss(teacher: LlamaModel, groups: int = GROUPS, K: int = MAX_K, seed: int = 0):
    """loss_fn(model: ParallelDraft, x (B, L), y) for trainer.train: the teacher's p of the real
    windows, the draft's q at every real and mask slot, TV + KL_WEIGHT KL over all slots."""
    gen = torch.Generator().manual_seed(seed)

    def loss_fn(model, x, y):
        B, L = x.shape
        lay = group_layout(L, draw_anchors(L, groups, K, gen), K)
        dev = x.device
        with torch.no_grad():
            logp = F.log_softmax(teacher(x, torch.arange(L, device=dev).expand(B, L)).float(), -1)   # (B, L, V)
            logp = logp[:, lay["source"].to(dev)]                                      # (B, T, V)
        T = len(lay["positions"])
        tokens = torch.cat([x, x.new_zeros(B, T - L)], 1)                              # (B, T)
        logq = F.log_softmax(model(tokens, lay["positions"].to(dev).expand(B, T), lay["is_mask"].to(dev).expand(B, T),
                                   lay["attn"].to(dev).expand(B, T, T)).float(), -1)    # (B, T, V)
        p = logp.exp()
        tv = 0.5 * (p - logq.exp()).abs().sum(-1).mean()
        kl = (p * (logp - logq)).sum(-1).mean()
        return tv + KL_WEIGHT * kl
    return loss_fn


TOKENIZER_FILES = ("tokenizer_config.json", "generation_config.json")   # a draft's own special tokens


def exporter(model: ParallelDraft, tokenizer_json, out, max_k: int = MAX_K, like=None):
    """export_fn(card) for trainer.train: the draft as a checkpoint, then its mask token; with
    `like` (the folder the draft came from), that folder's TOKENIZER_FILES in place of the
    generic ones save_checkpoint writes (a chat model's special tokens are not `<s>`)."""
    import shutil
    from pathlib import Path

    def export(card):
        save_checkpoint(model.draft, tokenizer_json, out, card=card)
        write_mask(out, model.mask_embedding, max_k)
        for name in TOKENIZER_FILES if like is not None else ():
            if (Path(like) / name).exists():
                shutil.copyfile(Path(like) / name, Path(out) / name)
    return export


def parallel_model(init, teacher: LlamaModel) -> ParallelDraft:
    """The draft to train, from checkpoint `init`: a plain draft gets a new mask embedding, a
    parallel draft keeps its own. Its vocabulary must be the target's (`teacher`)."""
    from ..errors import ConfigError
    from ..models.loader import load_model
    from ..models.mask_token import read_mask
    draft = load_model(init, prepare=False, weights="float32")
    if draft.config.vocab_size != teacher.config.vocab_size:
        raise ConfigError(f"--init {init}: its vocabulary ({draft.config.vocab_size}) is not the target's "
                          f"({teacher.config.vocab_size}); a parallel draft drafts in the target's tokens")
    mask = read_mask(init, draft.config.hidden_size)
    model = ParallelDraft(draft, None if mask is None else mask.embedding)
    model.train()
    return model
