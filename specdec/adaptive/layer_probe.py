"""Layer-skip's depth from one forward: how often each depth's early exit agrees with the
target, priced by three forward timings, without decoding with any depth.

    L = probed_layers(target)          # well under a second on the bundled target, then cached

The target samples PROBE_ROWS texts of TEXT_LEN tokens after BOS (temperature 1, as layers.py's
calibration prompts). One uncached forward over them keeps the hidden state after every
candidate depth L', and the target's final norm and LM head read it: a(L') is the share of
positions (from SKIP on) whose argmax at depth L' is the full depth's. That is the acceptance
of a greedy draft position given that the drafts before it were accepted (the draft at depth
L' reads the same tokens). A draft step costs t_d(L') = t_1 + (L' - 1) / (n - 1) * (t_n - t_1),
linear in depth between the timed depths 1 and n at q = 1, and a verify t_v = the target's
forward of K_PROBE + 1 positions. The depth is

    argmax_L' (1 - a^(K+1)) / (1 - a) / (t_v + K * t_d(L')),        K = K_PROBE,

tokens per second of a round drafting K at per-position acceptance a: the quantity layers.py
measures by decoding at the same K. Remembered in memory and in the cache directory (keyed as
layers.py's calibration, by weights, machine and threads); the calibration's choice, where
`specdec profile` made one, takes precedence (build.resolve_spec).
"""
from __future__ import annotations

import json
import sys
import weakref

import torch

from ..costs.profiling import time_forwards
from .layers import _calibration_file, self_prompts

K_PROBE = 4          # drafts per round the depths are compared at: layers.py's calibration's k
PROBE_ROWS = 2       # texts the agreement is counted on (as the calibration's self-prompts)
TEXT_LEN = 32        # tokens per text
SKIP = 4             # positions not counted at each text's start, where a shallow guess is a
                     # guess at the topic (the calibration decodes after 24-token prompts)
MAX_CANDIDATES = 8   # depths read at most, spread evenly over 1..n-1: the LM head is read once
                     # per candidate (a 30-layer, 49k-vocabulary model: ~0.1 s each on 2 cores)
TIMING = {"min_time": 0.02, "min_reps": 3, "max_reps": 9}   # the cost prior's (costs/prior.py)

_PROBED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # target -> probed L'


def candidates(n: int) -> list[int]:
    """The depths 1..n-1, or MAX_CANDIDATES of them spread evenly (1 and n-1 included)."""
    if n - 1 <= MAX_CANDIDATES:
        return list(range(1, n))
    return sorted({round(1 + i * (n - 2) / (MAX_CANDIDATES - 1)) for i in range(MAX_CANDIDATES)})


@torch.inference_mode()
def agreement(target, texts: list[list[int]], depths: list[int], skip: int = SKIP) -> dict[int, float]:
    """depth -> share of positions skip.. whose argmax at that depth is the full depth's."""
    ids = torch.tensor(texts, device=target.device)                                  # (B, T)
    B, T = ids.shape
    pos = torch.arange(T, device=target.device)[None].expand(B, T)
    x, (cos, sin) = target.model.embed_tokens(ids), target.rope(pos)                # (B, T, d)
    guesses = {}
    n = len(target.model.layers)
    for i, layer in enumerate(target.model.layers):
        x = layer(x, cos, sin, i, None, pos, None)
        if i + 1 in depths or i + 1 == n:
            guesses[i + 1] = target.lm_head(target.model.norm(x[:, skip:])).argmax(-1)   # (B, T - skip)
    return {d: (guesses[d] == guesses[n]).float().mean().item() for d in depths}


def rate(a: float, t_verify: float, t_draft: float, k: int = K_PROBE) -> float:
    """Expected tokens per second of a round drafting k at per-position acceptance a."""
    tokens = k + 1 if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)
    return tokens / (t_verify + k * t_draft)


def probe(target) -> dict:
    """{"layers": the chosen L', "agreement": {L': a}, "t_draft": {L': s}, "t_verify": s}."""
    n = target.config.num_hidden_layers
    depths = candidates(n)
    a = agreement(target, self_prompts(target, n=PROBE_ROWS, length=TEXT_LEN), depths)
    full = time_forwards(target, 1, 128, [1, K_PROBE + 1], **TIMING)
    t1 = time_forwards(target, 1, 128, [1], num_layers=1, **TIMING)[1]
    t_draft = {d: t1 + (d - 1) / (n - 1) * (full[1] - t1) for d in depths}
    best = max(depths, key=lambda d: rate(a[d], full[K_PROBE + 1], t_draft[d]))
    return {"layers": best, "agreement": a, "t_draft": t_draft, "t_verify": full[K_PROBE + 1]}


def depth_agreement(target, layers: int) -> float | None:
    """a(L') at depth `layers` as measured on this machine's cache, without measuring: the
    calibration's (layers.py: acceptance at K_PROBE drafts per round, as a per-position a with
    a + a^2 + ... + a^K = K * rate), else the probe's; None where neither measured that depth."""
    try:
        rows = json.loads(_calibration_file(target, K_PROBE).read_text())["measured"]
        rate = next(r["acceptance_rate"] for r in rows if r["layers"] == layers)
        lo, hi = 0.0, 1.0
        for _ in range(40):                              # bisection: the mean chain length rises in a
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if sum(mid ** i for i in range(1, K_PROBE + 1)) < K_PROBE * rate else (lo, mid)
        return (lo + hi) / 2
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        pass
    try:
        return float(json.loads(_calibration_file(target, K_PROBE, "probe-").read_text())["agreement"][str(layers)])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def probed_layers(target) -> int:
    """L' for `target` by `probe`, once per target and machine (then from the cache)."""
    if target not in _PROBED:
        n = target.config.num_hidden_layers
        if n == 2:
            _PROBED[target] = 1
            return 1
        path = _calibration_file(target, K_PROBE, "probe-")
        try:
            _PROBED[target] = int(json.loads(path.read_text())["layers"])
        except (OSError, ValueError, KeyError):
            print("specdec: choosing layer-skip's depth from one forward's early exits; cached in "
                  f"{path.parent}", file=sys.stderr, flush=True)
            found = probe(target)
            path.write_text(json.dumps(found))
            _PROBED[target] = found["layers"]
    return _PROBED[target]
