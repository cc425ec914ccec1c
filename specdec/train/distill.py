"""Distil the draft toward the target (DistillSpec-style).

The acceptance rate of speculative sampling at a position is 1 - TV(p, q), so the loss
is the total variation between the target's (p) and the draft's (q) next-token
distributions, plus a forward-KL term that keeps gradients informative where q puts
almost no mass. Contexts come from the corpus and from the target's own samples
(on-policy data: the contexts the draft meets at inference time).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..config import EngineConfig, SamplingParams, SpecConfig
from ..models.linear import choose_kernel

KL_WEIGHT = 0.5


def distill_loss(teacher):
    def loss_fn(model, x, y):
        pos = torch.arange(x.shape[1]).expand_as(x)
        with torch.no_grad():
            logp = F.log_softmax(teacher(x, pos), dim=-1)                    # (B, T, V)
        logq = F.log_softmax(model(x, pos), dim=-1)                          # (B, T, V)
        p = logp.exp()
        tv = 0.5 * (p - logq.exp()).abs().sum(-1).mean()
        kl = (p * (logp - logq)).sum(-1).mean()
        return tv + KL_WEIGHT * kl
    return loss_fn


def target_samples(teacher, prompts: list[list[int]], new_tokens: int, seed: int) -> list[list[int]]:
    """Sequences sampled from the teacher at temperature 1 (prompt + continuation)."""
    from ..engine.engine import Engine  # training tools sit above the engine
    teacher.prepare(choose_kernel())
    eng = Engine(teacher, SpecConfig(method="none", k=0),
                 EngineConfig(max_batch=8, max_model_len=max(len(p) for p in prompts) + new_tokens + 1))
    params = [SamplingParams(temperature=1.0, seed=seed + i, max_new_tokens=new_tokens, ignore_eos=True)
              for i in range(len(prompts))]
    return [s.token_ids for s in eng.generate(prompts, params)]


def mixed_batches(batches, teacher, tok, seed: int, n_samples: int = 32, new_tokens: int = 192):
    """Alternate corpus windows with windows of the teacher's own samples."""
    g = torch.Generator().manual_seed(seed)
    stream = batches.stream
    starts = torch.randint(0, len(stream) - 64, (n_samples,), generator=g).tolist()
    prompts = [[tok.bos_id] + stream[s:s + 64].tolist() for s in starts]
    samples = torch.tensor(target_samples(teacher, prompts, new_tokens, seed))  # (N, 65 + new)
    L = batches.seq_len

    def batch_fn(step: int):
        if step % 2 == 0:
            return batches.get(step)
        gg = torch.Generator().manual_seed(seed * 7919 + step)
        rows = torch.randint(0, samples.shape[0], (batches.batch,), generator=gg)
        w = samples[rows, : min(L, samples.shape[1] - 1) + 1]
        return w[:, :-1], w[:, 1:]
    return batch_fn
