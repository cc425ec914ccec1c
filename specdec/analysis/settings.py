"""The grids `specdec analyze` and `specdec.analyze` measure: quick and full defaults, and
the checks on settings given instead."""
from __future__ import annotations

from ..config import K_MAX
from ..errors import ConfigError

# about 5 minutes on a 2-core machine with the bundled models. Cells whose interval is
# still wider than +-10% get extra groups (analysis/extend.py) for at most extend_s seconds,
# or, when that is None, extend_share of the time the planned groups took (a tiny grid gets
# a tiny budget): quick, whose decoding is about a quarter of its run, adds about an eighth
# to the run; the full grid, whose decoding is most of a long run, adds about a third.
QUICK = dict(k=[1, 3, 6], batch_sizes=[1, 4, 16], temperatures=[0.0, 0.7, 1.0, 1.5], repeats=3,
             max_new_tokens=64, prompt_tokens=64, extend_s=None, extend_share=0.5)
# --quick's promise: its decoding, extra groups included, ends this many seconds after the
# analysis starts (models loaded), leaving a minute of a 10-minute run for loading and the report
QUICK_DEADLINE_S = 540
FULL = dict(k=[1, 2, 3, 4, 6, 8], batch_sizes=[1, 2, 4, 8, 16, 32], temperatures=[0.0, 0.7, 1.0, 1.5],
            repeats=4, max_new_tokens=64, prompt_tokens=128, extend_s=None, extend_share=0.3)


def grid_settings(quick: bool, **given) -> dict:
    """The QUICK or FULL grid with each setting in `given` that is not None put in its place
    (k, batch_sizes, temperatures, repeats, max_new_tokens, prompt_tokens, extend_s,
    extend_share); ConfigError
    for values out of range."""
    base = QUICK if quick else FULL
    unknown = sorted(set(given) - set(base))
    if unknown:
        raise ConfigError(f"unknown analysis setting {unknown[0]!r}; known: {', '.join(base)}")
    s = {key: given[key] if given.get(key) is not None else val for key, val in base.items()}
    s["k"] = sorted(set(s["k"]))
    s["batch_sizes"] = sorted(set(s["batch_sizes"]))
    s["temperatures"] = list(s["temperatures"])
    if not s["k"] or any(k < 1 or k > K_MAX for k in s["k"]):
        raise ConfigError(f"--k values must be in 1..{K_MAX}")
    if not s["batch_sizes"] or any(b < 1 for b in s["batch_sizes"]):
        raise ConfigError("--batch-sizes must be >= 1")
    if not s["temperatures"] or any(t < 0 for t in s["temperatures"]):
        raise ConfigError("--temperatures must be >= 0")
    if s["repeats"] < 1 or s["max_new_tokens"] < 4 or s["prompt_tokens"] < 4:
        raise ConfigError("--repeats must be >= 1, --max-new-tokens and --prompt-tokens >= 4")
    if (s["extend_s"] is not None and s["extend_s"] < 0) or s["extend_share"] < 0:
        raise ConfigError("--extend-s must be >= 0")
    return s
