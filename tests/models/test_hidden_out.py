"""`forward(..., hidden_out=)` hands over the final normed hidden states of the same forward
(what a feature-head proposer reads) without changing the logits, on every kernel."""
import pytest
import torch

from tests.conftest import make_model
from specdec.models.linear import KERNELS


@pytest.mark.parametrize("kernel", ["native", "onednn"])
def test_hidden_out_is_the_hidden_only_forward_and_leaves_the_logits_alone(kernel):
    model = make_model(0, prepare=False).prepare(KERNELS[kernel]())
    if kernel == "native" and model.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    if kernel == "onednn" and model.kernel.name != "onednn":
        pytest.skip("oneDNN unavailable")
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.config.vocab_size, (3, 7), generator=g)          # (B, T)
    positions = torch.arange(7)[None].expand(3, -1).contiguous()
    d = model.config.hidden_size

    def run(**kw):
        cache = model.new_cache(3, 32)
        with torch.inference_mode():
            return model(tokens, positions, cache, **kw)

    hidden = torch.full((3, 7, d), float("nan"))
    logits = run(hidden_out=hidden)                                                   # (B, T, V)
    assert torch.equal(logits, run())                                                 # bitwise: nothing changed
    assert torch.equal(hidden, run(hidden_only=True))                                 # the same states
    assert torch.allclose(model.lm_head(hidden), logits, atol=1e-4)                   # the logits' input
    again = torch.zeros(3, 7, d)
    run(hidden_only=True, hidden_out=again)
    assert torch.equal(again, hidden)
