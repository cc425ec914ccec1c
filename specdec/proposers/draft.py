"""The `draft` method: a draft model guessing a chain (draft_model.py) or, with `tree`, a
token tree (draft_tree.py); a draft with another tokenizer, a chain across vocabularies
(cross_vocab.py). Built by name from the registry."""
from __future__ import annotations

from ..errors import ConfigError
from .base import register
from .cross_vocab import CrossVocabProposer
from .draft_model import DraftModelProposer
from .draft_tree import DraftTreeProposer

CROSS_CACHE = 2      # the draft's cache length per target position: a draft may spell a text in more
                     # tokens than the target (0.99 bundled-draft tokens per SmolLM2 token on held-out
                     # code, 1.5 with a 1000-token vocabulary); a row that fills it stops drafting


@register("draft")
def build(target, spec, draft_model=None, rows=1, max_len=1024, tree_cost=None, **_):
    """The draft model checked against the target (one vocabulary), then its proposer. A draft
    loaded with another tokenizer carries its `vocab_map` (build.load_models: VocabMap) and
    drafts across vocabularies; its cache holds up to CROSS_CACHE times the target's tokens."""
    if draft_model is None:
        raise ConfigError("method 'draft' needs a draft model (--draft DIR)")
    vmap = getattr(draft_model, "vocab_map", None)
    if vmap is not None:
        if spec.tree:
            raise ConfigError("token trees need a draft with the target's vocabulary; this draft has another")
        length = min(draft_model.config.max_position_embeddings, CROSS_CACHE * max_len)
        return CrossVocabProposer(draft_model, vmap, rows, length, spec.opts.get("cross_greedy", "retokenize"))
    if draft_model.config.vocab_size != target.config.vocab_size:
        raise ConfigError(f"draft vocabulary ({draft_model.config.vocab_size}) differs from the "
                          f"target's ({target.config.vocab_size})")
    if spec.tree:
        return DraftTreeProposer(draft_model, rows, max_len, budget=spec.tree, cost=tree_cost)
    return DraftModelProposer(draft_model, rows, max_len)
