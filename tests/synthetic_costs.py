"""A synthetic cost model for tests: round costs from formulas instead of timings."""
from specdec.costs.cost_model import CostModel
from specdec.costs.profiling import ModelProfile, grid_rows


def synthetic_cost_model(target_fn, draft_fns: dict | None = None, k_max: int = 8,
                         batch_sizes=tuple(grid_rows(64)), l_ref: int = 128, l_long: int = 512) -> CostModel:
    """target_fn(b, q, L) and draft_fns[key](b, L) in seconds (key a CostKey or its string,
    "draft:draft"), sampled on the grid a measurement would use."""
    grid = [(L, b, q) for b in batch_sizes for L in (l_ref, l_long) for q in range(1, k_max + 2)]
    target = ModelProfile(l_ref, l_long, {(L, b, q): float(target_fn(b, q, L)) for L, b, q in grid})
    drafts = {k: ModelProfile(l_ref, l_long, {(L, b, 1): float(fn(b, L)) for L, b, q in grid if q == 1})
              for k, fn in (draft_fns or {}).items()}
    return CostModel(target, drafts, k_max)
