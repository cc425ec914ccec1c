"""The compiled greedy draft loop (`NativeForward.draft_argmax`) gives the tokens, and leaves
the cache, exactly as one forward per step followed by torch.argmax does."""
import pytest
import torch

from tests.conftest import make_model


@pytest.mark.parametrize("layers", [None, 1])
def test_draft_argmax_equals_the_step_by_step_loop(layers):
    model = make_model(2, std=0.5)
    if model.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    lengths = [5, 17, 9]
    g = torch.Generator().manual_seed(0)
    caches = []
    for _ in range(2):
        cache = model.new_cache(3, 64)
        with torch.inference_mode():
            for b, L in enumerate(lengths):
                ids = torch.randint(2, 8192, (1, L), generator=torch.Generator().manual_seed(b))
                model(ids, torch.arange(L)[None], cache.rows(b, b + 1), num_layers=layers)
        caches.append(cache)
    first = torch.randint(2, 8192, (3,), generator=g)
    pos = torch.tensor(lengths)
    with torch.inference_mode():
        fast = model.native.draft_argmax(first, pos, 6, caches[0], layers)                # (3, 6)
        tok, slow = first, []
        for i in range(6):
            logits = model(tok[:, None], (pos + i)[:, None], caches[1], num_layers=layers)
            tok = logits[:, 0].argmax(-1)
            slow.append(tok)
    assert torch.equal(fast, torch.stack(slow, 1))
    for k_fast, k_slow in zip(caches[0].k, caches[1].k):
        assert torch.equal(k_fast, k_slow)
    with pytest.raises(ValueError, match="position"):
        model.native.draft_argmax(first, pos + 60, 6, caches[0])
