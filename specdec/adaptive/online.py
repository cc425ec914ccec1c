"""The round table learned while decoding, from the rounds the engine runs anyway.

    online = OnlineRounds(cost_model)               # reads what earlier runs learned
    online.record(key, sampled, b, k, L, dt)        # from AdaptiveK.observe(RoundResult)
    online.prices(key, sampled, b, k_max)           # (k_max + 1,) seconds of a round at l_ref

A real round costs its forwards (the cost model, here the cold start's prior: costs/prior.py)
plus what they leave out: Python, sampling, verification, a proposer without a model. A round's
offset is its time, moved to the reference cache length along the forwards' slope in L, less a
baseline: plain decoding's forward, and for k >= 1 the Theil-Sen line through the drafting
rounds' forwards (one noisy, briefly timed forward must not price its k out). Per proposer key,
sampling mode and batch size b, each k >= 1 keeps its last WINDOW offsets, read at their lower
quartile (another process only ever adds time). Plain rounds (k = 0) do the same work whichever
proposer's policy chose them, so they are kept once for all keys, in the table of `plain` (the
engine's plain round: with the target's features where its proposer takes them): `auto`, whose
arms are keys of their own, learns its plain rounds' price once instead of once per arm. A
row is priced:

- k = 0 at its level, once CONFIRM_N of its rounds were recorded;
- k >= 1, once CONFIRM_N drafting rounds were recorded, on one line: its level the lower
  quartile of every drafting offset less c k; its slope over the baseline's, c, the median of
  the last WINDOW pairs once there are WINDOW of them (two rounds at two drafting k at most
  PAIR_GAP recorded rounds apart: they see one machine speed and cache length, which rounds at
  one k and another minutes later do not), else 0: the baseline's slope, an overhead fixed per
  round;
- a k not priced at b: the other rows' offsets, linear in b between them and held outside (as
  costs/rounds.py prices rows it has not measured); none at all: 0, the baseline alone.

A k with fewer than CONFIRM_N rounds at b is capped at their own level: they may lower its
price, never raise it. Until a row has rounds, every k costs its baseline, which every round
exceeds, and one level read as a fixed overhead prices the k above those played at the least
the evidence allows: optimism where the policy has not looked, at a bounded cost (at most
CONFIRM_N * k_max recorded drafting rounds at a k with fewer than CONFIRM_N per key, mode and
batch size, and CONFIRM_N plain ones per mode and batch size; docs/cold-start.md has the
reasons and the bound). What is learned
is saved (`online-<hash>.json` beside the measured tables, costs/cache.py, under the round
tables' identity) after 16, 32, 64, ... observations of a key and mode and every SAVE_EVERY
after 1024, and read back by the next run. A measured round table (`specdec profile`) takes
precedence: AdaptiveK asks this one only for keys and modes without one.
"""
from __future__ import annotations

import statistics
from collections import deque

import numpy as np

from ..costs import cache
from ..costs.cost_model import CostModel
from ..costs.key import CostKey
from ..costs.rounds import theil_sen

WINDOW = 16       # offsets kept per (b, k), and pair slopes per b: their lower quartile (median)
                  # ignores up to 12 (8) slow ones and follows a lasting change within 16; and the
                  # pairs needed before their slope replaces the baseline's: one pair (two single
                  # rounds) is as noisy as the slope is large (about 0.15 ms a draft on the bundled
                  # pair at batch 1), and 3 or 4 pairs held cold runs at k = 1 where k = 4 paid
QUANTILE = 0.25   # the quantile of a k's window its level is read at (the lower quartile: see above)
CONFIRM_N = 3     # rounds at a (b, k), or drafting rounds at b, before they price it; fewer may lower
                  # a price, never raise it: one slow round must not price a k out for good (a k
                  # priced too high is not run again; one slow k = 2 round held a cold run at k = 1)
PAIR_GAP = 2      # recorded rounds between the two of a pair, at most: the machine's speed and the
                  # cache length drift little over two rounds
SAVE_EVERY = 1024  # observations of a key and mode between saves once past the doubling schedule
ONLINE_VERSION = 3  # how online tables are stored; other versions are ignored (3: plain rounds in
                    # the plain key's table)


class _Table:
    """One key and mode: offsets per (b, k), pair slopes per b, and the priced rows."""

    def __init__(self, ident: dict):
        self.ident, self.n = ident, 0
        self.samples: dict[tuple[int, int], deque] = {}      # (b, k) -> recent offsets (s)
        self.slopes: dict[int, deque] = {}                     # b -> recent pair slopes (s per draft)
        self.last: dict[int, tuple[int, int, float]] = {}      # b -> (record no., k, offset) of the last
        self.priced: dict[int, tuple[np.ndarray, np.ndarray]] = {}   # b -> (offsets or NaN, caps or inf)
        self.dirty: set[int] = set()
        self.version = 0                                       # bumped by every record
        self.plain_seen = 0                                    # the plain table's version last priced


class OnlineRounds:
    """Round costs learned from observed rounds, on top of `cost`'s forwards; plain rounds of
    every key are kept under `plain` (see the module doc)."""

    def __init__(self, cost: CostModel, persist: bool = True, plain: CostKey = CostKey("none")):
        self.cost, self.persist, self.plain = cost, persist, plain
        self.tables: dict[tuple[CostKey, bool], _Table] = {}
        self._base: dict[tuple[CostKey, int], np.ndarray] = {}

    def table(self, key: CostKey, sampled: bool) -> _Table:
        """The table of `key` and mode, read from the cache on first use."""
        if (key, sampled) not in self.tables:
            t = self.tables[(key, sampled)] = _Table(self.cost.rounds_identity(key, sampled, ONLINE_VERSION))
            d = (cache.load(t.ident, "online-") if self.persist else None) or {}
            for b, k, offsets in d.get("samples", []):
                t.samples[(int(b), int(k))] = deque(map(float, offsets), maxlen=WINDOW)
                t.dirty.add(int(b))
            for b, slopes in d.get("slopes", []):
                t.slopes[int(b)] = deque(map(float, slopes), maxlen=WINDOW)
        return self.tables[(key, sampled)]

    def version(self, key: CostKey, sampled: bool) -> int:
        """A number that changes whenever the table of `key` and mode learns a round (its own
        or a plain one)."""
        return self.table(key, sampled).version + self.table(self.plain, sampled).version

    def base(self, key: CostKey, b: int) -> np.ndarray:
        """(cost.k_max + 1,) the baseline at l_ref: the forwards of a plain round, and for k >= 1
        the Theil-Sen line through the drafting rounds' forwards."""
        if (key, b) not in self._base:                      # the forwards never change: memoized
            forward = self.cost.curve(key, b, self.cost.k_max, None)[0]
            if len(forward) >= 3:
                a, c = theil_sen({k: float(t) for k, t in enumerate(forward) if k >= 1})
                forward = np.concatenate([forward[:1], a + c * np.arange(1, len(forward))])
            self._base[(key, b)] = forward
        return self._base[(key, b)]

    def prices(self, key: CostKey, sampled: bool, b: int, k_max: int) -> np.ndarray:
        """(k_max + 1,) seconds of a round drafting k = 0..k_max at b, at the reference length."""
        return self.base(key, b)[:k_max + 1] + self.offsets(key, sampled, b, k_max)

    def record(self, key: CostKey, sampled: bool, b: int, k: int, L: float, dt: float) -> None:
        """One real round of b rows drafting k (k = 0: plain, kept under `plain`) that took `dt`
        s at longest cache L."""
        k_max = self.cost.k_max
        if not 0 <= k <= k_max or b < 1:
            return
        slope = self.cost.curve(key, b, k_max, None)[1][k]
        r = dt - slope * (L - self.cost.target.l_ref) - self.base(key, b)[k]
        if k == 0:
            key = self.plain
        t = self.table(key, sampled)
        t.samples.setdefault((b, k), deque(maxlen=WINDOW)).append(r)
        t.n += 1
        if k >= 1:
            n0, k0, r0 = t.last.get(b, (-PAIR_GAP - 1, 0, 0.0))
            if k0 >= 1 and k0 != k and t.n - n0 <= PAIR_GAP:
                t.slopes.setdefault(b, deque(maxlen=WINDOW)).append((r - r0) / (k - k0))
            t.last[b] = (t.n, k, r)
        t.dirty.add(b)
        t.version += 1
        if self.persist and ((t.n >= 16 and t.n & (t.n - 1) == 0) or t.n % SAVE_EVERY == 0):
            self.save(key, sampled)

    def save(self, key: CostKey, sampled: bool) -> None:
        """Write the table of `key` and mode to the cache (its recent rounds, as recorded)."""
        t = self.table(key, sampled)
        cache.save(t.ident, {"samples": [[b, k, list(s)] for (b, k), s in sorted(t.samples.items())],
                             "slopes": [[b, list(s)] for b, s in sorted(t.slopes.items())]}, False, "online-")

    def observed(self, key: CostKey, sampled: bool, b: int) -> list[int]:
        """The k observed at batch size b (0: a plain round of any key)."""
        plain = [0] if (b, 0) in self.table(self.plain, sampled).samples else []
        return plain + sorted(k for bb, k in self.table(key, sampled).samples if bb == b and k)

    def offsets(self, key: CostKey, sampled: bool, b: int, k_max: int) -> np.ndarray:
        """(k_max + 1,) seconds a round drafting k = 0..k_max costs beyond the baseline at b."""
        t, plain = self.table(key, sampled), self.table(self.plain, sampled)
        if t.plain_seen != plain.version:                 # a plain round learnt: every row's k = 0
            t.dirty.update(bb for bb, _ in plain.samples)
            t.plain_seen = plain.version
        for r in t.dirty:
            t.priced[r] = self._row(t, plain, r)
        t.dirty.clear()
        rows = sorted(t.priced)
        out = np.zeros(k_max + 1)
        for k in range(min(k_max, self.cost.k_max) + 1):
            known = [(r, t.priced[r][0][k]) for r in rows if not np.isnan(t.priced[r][0][k])]
            if known:
                out[k] = np.interp(b, [r for r, _ in known], [v for _, v in known])
        if b in t.priced:
            out = np.minimum(out, t.priced[b][1][:k_max + 1])
        return out

    def _row(self, t: _Table, plain: _Table, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Row b's offsets at k = 0..k_max as its rounds (its plain ones from `plain`) price them
        (module doc; NaN where they price nothing), and the caps its unconfirmed k put on their
        own (inf: none)."""
        k_max = self.cost.k_max
        rounds = {k: list(s) for (bb, k), s in t.samples.items() if bb == b and s and k}
        if plain.samples.get((b, 0)):
            rounds[0] = list(plain.samples[(b, 0)])
        out, cap = np.full(k_max + 1, np.nan), np.full(k_max + 1, np.inf)
        for k, rs in rounds.items():
            if len(rs) < CONFIRM_N:
                cap[k] = _low(rs)
        if len(rounds.get(0, ())) >= CONFIRM_N:
            out[0] = _low(rounds[0])
        drafting = [(k, r) for k, rs in rounds.items() if k >= 1 for r in rs]
        if len(drafting) < CONFIRM_N:
            return out, cap
        slopes = t.slopes.get(b, ())
        c = statistics.median(slopes) if len(slopes) >= WINDOW else 0.0    # else the baseline's slope
        out[1:] = _low([r - c * k for k, r in drafting]) + c * np.arange(1, k_max + 1)
        return out, cap


def _low(xs: list[float]) -> float:
    """The QUANTILE (lower quartile) of xs."""
    return sorted(xs)[int(QUANTILE * (len(xs) - 1))]
