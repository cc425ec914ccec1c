"""The cost of one speculative round on this machine, measured and cached.

    cm = CostModel.load_or_measure(target, proposer_or_draft, quick=True, k_max=8)
    cm.t_target(b, q, L)            # one target forward: b rows, q positions each, L cached
    cm.t_draft(key, b, L)           # per proposed token of proposer `key` (a CostKey); 0 if free
    cm.t_round(key, b, k, L, sampled)   # a real engine step drafting k (k = 0: plain)
    cm.curve(key, b, k_max, sampled)    # (base, slope): t_round for k = 0..k_max, linear in L
    cm.ensure(b) / cm.ensure_rounds(b, key, sampled)   # measure lazily what batch b needs
    CostModel.from_function(...)    # a synthetic model (tests, what-if analysis)

Forwards (profiling.py) are timed as the engine calls them, at batch rows {1, 2, 4, .., 64}
(lazily, the powers of two around b), q in 1..k_max+1 and two cache lengths, and cached
on disk keyed by what sets the cost (cache.py): architecture, layers used, dtype, kernel,
CPU model, torch version and threads, not the weights. `quick=True` measures b = 1 at
q in {1, k_max+1} only; `ensure(b)` measures the endpoints of the rows around a new b at
once, then one interior q per call. A table measured while the machine was busy is
re-measured on the first load on a quiet one.

Whole rounds (rounds.py): a timer handed in from above (adaptive/calibrate.py steps real
engines) measures each proposer's overhead beyond the forwards, per sampling mode, lazily
in the same way, cached beside the forwards.
"""
from __future__ import annotations

from pathlib import Path

import torch

from . import cache
from .cache import Source, cache_path, identity_hash, load_profile, model_identity
from .key import CostKey
from .profiling import GRID_B, ModelProfile, Point, bisect_order
from .rounds import RoundTable, load_table, plausible, round_ks, save_table

DRAFT_KEY = CostKey("draft", "draft")   # a draft model's key under its default name
ROUNDS_VERSION = 2              # how rounds are timed (adaptive/calibrate.py); older caches are stale

Mode = tuple[CostKey, bool]     # (proposer, sampled): one table of whole rounds each


def mode_name(mode: Mode) -> str:
    return f"{mode[0]}|{'sampled' if mode[1] else 'greedy'}"


class CostModel:
    def __init__(self, target: ModelProfile, drafts: dict[str, ModelProfile] | None = None,
                 k_max: int = 8, sources: list[Source] | None = None, timing: dict | None = None):
        self.target, self.drafts, self.k_max = target, {CostKey.parse(k) if isinstance(k, str) else k: p for k, p in (drafts or {}).items()}, k_max
        self.q_max = k_max + 1
        self.sources = sources or []
        self._timing = timing or {}
        self._complete: set[int] = set()
        self.rounds: dict[Mode, RoundTable] = {}
        self._round_timer = None
        self._remeasure = False
        self._rounds_done: set[tuple[str, int]] = set()
        self._curve_memo: dict[tuple, tuple] = {}
        self._version = 0                           # bumped by every measurement

    # ---- construction ------------------------------------------------------------------
    @classmethod
    def load_or_measure(cls, target, proposer_or_draft=None, device: str | None = None,
                        threads: int | None = None, quick: bool = True, k_max: int = 8,
                        batch_sizes: list[int] | None = None, remeasure: bool = False,
                        l_ref: int = 128, l_long: int = 512, timing: dict | None = None) -> "CostModel":
        """Load cached tables for `target` (and its draft) or measure them; see the module doc.
        `timing` passes min_time/min_reps/max_reps to the timer (tests use tiny values)."""
        q_max = k_max + 1
        room = target.config.max_position_embeddings - q_max - 1
        l_long = max(1, min(l_long, room))
        l_ref = max(1, min(l_ref, l_long // 4))
        old_threads = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            models = [(target, None, None)]
            # a proposer that chooses among others (auto) has each of its arms measured
            subs = getattr(proposer_or_draft, "arms", None) or [proposer_or_draft]
            for sub in subs:
                key, draft = None, sub
                if sub is not None and hasattr(sub, "cost_key"):
                    key, draft = sub.cost_key(), getattr(sub, "model", None)
                if draft is not None:
                    models.append((draft, getattr(sub, "num_layers", None), key or DRAFT_KEY))
            by_id: dict[str, Source] = {}      # a draft shaped like the target shares its table
            profiles = []
            for model, nl, k in models:
                ident = model_identity(model, nl, device, threads)
                h = identity_hash(ident)
                if h not in by_id:
                    prof, busy = (ModelProfile(l_ref, l_long), False) if remeasure else \
                        load_profile(ident, l_ref, l_long)
                    by_id[h] = Source(model, nl, ident, prof, is_target=k is None, contended=busy)
                profiles.append(by_id[h].profile)
            drafts = {k: p for (_m, _nl, k), p in zip(models, profiles) if k is not None}
            cm = cls(profiles[0], drafts, k_max, list(by_id.values()), timing)
            cm._remeasure = remeasure
            rows = sorted(set(batch_sizes)) if batch_sizes else list(GRID_B)
            if quick:
                cm._measure(cm._required([1]))
            else:
                cm._measure(cm._required(rows) + cm._optional(rows, everything=True))
            return cm
        finally:
            torch.set_num_threads(old_threads)

    @classmethod
    def from_function(cls, target_fn, draft_fns: dict | None = None, k_max: int = 8,
                      batch_sizes=GRID_B, l_ref: int = 128, l_long: int = 512) -> "CostModel":
        """A synthetic cost model: target_fn(b, q, L) and draft_fns[key](b, L) in seconds (key a
        CostKey or its string, "draft:draft"), sampled on the grid a measurement would use."""
        tp = ModelProfile(l_ref, l_long)
        drafts = {k: ModelProfile(l_ref, l_long) for k in (draft_fns or {})}
        for b in batch_sizes:
            for L in (l_ref, l_long):
                for q in range(1, k_max + 2):
                    tp.points[(L, b, q)] = float(target_fn(b, q, L))
                for k, fn in (draft_fns or {}).items():
                    drafts[k].points[(L, b, 1)] = float(fn(b, L))
        return cls(tp, drafts, k_max)

    # ---- queries -------------------------------------------------------------------------
    def t_target(self, b: float, q: float, L: float | None = None) -> float:
        return self.target.t(b, q, L)

    def t_draft(self, key: CostKey | None, b: float, L: float | None = None) -> float:
        prof = self.drafts.get(key)
        return prof.t(b, 1, L) if prof is not None and prof.points else 0.0

    def forward_round(self, key: CostKey | None, b: float, k: int, L: float | None = None) -> float:
        """Forward-only seconds of a round: one verify forward of k+1 positions, k draft steps."""
        return self.t_target(b, k + 1, L) + (k * self.t_draft(key, b, L) if key else 0.0)

    def t_round(self, key: CostKey | None, b: float, k: int, L: float | None = None,
                sampled: bool = False) -> float:
        """Seconds of one real engine step drafting k tokens (k = 0: a plain decoding step):
        the measured rounds (rounds.py) where there are any, else the forwards alone."""
        f = self.forward_round(key, b, k, L)
        table = self.rounds.get((key, sampled))
        fwd = lambda bb, kk, LL: self.forward_round(key, bb, kk, LL)                 # noqa: E731
        t = table.step(b, k, fwd, self.target.l_ref if L is None else L) if table is not None else None
        return f if t is None else max(t, 0.5 * f)

    def overhead(self, key: CostKey | None, b: float, k: int, sampled: bool = False) -> float:
        """What a real round costs beyond the forwards: t_round - forward_round."""
        return self.t_round(key, b, k, None, sampled) - self.forward_round(key, b, k)

    def curve(self, key: CostKey | None, b: int, k_max: int | None = None,
              sampled: bool = False) -> tuple[list[float], list[float]]:
        """A round's modelled seconds for k = 0..k_max as (base, slope): k drafts from proposer
        `key` then one verify forward cost base[k] + slope[k] * (L - l_ref) at cache length L
        (t_round(key, b, k, L, sampled) for every k in one call). Memoized until something new
        is measured: a closed batch's tail visits every batch size below its own, and each
        curve costs a few milliseconds to build."""
        memo_key = (key, b, k_max, sampled)
        state = self._state()
        if self._curve_memo.get(memo_key, (None,))[0] == state:
            return self._curve_memo[memo_key][1]
        out = self._curve(key, b, k_max, sampled)
        self._curve_memo[memo_key] = (state, out)
        return out

    def _state(self) -> tuple:
        """Changes whenever a point is measured or added (memo validity)."""
        sizes = [len(self.target.points)] + [len(d.points) for d in self.drafts.values()]
        return (self._version, *sizes, *(len(r.points) for r in self.rounds.values()))

    def _curve(self, key, b, k_max, sampled):
        p, d = self.target, self.drafts.get(key) if key else None
        dl = p.l_long - p.l_ref
        td = d.t(b, 1) if d is not None and d.points else 0.0
        ts = (d.t(b, 1, p.l_long) - td) / dl if d is not None and d.points and dl else 0.0
        n = (self.k_max if k_max is None else k_max) + 1
        base = [self.t_round(key, b, k, None, sampled) for k in range(n)]
        slope = [b * p.sigma(k + 1) + k * ts for k in range(n)]
        return base, slope

    # ---- lazy measurement -------------------------------------------------------------------
    @staticmethod
    def bracket(b: int) -> list[int]:
        """The power-of-two batch rows on either side of b (one row if b is a power of two)."""
        lo = 1 << (max(1, int(b)).bit_length() - 1)
        return [lo] if lo == b else [lo, lo * 2]

    def ensure(self, b: int) -> bool:
        """Measure what predicting batch `b` still lacks: every required point of its bracketing
        rows at once, then one interior q per call. Returns whether anything was measured."""
        if not self.sources or b in self._complete:
            return False
        rows = self.bracket(b)
        todo = self._required(rows) or self._optional(rows)[:1]
        if not todo:
            self._complete.add(b)
            return False
        self._measure(todo)
        return True

    # ---- whole rounds (rounds.py) ---------------------------------------------------------
    def attach_round_timer(self, timer) -> None:
        """`timer(key, b, ks, sampled) -> {k: (seconds, L)}` times real engine steps drafting
        k tokens with proposer `key` at batch b (adaptive/calibrate.py builds one)."""
        self._round_timer = timer

    def ensure_rounds(self, b: int, key: CostKey | None, sampled: bool = False, everything: bool = False) -> bool:
        """Like `ensure`, for real rounds: k in {0, 1, k_max} at the rows around b at once, then
        one interior k per call, timed next to k = 0 and scaled by the row's k = 0 step over
        the one timed with it, so that a row's points agree although they were timed minutes
        apart. With `everything`, every k a row lacks in one timing, whose passes interleave
        the k: the same spell of a shared machine then lands on all of them. Cached on disk
        per proposer and sampling mode. Returns whether anything was measured."""
        if self._round_timer is None or not self.sources or not key or self.k_max < 1:
            return False                    # nothing to time with, or a synthetic cost model
        mode = (key, sampled)
        if (mode, b) in self._rounds_done:
            return False
        table = self._round_table(mode)
        req, opt = round_ks(self.k_max)
        rows = self.bracket(b)
        todo = {r: [k for k in req if (r, k) not in table.points] for r in rows}
        anchored = False
        if everything:
            todo = {r: [k for k in req + opt if (r, k) not in table.points] for r in rows}
        elif not any(todo.values()):
            todo = {r: [k for k in opt if (r, k) not in table.points][:1] for r in rows}
            anchored = True
        if not any(todo.values()):
            self._rounds_done.add((mode, b))
            return False
        for r, ks in todo.items():
            if not ks:
                continue
            if anchored and (r, 0) in table.points:
                got = self._time_rounds(key, r, [0] + ks, sampled)
                scale = table.points[(r, 0)][0] / got.pop(0)[0]
                got = {k: (t * scale, L) for k, (t, L) in got.items()}
            else:
                got = self._time_rounds(key, r, ks, sampled)
            table.points.update({(r, k): tl for k, tl in got.items()})
        self._version += 1
        save_table(table, self._rounds_path(mode), self._rounds_identity(mode), cache.contended())
        return True

    def _time_rounds(self, key: CostKey, b: int, ks: list[int], sampled: bool, tries: int = 3) -> dict:
        """Real steps at (b, k) for each k in ks; timed again (up to `tries` times) while they are
        implausible, i.e. a burst of other work on the machine hit some k."""
        for _ in range(tries):
            got = self._round_timer(key, b, ks, sampled)
            if plausible(got):
                break
        return got

    @property
    def version(self) -> int:
        """Bumped by every measurement (forwards or rounds): compared around a timed window, it
        tells whether the engine measured anything inside it."""
        return self._version

    @property
    def times_rounds(self) -> bool:
        """Whether a round timer is attached (see attach_round_timer)."""
        return self._round_timer is not None

    def _rounds_identity(self, mode: Mode) -> dict:
        return {"mode": mode_name(mode), "k_max": self.k_max, "models": [s.identity for s in self.sources],
                "timing": ROUNDS_VERSION}

    def _rounds_path(self, mode: Mode) -> Path:
        return cache_path({}).with_name(f"rounds-{identity_hash(self._rounds_identity(mode))}.json")

    def _round_table(self, mode: Mode) -> RoundTable:
        if mode not in self.rounds:
            self.rounds[mode] = RoundTable() if self._remeasure else \
                load_table(self._rounds_path(mode), self._rounds_identity(mode), cache.contended())
        return self.rounds[mode]

    def _required(self, rows: list[int]) -> list[tuple[Source, Point]]:
        out = []
        for s in self.sources:
            p, qs = s.profile, ((1, self.q_max) if s.is_target else (1,))
            out += [(s, (L, b, q)) for b in rows for L in (p.l_ref, p.l_long) for q in qs]
        return [(s, pt) for s, pt in out if pt not in s.profile.points]

    def _optional(self, rows: list[int], everything: bool = False) -> list[tuple[Source, Point]]:
        out = []
        for s in self.sources:
            if not s.is_target:
                continue
            p = s.profile
            for b in rows:
                out += [(s, (p.l_ref, b, q)) for q in bisect_order(self.q_max)]
                if everything:
                    out += [(s, (p.l_long, b, q)) for q in (1, (1 + self.q_max) // 2, self.q_max)]
        return [(s, pt) for s, pt in out if pt not in s.profile.points]

    def _measure(self, todo: list[tuple[Source, Point]]) -> None:
        self._version += 1
        for s in {id(s): s for s, _ in todo}.values():
            s.profile.measure([pt for ss, pt in todo if ss is s], s.model, s.num_layers, **self._timing)
            s.save()
