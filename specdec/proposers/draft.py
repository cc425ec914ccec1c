"""The `draft` method: a draft model guessing a chain (draft_model.py) or, with `tree`, a
token tree (draft_tree.py). Built by name from the registry."""
from __future__ import annotations

from ..errors import ConfigError
from .base import register
from .draft_model import DraftModelProposer
from .draft_tree import DraftTreeProposer


@register("draft")
def build(target, spec, draft_model=None, rows=1, max_len=1024, tree_cost=None, **_):
    """The draft model checked against the target (one vocabulary), then its proposer."""
    if draft_model is None:
        raise ConfigError("method 'draft' needs a draft model (--draft DIR)")
    if draft_model.config.vocab_size != target.config.vocab_size:
        raise ConfigError(f"draft vocabulary ({draft_model.config.vocab_size}) differs from the "
                          f"target's ({target.config.vocab_size})")
    if spec.tree:
        return DraftTreeProposer(draft_model, rows, max_len, budget=spec.tree, cost=tree_cost)
    return DraftModelProposer(draft_model, rows, max_len)
