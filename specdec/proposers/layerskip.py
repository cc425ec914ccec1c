"""`layerskip`: self-speculation. The draft is the target's first L' layers, then its final
norm and LM head, with a KV cache of its own for the shallow path (no extra weights).

It is `DraftModelProposer` run with `num_layers=L'` on the target itself. L' comes from the
option `layerskip_layers`; `specdec.build` measures it (adaptive/layers.py) when not given.
"""
from __future__ import annotations

from ..errors import ConfigError
from ..costs.key import CostKey
from .base import register
from .draft_model import DraftModelProposer


class LayerSkipProposer(DraftModelProposer):
    name = "layerskip"

    def __init__(self, target, layers: int, rows: int, max_len: int):
        n = target.config.num_hidden_layers
        if not isinstance(layers, int) or not 1 <= layers < n:
            raise ConfigError(f"layerskip_layers must be an integer in 1..{n - 1} for a {n}-layer target, "
                              f"got {layers!r}")
        super().__init__(target, rows, max_len, num_layers=layers, name="layerskip")
        self.layers = layers

    def cost_key(self):
        return CostKey("layerskip", str(self.layers))


@register("layerskip")
def _build(target, spec, draft_model=None, rows=1, max_len=1024, **_):
    n = target.config.num_hidden_layers
    if n < 2:
        raise ConfigError("method 'layerskip' needs a target with at least 2 layers")
    layers = spec.opts.get("layerskip_layers")
    if layers is None:
        raise ConfigError("method 'layerskip' needs the option layerskip_layers "
                          "(specdec.build measures it when not given)")
    return LayerSkipProposer(target, layers, rows, max_len)
