"""Time real engine rounds, for the cost model's round table (costs/rounds.py).

    timer = round_timer(target, spec, draft)
    timer(CostKey("draft", "draft"), b=4, ks=[0, 1, 8], sampled=False)   # {k: (seconds, cache length)}

Each k runs a scratch Engine of b rows with a fixed k and the cost key's proposer, on prompts
repeating a random (k + 1)-token segment, so that n-gram and suffix draft in full. Each
drafting k is timed in alternation with k = 0, and priced at k = 0's time times the median
over passes of t_k / t_0 within a pass: a slow spell of a shared machine that spans a pass
cancels. Every pair is scaled to the first pair's k = 0.
"""
from __future__ import annotations

import statistics
import time

import torch

from ..config import EngineConfig, SamplingParams, SpecConfig
from ..engine.engine import Engine


def middle_mean(xs: list[float]) -> float:
    """The mean of the middle half of xs (the interquartile mean)."""
    xs, q = sorted(xs), len(xs) // 4
    return statistics.mean(xs[q:len(xs) - q])


def paired(plain: list[float], drafting: list[float]) -> float:
    """A drafting k's step time from passes that also stepped k = 0: the middle mean of
    k = 0's times, scaled by the median of the per-pass ratios."""
    return middle_mean(plain) * statistics.median(d / p for p, d in zip(plain, drafting))


def synthetic_prompts(vocab: int, b: int, length: int, period: int, seed: int = 0) -> list[list[int]]:
    """b prompts of `length` tokens, each a random `period`-token segment repeated."""
    segs = torch.randint(3, vocab, (b, period), generator=torch.Generator().manual_seed(seed))
    return segs.repeat(1, -(-length // period))[:, :length].tolist()


def round_timer(target, spec: SpecConfig, draft=None, prompt_len: int = 96, warmup: int = 2,
                steps: int = 8, budget_s: float = 2.0, max_steps: int = 32, head=None):
    """A timer for `CostModel.measure_rounds`: real engine steps at (b, k), in seconds. Per
    pair, `warmup` untimed passes, then at least `steps` passes and more, up to `max_steps`,
    while they have taken less than `budget_s`: small batches, whose steps are cheap and whose
    relative noise is largest, get more samples for the same time."""
    def timer(key, b: int, ks: list[int], sampled: bool) -> dict[int, tuple[float, float]]:
        out: dict[int, tuple[float, float]] = {}
        for k in [k for k in ks if k > 0] or [0]:
            got = time_pair(key, b, sorted({0, k}), sampled)
            scale = out[0][0] / got[0][0] if out else 1.0           # to the first pair's k = 0
            out.setdefault(0, got[0])
            out[k] = (got[k][0] * scale, got[k][1]) if k else got[0]
        return {k: out[k] for k in ks}

    def time_pair(key, b: int, ks: list[int], sampled: bool) -> dict[int, tuple[float, float]]:
        """ks = [0] or [0, k]: one scratch engine each, stepped in turn; see `paired`."""
        q, ctx = max(ks) + 1, target.config.max_position_embeddings - 1     # q: the prompts' period
        room = (ctx - q) // q - warmup - 1                # rounds that fit after the shortest prompt
        n_steps = max(1, min(steps, room))
        n_max = max(n_steps, min(max_steps, room))
        plen = max(q, min(prompt_len, ctx - (warmup + n_max + 1) * q))
        engines = {}
        for k in ks:
            cfg = SpecConfig(method=key.method if k else "none", k=k, k_max=max(k, 1), options=spec.options)
            new = (warmup + n_max + 1) * (k + 1)
            eng = engines[k] = Engine(target, cfg, EngineConfig(max_batch=b, max_model_len=plen + new + 1,
                                                                device=target.device.type), draft=draft,
                                      head=head)
            for i, p in enumerate(synthetic_prompts(target.config.vocab_size, b, plen, q)):
                eng.add_request(p, SamplingParams(temperature=1.0 if sampled else 0.0, seed=i,
                                                  max_new_tokens=new, ignore_eos=True))
            eng.step()                                    # admission (prefill) only
        times: dict[int, list[float]] = {k: [] for k in ks}
        lens: dict[int, list[int]] = {k: [] for k in ks}
        t_start = time.perf_counter()
        for i in range(warmup + n_max):
            if i == warmup:
                t_start = time.perf_counter()
            elif i >= warmup + n_steps and time.perf_counter() - t_start > budget_s:
                break
            for k in (ks if i % 2 else ks[::-1]):         # each engine first in every other pass
                L = max(engines[k].cache.lengths[:len(engines[k].running)], default=plen)
                t0 = time.perf_counter()
                engines[k].step()
                if i >= warmup:
                    times[k].append(time.perf_counter() - t0)
                    lens[k].append(L)
        return {k: (middle_mean(times[0]) if k == 0 else paired(times[0], times[k]),
                    statistics.mean(lens[k])) for k in ks}
    return timer
