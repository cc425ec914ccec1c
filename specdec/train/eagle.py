"""Train a feature head on a frozen target (`specdec train eagle`).

Data: windows of the corpus and of the target's own generations (greedy and sampled at T = 1),
the contexts a head meets when drafting. Labels: the target's next-token distribution p at each
position (soft labels; acceptance is 1 - TV(p, q), which a good forward KL pulls up).

Training-time test (EAGLE-3): the head is unrolled for TTT_STEPS draft steps. Step 1 reads the
target's features; step s reads its own step-(s-1) outputs, shifted one position, exactly as
drafting does past the verified tokens. Step s's query at position j attends to step-1 keys at
positions <= j-s+1 (the verified context) and to step r's key at j-s+r for r = 2..s (its own
earlier drafts), so every position trains as the anchor of its own s-step draft at once.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..models.feature_head import FeatureHead
from ..models.llama import rotate_half

TTT_STEPS = 3        # draft steps unrolled in training: a head drafts k ~ 3-5 tokens, and each extra
                     # step costs one more head forward and backward per token
STEP_DECAY = 0.8     # step s's loss weighs STEP_DECAY^(s-1): later drafts matter only if earlier ones pass
SAMPLE_EVERY = 3     # every SAMPLE_EVERY-th batch is the target's own generations, the rest corpus text
DRAFT_VOCAB = 4096   # FR-Spec: tokens the head scores; the stdlib's 4096 most frequent cover ~98% of
                     # held-out code tokens (an 8192-row lm_head would be 55% of the head's bytes)


def frequent_tokens(stream: np.ndarray, n: int, vocab_size: int) -> torch.Tensor:
    """(n,) the token ids most frequent in `stream`, most frequent first (ties: lower id first)."""
    counts = torch.from_numpy(np.bincount(stream.astype(np.int64), minlength=vocab_size)[:vocab_size])
    order = sorted(range(vocab_size), key=lambda t: (-int(counts[t]), t))
    return torch.tensor(order[:n], dtype=torch.long)


def ttt_mask(n: int, s: int) -> torch.Tensor:
    """(n, s*n) bool, True where step s's query i may attend: step-1 keys at i' <= i-s+1, and step
    r's key at i-(s-r) for r = 2..s."""
    i = torch.arange(n)
    blocks = [i[None, :] <= (i[:, None] - (s - 1))]
    blocks += [i[None, :] == (i[:, None] - (s - r)) for r in range(2, s + 1)]
    return torch.cat(blocks, dim=1)


def _attend(head: FeatureHead, x, cos, sin, ks: list, vs: list, s: int):
    """One step's self-attention over the keys of steps 1..s (ks, vs grow by this step's)."""
    a = head.self_attn
    B, n, _ = x.shape
    q = a.q_proj(x).view(B, n, a.h, a.hd).transpose(1, 2)                              # (B, H, n, D)
    k = a.k_proj(x).view(B, n, a.hkv, a.hd).transpose(1, 2)                            # (B, Hkv, n, D)
    v = a.v_proj(x).view(B, n, a.hkv, a.hd).transpose(1, 2)
    ks.append(k * cos + rotate_half(k) * sin)
    vs.append(v)
    q = q * cos + rotate_half(q) * sin
    out = F.scaled_dot_product_attention(q, torch.cat(ks, 2), torch.cat(vs, 2), attn_mask=ttt_mask(n, s),
                                         enable_gqa=a.hkv != a.h)                     # (B, H, n, D)
    return a.o_proj(out.transpose(1, 2).reshape(B, n, a.h * a.hd))


def unroll(head: FeatureHead, target, w: torch.Tensor, steps: int = TTT_STEPS):
    """The training-time test over windows w (B, T) -> (p (B, T, N): the target's next-token
    probabilities on the head's draft vocabulary, [logits (B, T, N) of draft steps 1..steps]).
    Entry j reads token j and the feature of j-1 (zeros for j = 0, as a prompt's first entry
    when drafting); step s's entry j is drafted s-1 steps past its anchor j-s+1."""
    B, T = w.shape
    with torch.no_grad():
        hid = torch.empty(B, T, target.config.hidden_size)
        logits = target.eager(w, torch.arange(T).expand(B, T), None, hidden_out=hid)   # (B, T, V)
        p = torch.softmax(logits.float(), -1)[..., head.draft_vocab]                   # (B, T, N) p's mass on N
        emb = target.model.embed_tokens(w)                                             # (B, T, d)
        rows = target.lm_head.weight[head.draft_vocab]                                 # (N, d)
        cos, sin = target.rope(torch.arange(T)[None])                                  # (1, 1, T, D)
        zero = hid.new_zeros(B, 1, hid.shape[-1])
    feat, ks, vs, out_logits = torch.cat([zero, hid[:, :-1]], 1), [], [], []          # features of j-1
    for s in range(1, steps + 1):
        x = head.embed_features(emb, feat)                                             # (B, T, d)
        x = x + _attend(head, head.input_layernorm(x), cos, sin, ks, vs, s)
        x = x + head.mlp(head.post_attention_layernorm(x))
        out = head.shared_head.norm(x)                                                 # (B, T, d)
        out_logits.append(out @ rows.T)                                                # (B, T, N)
        feat = torch.cat([zero, out[:, :-1]], 1)                                       # own features, shifted
    return p, out_logits


def ttt_loss(target, steps: int = TTT_STEPS):
    """loss_fn(head, windows (B, T), _) for the trainer: the decayed mean over `steps` draft steps
    of the soft cross-entropy -sum_v p(v) log q(v) over the head's draft vocabulary, at the
    positions with a full s-step context."""
    def loss_fn(head: FeatureHead, w: torch.Tensor, _unused=None) -> torch.Tensor:
        p, logits = unroll(head, target, w, steps)
        loss = 0.0
        for s, lg in enumerate(logits, start=1):
            ce = -(p * torch.log_softmax(lg, -1)).sum(-1)[:, s - 1:]                   # (B, T - s + 1)
            loss = loss + STEP_DECAY ** (s - 1) * ce.mean()
        return loss / sum(STEP_DECAY ** i for i in range(steps))
    return loss_fn


def generations(target, prompts: list[list[int]], new_tokens: int, seed: int) -> torch.Tensor:
    """(2N, len) the target's continuations of `prompts` (equal lengths), greedy and at T = 1."""
    from ..config import EngineConfig, SamplingParams, SpecConfig
    from ..engine.engine import Engine        # training tools sit above the engine
    eng = Engine(target, SpecConfig(method="none", k=0),
                 EngineConfig(max_batch=8, max_model_len=len(prompts[0]) + new_tokens + 1))
    params = [SamplingParams(temperature=0.0, max_new_tokens=new_tokens, ignore_eos=True)] * len(prompts)
    params += [SamplingParams(temperature=1.0, seed=seed + i, max_new_tokens=new_tokens, ignore_eos=True)
               for i in range(len(prompts))]
    return torch.tensor([s.token_ids for s in eng.generate(prompts + prompts, params)])


def head_batches(batches, samples: torch.Tensor, seed: int):
    """batch_fn(step) -> (windows (B, T), None): corpus windows, and every SAMPLE_EVERY-th step
    windows of the target's generations."""
    T = batches.seq_len

    def batch_fn(step: int):
        if step % SAMPLE_EVERY:
            return batches.get(step)[0], None
        g = torch.Generator().manual_seed(seed * 7919 + step)
        rows = torch.randint(0, samples.shape[0], (batches.batch,), generator=g)
        start = torch.randint(0, max(1, samples.shape[1] - T + 1), (1,), generator=g).item()
        return samples[rows, start:start + T], None
    return batch_fn
