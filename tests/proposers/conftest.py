"""A 'loopy' tiny target whose greedy output falls into short cycles, so lookup proposers
get drafts accepted (random tiny models almost never repeat themselves)."""
import pytest
import torch

from specdec.models.linear import choose_kernel
from tests.conftest import make_model


def make_loopy(seed: int = 0, vocab: int = 64, cycle: int = 7, mix: float = 0.12, layers: int = 2):
    """Near-bigram model: token t strongly predicts perm(t) (cycles of length `cycle`); the
    attention and MLP outputs, scaled by `mix`, add context dependence so rows diverge."""
    m = make_model(seed, prepare=False, vocab=vocab, num_hidden_layers=layers)
    d = m.config.hidden_size
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(vocab, generator=g)
    perm = torch.empty(vocab, dtype=torch.long)
    for i in range(vocab):                          # cycles over consecutive entries of `order`
        start = i - i % cycle
        size = min(cycle, vocab - start)
        perm[order[i]] = order[start + (i - start + 1) % size]
    q, _ = torch.linalg.qr(torch.randn(max(vocab, d), d, generator=g))
    E = q[:vocab] * d ** 0.5                                                     # (V, d) near-orthogonal
    with torch.no_grad():
        m.model.embed_tokens.weight.copy_(E)
        m.lm_head.weight.zero_()
        m.lm_head.weight[perm] = E * (4.0 / d)
        for layer in m.model.layers:
            layer.self_attn.o_proj.weight.mul_(mix)
            layer.mlp.down_proj.weight.mul_(mix)
    return m.prepare(choose_kernel())


@pytest.fixture(scope="session")
def loopy_target():
    return make_loopy()
