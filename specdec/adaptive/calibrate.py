"""Time real engine rounds, for the cost model's per-round overhead (costs/rounds.py).

    timer = round_timer(target, spec, draft)
    timer(CostKey("draft", "draft"), b=4, ks=[0, 1, 8], sampled=False)   # {k: (median seconds, cache length)}

Each k runs a scratch Engine of b rows with a fixed k and the proposer named by the cost
key's method, on synthetic prompts: a random 16-token
segment repeated, so that draft-free proposers (n-gram, suffix) find matches and draft
their full k, as they would on real text. The step time hardly depends on how many drafts
are accepted (a rollback is a truncate), so any prompt will do for the draft model.

What the policy needs most is the ratio of a drafting step to a plain one: at large batches
k = 1 pays or loses on a few percent of it. So every drafting k is timed beside k = 0, in
groups of GROUP (few engines, short passes, many of them), and its time is k = 0's times the
median over passes of t_k / t_0 within the pass: a slow spell that spans a pass cancels.
Timing every k in one loop instead makes passes long and samples few, and the ratio then
wanders by several percent (benchmarks/results/adaptive/NOTES.md).
"""
from __future__ import annotations

import statistics
import time

import torch

from ..config import EngineConfig, SamplingParams, SpecConfig
from ..engine.engine import Engine

PERIOD = 16           # tokens in the repeated segment of a synthetic prompt
GROUP = 2             # drafting k timed at once, beside k = 0


def middle_mean(xs: list[float]) -> float:
    """The mean of the middle half of xs (the interquartile mean)."""
    xs = sorted(xs)
    q = len(xs) // 4
    return statistics.mean(xs[q:len(xs) - q])


def paired(plain: list[float], drafting: list[float]) -> float:
    """A drafting k's step time from passes that also stepped k = 0: the middle mean of
    k = 0's times, scaled by the median of the per-pass ratios."""
    return middle_mean(plain) * statistics.median(d / p for p, d in zip(plain, drafting))


def synthetic_prompts(vocab: int, b: int, length: int, seed: int = 0) -> list[list[int]]:
    """b prompts of `length` tokens, each a random PERIOD-token segment repeated."""
    g = torch.Generator().manual_seed(seed)
    segs = torch.randint(3, vocab, (b, PERIOD), generator=g)                     # (b, PERIOD)
    reps = -(-length // PERIOD)
    return segs.repeat(1, reps)[:, :length].tolist()


def round_timer(target, spec: SpecConfig, draft=None, prompt_len: int = 96, warmup: int = 2,
                steps: int = 8, budget_s: float = 2.0, max_steps: int = 32):
    """A timer for `CostModel.attach_round_timer`: real engine steps at (b, k), in seconds.

    The drafting k are timed in groups of GROUP beside k = 0, one scratch engine per k,
    stepped in turn (each pass starting one k later), so that a slow spell of a shared
    machine lands on every k alike rather than on whichever k it hit. k = 0's time is the
    mean of its middle half of steps (robust to the odd slow one), a drafting k's is k = 0's
    times its median per-pass ratio (`paired`), and each group is scaled to the first one's
    k = 0. At least `steps` passes; more, up to `max_steps`, while the passes after warm-up
    have taken less than `budget_s`: small batches, whose steps are cheap and whose relative
    noise is largest, get more samples for the same time."""
    def timer(key, b: int, ks: list[int], sampled: bool) -> dict[int, tuple[float, float]]:
        drafting = [k for k in ks if k > 0]
        groups = [drafting[i:i + GROUP] for i in range(0, len(drafting), GROUP)] or [[]]
        out: dict[int, tuple[float, float]] = {}
        for g in groups:
            got = time_group(key, b, [0] + g, sampled)
            scale = out[0][0] / got[0][0] if out else 1.0         # to the first group's k = 0
            out.setdefault(0, got[0])
            out.update({k: (t * scale, L) for k, (t, L) in got.items() if k > 0})
        return {k: out[k] for k in ks}

    def time_group(key, b: int, ks: list[int], sampled: bool) -> dict[int, tuple[float, float]]:
        """ks = [0, ...]: one scratch engine per k, stepped in turn; see `paired`."""
        method = key.method
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
        return {k: (middle_mean(times[0]) if k == 0 else paired(times[0], times[k]),
                    statistics.mean(lens[k])) for k in ks}
    return timer
