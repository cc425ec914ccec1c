"""Token-tree attention: a node's logits are its path's scored as a chain, bitwise on the
compiled decoder (within rounding on the eager path), at batch 1 and beside other rows; bad
trees are refused."""
import pytest
import torch

from specdec.models.tree import MAX_TREE, block_layout, depths
from tests.conftest import make_model

CTX = (37, 90)                                  # two rows, in different 64-key blocks
TREES = ([-1, -1, 0, 0, 1, 2, 5, -1, 6],        # branching, a path of depth 5
         [-1, 0, 1, 2])                          # a chain, padded beside the tree


def _fresh(model, prompts):
    cache = model.new_cache(len(prompts), 256)
    for b, p in enumerate(prompts):
        with torch.inference_mode():
            model(torch.tensor([p]), torch.arange(len(p))[None], cache.rows(b, b + 1))
        cache.advance(b, len(p))
    return cache


def _path(parents, j):
    out = []
    while j >= 0:
        out.append(j)
        j = parents[j]
    return out[::-1]


@pytest.mark.parametrize("native", [True, False])
def test_a_node_scores_as_its_path_would_as_a_chain(native):
    model = make_model(3)
    if native and model.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    if not native:
        model.runner.native = None
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, 8192, (n,), generator=g).tolist() for n in CTX]
    nodes = [torch.randint(2, 8192, (len(t),), generator=g).tolist() for t in TREES]
    roots = [5, 6]
    width = 1 + max(len(t) for t in TREES)
    cache = _fresh(model, prompts)
    pos, tree = block_layout(list(CTX), list(TREES), width)
    block = [[r] + n + [0] * (width - 1 - len(n)) for r, n in zip(roots, nodes)]
    with torch.inference_mode():
        out = model(torch.tensor(block), torch.tensor(pos), cache, tree=tree)       # (2, width, V)
    for b, parents in enumerate(TREES):
        for j in range(len(parents)):
            path = [roots[b]] + [nodes[b][i] for i in _path(parents, j)]
            ref_cache = _fresh(model, [prompts[b]])
            with torch.inference_mode():
                ref = model(torch.tensor([path]), torch.arange(CTX[b], CTX[b] + len(path))[None], ref_cache)
            if native:
                assert torch.equal(ref[0, -1], out[b, j + 1]), (b, j)
            else:
                torch.testing.assert_close(ref[0, -1], out[b, j + 1], rtol=1e-4, atol=1e-4)


def test_bad_trees_are_refused():
    with pytest.raises(ValueError, match="parent"):
        depths([-1, 3, 0])
    with pytest.raises(ValueError, match="at most"):
        block_layout([10], [[-1] * MAX_TREE], MAX_TREE + 1)
    model = make_model(3)
    if model.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    cache = _fresh(model, [[2, 3, 4]])
    pos, tree = block_layout([3], [[-1]], 2)
    far = type(tree)(tree.slots + MAX_TREE, tree.ancestors, tree.base)          # slots past the mask
    with pytest.raises(ValueError, match="within 64"), torch.inference_mode():
        model(torch.tensor([[5, 6]]), torch.tensor(pos), cache, tree=far)
