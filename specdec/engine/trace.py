"""One request's rounds recorded in full: the draft's q, the target's p, the uniforms, every
decision and the timing of the target's forward against a plain step.

The request runs through the real `Engine.step` (the real proposer, target forward and
verification); the recorder only listens. It wraps the engine's target and proposer for the
request's lifetime: the target wrapper keeps each verify forward's inputs and logits, times
it against a plain step (the pending token alone, at its position: a slot the verify
forward rewrites with the same values) and snapshots the request's generator before
verification draws from it; the proposer wrapper keeps the Draft (tokens and q). From these
it recomputes what verification used: p by the engine's own `BatchSampling.probs`, u by
replaying the generator from the snapshot (the same `torch.rand` call the engine makes).
A test replays every round through verify/ with these p, q and u and gets the emitted
tokens back, which is what makes the record the truth.

Batch 1 only, and slower than `generate` (two extra timed forwards per round, copies of p
and q): it is a tool, not a serving path.
"""
from __future__ import annotations

import statistics
import time

import torch

from ..config import SamplingParams
from ..errors import ConfigError
from ..verify.rejection import recovery_distribution
from .engine import Engine
from .origins import RoundLog
from .round import RoundResult

REPEATS = 3        # timed forwards of each kind per round; the median damps one-off hiccups
TOP = 5            # entries of a distribution kept in the record (the full p and q go to tensors)


def _timed(fn, device) -> tuple[float, object]:
    """Median seconds of REPEATS calls of fn() and its last result."""
    times, out = [], None
    for _ in range(REPEATS):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


class _Target:
    """The engine's target, recording each verify forward (delegates everything else)."""

    def __init__(self, model, engine: Engine, seq):
        self.model, self.engine, self.seq, self.last = model, engine, seq, None

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, tokens, positions, cache, argmax_out=None, **kw):
        dev = tokens.device
        t_plain, _ = _timed(lambda: self.model(tokens[:, :1], positions[:, :1], cache), dev)
        t_verify, logits = _timed(lambda: self.model(tokens, positions, cache, argmax_out=argmax_out, **kw), dev)
        s = self.engine.rows.sampling()
        chosen = [[len(self.seq.token_ids) + j for j in range(tokens.shape[1])]]
        drafts = tokens[:, 1:]                                                        # (1, k)
        p = s.probs(logits, positions=chosen, drafts=drafts)[0].float().cpu()         # (k+1, V)
        best = (argmax_out if argmax_out is not None else s.scores(logits, chosen, drafts).argmax(-1))
        g = self.seq.generator
        self.last = dict(p=p.clone(), argmax=best[0].tolist(), t_plain=t_plain, t_verify=t_verify,
                         state=g.get_state() if g is not None else None)
        return logits


class _Proposer:
    """The engine's proposer, keeping each Draft (delegates everything else)."""

    def __init__(self, inner):
        self.inner, self.last = inner, None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, batch, k):
        self.last = self.inner.propose(batch, k)
        return self.last


def _top(dist: torch.Tensor, n: int = TOP) -> list[list]:
    """dist (V,) -> [[token, probability], ...] of its n largest entries."""
    vals, idx = dist.topk(min(n, dist.shape[0]))
    return [[int(i), float(v)] for i, v in zip(idx, vals)]


def _round(result: RoundResult, fwd: dict, draft, index: int, kept: int) -> tuple[dict, dict]:
    """One round's record and its tensors (p (k+1, V), q (k, V) when the draft has one)."""
    greedy = fwd["state"] is None
    p = fwd["p"]
    kk = p.shape[0] - 1
    tokens = draft.tokens[0, :kk].tolist() if draft is not None and kk else []
    q = draft.probs[0, :kk].float().cpu().clone() if draft is not None and draft.probs is not None and kk else None
    n, a = result.num_draft[0], result.accepted[0]
    u = None
    if not greedy:
        g = torch.Generator()
        g.set_state(fwd["state"])
        u = torch.rand(kk + 1, generator=g)                     # what BatchSampling.uniforms drew
    drafts = []
    for j, x in enumerate(tokens[:n]):
        qx = 1.0 if q is None else float(q[j, x])
        px = float(p[j, x])
        accept = (x == fwd["argmax"][j]) if greedy else bool(u[j] * qx < px)
        drafts.append(dict(token=x, q=None if greedy and q is None else qx, p=px,
                           u=None if greedy else float(u[j]), accept=accept, reached=j <= a,
                           target_argmax=fwd["argmax"][j]))
    nxt = result.emitted[0][-1]
    if greedy:                                                  # the target's argmax at position a
        law, source = p[a], "argmax of p"
    elif n > a:                                                 # a rejection at position a
        one_hot = torch.zeros_like(p[a])
        one_hot[tokens[a]] = 1.0
        law = recovery_distribution(p[a:a + 1], (q[a:a + 1] if q is not None else one_hot[None]))[0]
        source = "norm(max(0, p - q))"
    else:
        law, source = p[a], "p"
    rec = dict(index=index, k=result.k, num_draft=n, accepted=a, drafts=drafts,
               next=dict(token=nxt, position=a, source=source, top=_top(law), prob=float(law[nxt]),
                         u=None if greedy else float(u[kk])),
               emitted=list(result.emitted[0]), kept=kept,
               time=dict(round_s=result.dt, positions=kk + 1, target_forward_s=fwd["t_verify"],
                         plain_forward_s=fwd["t_plain"], ratio=fwd["t_verify"] / fwd["t_plain"]))
    tensors = {f"round{index}.p": p}
    if q is not None:
        tensors[f"round{index}.q"] = q
    if u is not None:
        tensors[f"round{index}.u"] = u
    return rec, tensors


def trace_request(engine: Engine, prompt_ids: list[int], params: SamplingParams) -> tuple[dict, dict]:
    """Run one request to its end on `engine` (empty: nothing running or waiting), recording
    every round. -> (record: JSON-ready dict, tensors: name -> tensor for the full p, q, u)."""
    if engine.has_unfinished():
        raise ConfigError("trace needs an idle engine")
    if params.coupled:
        raise ConfigError("trace records standard rejection sampling, not the invariant coupling")
    seq = engine.add_request(prompt_ids, params)
    engine.step()                                           # admission: the prefill's first token
    target, proposer, listener = engine.target, engine.proposer, engine.on_round
    engine.target, engine.proposer = _Target(target, engine, seq), _Proposer(proposer)
    log, rounds, tensors = RoundLog(), [], {}

    def on_round(result: RoundResult) -> None:
        log(result)
        rec, ten = _round(result, engine.target.last, engine.proposer.last, len(rounds) + 1,
                          log.rounds[seq.id][-1].kept)
        rounds.append(rec)
        tensors.update(ten)
        engine.proposer.last = None

    engine.on_round = on_round
    try:
        while engine.has_unfinished():
            engine.step()
        engine.collect_finished()
    finally:
        engine.target, engine.proposer, engine.on_round = target, proposer, listener
    record = dict(prompt_ids=list(prompt_ids), output_ids=seq.output_ids, first_token=seq.output_ids[:1],
                  seed=None if params.greedy else seq.seed, temperature=params.temperature,
                  top_k=params.top_k, top_p=params.top_p, finish_reason=seq.finish_reason,
                  stats=seq.stats.as_dict(seq.num_output), rounds=rounds)
    return record, tensors
