"""Time real engine rounds, for the cost model's per-round overhead (costs/rounds.py).

    timer = round_timer(target, spec, draft)
    timer("draft:draft", b=4, ks=[0, 1, 8], sampled=False)   # {k: (median seconds, cache length)}

Each k runs a scratch Engine of b rows with a fixed k and the proposer named by the cost
key's prefix ("draft:draft" -> method "draft"), on synthetic prompts: a random 16-token
segment repeated, so that draft-free proposers (n-gram, suffix) find matches and draft
their full k, as they would on real text. The step time hardly depends on how many drafts
are accepted (a rollback is a truncate), so any prompt will do for the draft model.
"""
from __future__ import annotations

import statistics
import time

import torch

from ..config import EngineConfig, SamplingParams, SpecConfig

PERIOD = 16           # tokens in the repeated segment of a synthetic prompt


def middle_mean(xs: list[float]) -> float:
    """The mean of the middle half of xs (the interquartile mean)."""
    xs = sorted(xs)
    q = len(xs) // 4
    return statistics.mean(xs[q:len(xs) - q])


def synthetic_prompts(vocab: int, b: int, length: int, seed: int = 0) -> list[list[int]]:
    """b prompts of `length` tokens, each a random PERIOD-token segment repeated."""
    g = torch.Generator().manual_seed(seed)
    segs = torch.randint(3, vocab, (b, PERIOD), generator=g)                     # (b, PERIOD)
    reps = -(-length // PERIOD)
    return segs.repeat(1, reps)[:, :length].tolist()


def round_timer(target, spec: SpecConfig, draft=None, prompt_len: int = 96, warmup: int = 2,
                steps: int = 8, budget_s: float = 2.0, max_steps: int = 32):
    """A timer for `CostModel.attach_round_timer`: real engine steps at (b, k), in seconds.

    One scratch engine per k, stepped in turn (each pass starting one k later), so that a
    slow spell of a shared machine lands on every k alike rather than on whichever k it
    hit. Each k's time is the mean of its middle half of steps (robust to the odd slow one).
    At least `steps` passes; more, up to `max_steps`, while the passes after warm-up have
    taken less than `budget_s`: small batches, whose steps are cheap and whose relative
    noise is largest, get more samples for the same time."""
    def timer(key: str, b: int, ks: list[int], sampled: bool) -> dict[int, tuple[float, float]]:
        from .engine import Engine                     # engine.py -> policy -> adaptive -> here
        method = key.split(":")[0]
        # fit the longest draft's tokens into the model's context, shortening the prompt first
        ctx = target.config.max_position_embeddings - 1
        room = (ctx - PERIOD) // (max(ks) + 1) - warmup - 1
        n_steps = max(1, min(steps, room))
        n_max = max(n_steps, min(max_steps, room))
        plen = max(PERIOD, min(prompt_len, ctx - (warmup + n_max + 1) * (max(ks) + 1)))
        engines = {}
        for k in ks:
            cfg = SpecConfig(method=method if k else "none", k=k, k_max=max(k, 1), options=spec.options)
            new = (warmup + n_max + 1) * (k + 1)
            eng = Engine(target, cfg, EngineConfig(max_batch=b, max_model_len=plen + new + 1,
                                                   device=target.device.type), draft=draft)
            for i, p in enumerate(synthetic_prompts(target.config.vocab_size, b, plen)):
                eng.add_request(p, SamplingParams(temperature=1.0 if sampled else 0.0, seed=i,
                                                  max_new_tokens=new, ignore_eos=True))
            eng.step()                                          # admission (prefill) only
            engines[k] = eng
        times: dict[int, list[float]] = {k: [] for k in ks}
        lens: dict[int, list[int]] = {k: [] for k in ks}
        order = list(engines)
        t_start = None
        for i in range(warmup + n_max):
            if i == warmup:
                t_start = time.perf_counter()
            elif i >= warmup + n_steps and time.perf_counter() - t_start > budget_s:
                break
            for k in order[i % len(order):] + order[:i % len(order)]:
                eng = engines[k]
                L = max(eng.cache.lengths[:len(eng.running)], default=plen)
                t0 = time.perf_counter()
                eng.step()
                if i >= warmup:
                    times[k].append(time.perf_counter() - t0)
                    lens[k].append(L)
        return {k: (middle_mean(times[k]), statistics.mean(lens[k])) for k in ks}
    return timer
