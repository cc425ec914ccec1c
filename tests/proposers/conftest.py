"""A 'loopy' tiny target whose greedy output falls into short cycles, so lookup proposers
get drafts accepted (random tiny models almost never repeat themselves)."""
import pytest
import torch

from specdec.models.head_loader import load_head, load_mtp, save_head, write_mtp
from specdec.models.linear import choose_kernel
from specdec.models.loader import load_model, save_checkpoint
from tests.conftest import TOKENIZER, make_model
from tests.proposers.heads import passthrough_head, random_head

SUBSET = list(range(0, 64, 2)) + list(range(1, 33, 2))     # 48 of the loopy target's 64 tokens
V_LAW = 5                # the law tests' vocabulary (test_exact_law.V)


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


@pytest.fixture(scope="session")
def heads(loopy_target, tmp_path_factory):
    """{method: (target, head)}: an EAGLE head scoring 48 tokens, and the same layer read back as
    the MTP layer of a checkpoint (all 64 tokens)."""
    root = tmp_path_factory.mktemp("heads")
    head = passthrough_head(loopy_target, 0.1, draft_vocab=SUBSET)
    save_checkpoint(loopy_target, TOKENIZER, root / "target", dtype=torch.float32)
    save_head(head, root / "eagle", dtype=torch.float32)
    write_mtp(head, root / "target", root / "mtp", dtype=torch.float32)
    target = load_model(root / "mtp")            # the MTP layer rides along, unread by the decoder
    return {"eagle": (target, load_head(root / "eagle", target)), "mtp": (target, load_mtp(root / "mtp", target))}


@pytest.fixture(scope="session")
def small():
    target = make_model(3, std=0.5, vocab=V_LAW)
    return target, random_head(target, seed=1, draft_vocab=[0, 2, 3])      # q = 0 on tokens 1 and 4
