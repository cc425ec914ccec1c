"""Feature heads for the tiny test targets, built by hand (no training)."""
from __future__ import annotations

import torch

from specdec.models.feature_head import FeatureHead, HeadConfig


def passthrough_head(target, noise: float = 0.0, seed: int = 0, draft_vocab: list[int] | None = None) -> FeatureHead:
    """A head whose layer is the identity and whose input is the token's own embedding: it
    scores token j+1 from lm_head(norm(embed(token j))), the loopy target's bigram guess
    (tests/proposers/conftest.py), so drafts are often but not always accepted. `noise`
    perturbs every weight; `draft_vocab` restricts the tokens it scores (FR-Spec)."""
    cfg = HeadConfig.for_target(target.config, len(draft_vocab) if draft_vocab else None)
    head = FeatureHead(cfg)
    d = cfg.hidden_size
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * noise + (1.0 if p.dim() == 1 else 0.0))
        head.eh_proj.weight[:, :d] += torch.eye(d)
        head.self_attn.o_proj.weight.mul_(0.1)
        head.mlp.down_proj.weight.mul_(0.1)
        if draft_vocab:
            head.draft_vocab.copy_(torch.tensor(draft_vocab))
    return head.eval()


def random_head(target, seed: int = 0, std: float = 0.3, draft_vocab: list[int] | None = None) -> FeatureHead:
    """A head with random weights: q is some distribution, p another (the law tests)."""
    cfg = HeadConfig.for_target(target.config, len(draft_vocab) if draft_vocab else None)
    head = FeatureHead(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std + (1.0 if p.dim() == 1 else 0.0))
        if draft_vocab:
            head.draft_vocab.copy_(torch.tensor(draft_vocab))
    return head.eval()
