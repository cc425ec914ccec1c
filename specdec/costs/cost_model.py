"""The cost of one speculative round on this machine, measured up front and cached.

    cm = CostModel.load_or_measure(target, proposer_or_draft, k_max=8, batch_sizes=[1, 2, 4, 8])
    cm.measure_rounds(timer, key, [1, 2, 4, 8], sampled=True)      # timer: adaptive/calibrate.py
    cm.t_round(key, b, k, L, sampled)     # a real engine step drafting k (k = 0: plain decoding)
    cm.curve(key, b, k_max, sampled)      # t_round for k = 0..k_max as (base, slope in L)
    cm.t_target(b, q, L), cm.t_draft(key, b, L)       # one forward (profiling.py)
    cm.t_drafting(key, b, k, L)           # a round's drafting: k steps, or one forward of k + 1

Forwards (profiling.py) and real rounds (rounds.py, per proposer and sampling mode) are read
from the cache and timed only where it lacks them, and only when asked.
"""
from __future__ import annotations

import statistics
import sys

import numpy as np

from . import cache
from ..cpu_load import snapshot
from .key import CostKey
from .profiling import ModelProfile
from .rounds import RoundTable

DRAFT_KEY = CostKey("draft", "draft")   # a draft model's key under its default name
ROUNDS_VERSION = 4              # how rounds are timed (adaptive/calibrate.py); other caches are stale


class CostModel:
    def __init__(self, target: ModelProfile, drafts: dict | None = None, k_max: int = 8,
                 identities: dict | None = None):
        self.target, self.k_max, self.q_max = target, k_max, k_max + 1
        self.drafts = {CostKey.parse(k) if isinstance(k, str) else k: p for k, p in (drafts or {}).items()}
        self.identities = identities or {}        # None (the target) or a CostKey -> model identity
        self.rounds: dict[tuple[CostKey, bool], RoundTable] = {}
        self._curves: dict[tuple, tuple] = {}     # curve(): a closed batch's tail reads every size
        self.host: dict[CostKey, float] = {}      # CostKey -> host seconds per row and draft step beyond the
                                                  # forward (a cross-vocabulary draft's re-tokenization)
        self.one_forward: set[CostKey] = set()    # proposers that draft k tokens in one forward of k + 1
                                                  # positions (proposers/parallel.py), not k steps

    @classmethod
    def load_or_measure(cls, target, proposer_or_draft=None, k_max: int = 8, batch_sizes=(1,),
                        remeasure: bool = False, l_ref: int = 128, l_long: int = 512,
                        timing: dict | None = None, qs: list[int] | None = None,
                        announce: str | None = None) -> "CostModel":
        """Forwards of `target` (q = 1..k_max + 1, or only `qs`) and, at q = 1, of each model the
        proposer runs (a draft model, layer-skip, each arm of `auto`; a bare model is the draft)
        at `batch_sizes` and cache lengths l_ref, l_long: from the cache, timed where it lacks
        them (all with `remeasure`). `timing`: time_forwards' budget; `announce`: a line for
        stderr before anything is timed."""
        l_long = max(1, min(l_long, target.config.max_position_embeddings - k_max - 2))
        l_ref = max(1, min(l_ref, l_long // 4))
        models = {None: (target, None)}
        subs = getattr(proposer_or_draft, "arms", None) or [proposer_or_draft]
        one_forward = {sub.cost_key() for sub in subs if getattr(sub, "one_forward", False)}
        for sub in subs:
            if sub is not None and not hasattr(sub, "cost_key"):
                models[DRAFT_KEY] = (sub, None)
            elif getattr(sub, "model", None) is not None:
                models[sub.cost_key()] = (sub.model, getattr(sub, "num_layers", None))
        profiles, identities, by_hash = {}, {}, {}
        for key, (model, layers) in models.items():
            ident = identities[key] = cache.model_identity(model, layers)
            h = cache.identity_hash(ident)
            wide = key is None or key in one_forward      # timed at q = 1..k_max + 1, not a step's q = 1
            if h not in by_hash:                          # a draft shaped like the target shares its table
                d = None if remeasure else cache.load(ident)
                same = d is not None and (d["profile"]["l_ref"], d["profile"]["l_long"]) == (l_ref, l_long)
                p = ModelProfile.from_json(d["profile"], d["contended"]) if same else ModelProfile(l_ref, l_long)
                by_hash[h] = p
                since = snapshot()
                if announce and p.missing(list(batch_sizes), k_max + 1 if wide else 1, qs if wide else None):
                    print(announce, file=sys.stderr, flush=True)
                    announce = None
                if p.measure(model, list(batch_sizes), k_max + 1 if wide else 1, layers,
                             qs if wide else None, **(timing or {})):
                    p.contended = p.contended or cache.contended(since)
                    cache.save(ident, {"profile": p.to_json()}, p.contended)
            profiles[key] = by_hash[h]
        cm = cls(profiles.pop(None), profiles, k_max, identities)
        cm.one_forward = one_forward
        for sub in subs:
            if getattr(sub, "host_seconds_per_token", None) is not None:
                cm.host[sub.cost_key()] = sub.host_seconds_per_token
        return cm

    def measure_rounds(self, timer, key: CostKey, batch_sizes, sampled: bool, remeasure: bool = False, repeats=3, *,
                       ks: list[int] | None = None, on_row=None):
        """Real steps of proposer `key` in one sampling mode at each row of `batch_sizes` and
        k = 0..k_max (or 0 and `ks`: the rest is priced by the row's line, rounds.py), from the
        cache; a row that lacks any k is timed whole, `repeats` calls of
        `timer(key, b, ks, sampled) -> {k: (seconds, L)}`, each k at the medians (three: one
        window can be 20% off on a shared machine; docs/adaptive.md section 5). `on_row(i, n)`:
        called after each of the n rows timed."""
        ident = self.rounds_identity(key, sampled)
        d = None if remeasure else cache.load(ident, "rounds-")
        table = self.rounds[(key, sampled)] = RoundTable.from_json(d, d["contended"]) if d else RoundTable()
        ks = sorted({0, *ks}) if ks is not None else [*range(self.k_max + 1)]
        todo = [b for b in batch_sizes if any((b, k) not in table.points for k in ks)]
        if todo:                  # tens of seconds per batch size, once per machine: say so
            print(f"specdec: timing {getattr(key, 'method', key)} rounds ({'sampled' if sampled else 'greedy'}) at batch "
                  f"sizes {', '.join(map(str, todo))}, k = {', '.join(map(str, ks))}; cached in {cache.cache_dir() / 'costs'}",
                  file=sys.stderr, flush=True)
        for done, b in enumerate(todo, 1):
            since = snapshot()
            runs = [timer(key, b, ks, sampled) for _ in range(repeats)]
            table.points.update({(b, k): tuple(statistics.median(r[k][i] for r in runs) for i in (0, 1)) for k in ks})
            table.contended = table.contended or cache.contended(since)
            if on_row:
                on_row(done, len(todo))
        if todo:
            cache.save(ident, table.to_json(), table.contended, "rounds-")
        self._curves.clear()

    def rounds_identity(self, key: CostKey, sampled: bool, version: int | None = None) -> dict:
        """What a round table of proposer `key` in one sampling mode is cached under (`version`:
        how it was made; default ROUNDS_VERSION)."""
        return {"key": str(key), "sampled": sampled, "target": self.identities.get(None),
                "model": self.identities.get(key), "version": ROUNDS_VERSION if version is None else version}

    def load_rounds(self, key: CostKey, sampled: bool) -> bool:
        """Read the measured round table of `key` in one sampling mode from the cache, timing
        nothing (`specdec profile` measures it); whether there was one."""
        d = cache.load(self.rounds_identity(key, sampled), "rounds-")
        if d:
            self.rounds[(key, sampled)] = RoundTable.from_json(d, d["contended"])
            self._curves.clear()
        return bool(d)

    def t_target(self, b: float, q: float, L: float | None = None) -> float:
        return self.target.t(b, q, L)

    def t_draft(self, key: CostKey | str | None, b: float, L: float | None = None) -> float:
        """Seconds of one draft step of proposer `key` (its forward, plus its host work per row
        where it declares some); 0 for a proposer without a model."""
        key = CostKey.parse(key) if isinstance(key, str) else key
        prof = self.drafts.get(key)
        return (prof.t(b, 1, L) if prof is not None else 0.0) + b * self.host.get(key, 0.0)

    def t_drafting(self, key: CostKey | None, b: float, k: int, L: float | None = None) -> float:
        """Seconds of a round's drafting: k draft steps, or for a proposer that drafts in one
        forward (`one_forward`), that forward of k + 1 positions (the pending token and the
        accepted drafts it has not seen, then k - 1 masks: k + 1 on average)."""
        key = CostKey.parse(key) if isinstance(key, str) else key
        if key in self.one_forward and k > 0:
            prof = self.drafts.get(key)
            return (prof.t(b, k + 1, L) if prof is not None else 0.0) + b * self.host.get(key, 0.0)
        return k * self.t_draft(key, b, L)

    def forward_round(self, key: CostKey | None, b: float, k: int, L: float | None = None) -> float:
        """Forward-only seconds of a round: its drafting and one verify forward of k + 1."""
        return self.t_target(b, k + 1, L) + self.t_drafting(key, b, k, L)

    def t_round(self, key: CostKey | None, b: float, k: int, L: float | None = None, sampled=False) -> float:
        """Seconds of a real engine step drafting k: the round table of `sampled`'s mode, else
        (none measured, or sampled=None) the forwards alone."""
        L, table = self.target.l_ref if L is None else L, self.rounds.get((key, sampled))
        t = table.step(b, k, lambda bb, kk, LL: self.forward_round(key, bb, kk, LL), L) if table else None
        return self.forward_round(key, b, k, L) if t is None else t

    def curve(self, key: CostKey | None, b: int, k_max: int | None = None,
              sampled: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """t_round for k = 0..k_max as (base, slope): base[k] + slope[k] * (L - l_ref); memoized.
        `sampled` picks the round table (False: greedy, True: sampled); None: the forwards alone."""
        c = (key, b, range((self.k_max if k_max is None else k_max) + 1), sampled)
        if c not in self._curves:
            d = self.drafts.get(key)
            if d is None:                                                  # the host work does not grow with L
                drafting = [0.0 for k in c[2]]
            elif key in self.one_forward:
                drafting = [d.per_token(b, k + 1) if k else 0.0 for k in c[2]]
            else:
                drafting = [k * d.per_token(b, 1) for k in c[2]]
            self._curves[c] = (np.array([self.t_round(key, b, k, None, sampled) for k in c[2]]),
                               np.array([self.target.per_token(b, k + 1) + dk for k, dk in zip(c[2], drafting)]))
        return self._curves[c]
