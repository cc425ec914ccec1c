"""The compiled draft loops give what one forward per step followed by Python does: the
greedy loop (`NativeForward.draft_argmax`) the same tokens and cache as torch.argmax, the
sampled loop (`draft_sample`) the same q and draws as verify/sampling.py; and a forward's
argmax_out is torch.argmax of its logits."""
import pytest
import torch

from specdec.models.linear import choose_kernel
from tests.conftest import make_model


@pytest.mark.parametrize("layers", [None, 1])
def test_draft_argmax_equals_the_step_by_step_loop(layers):
    model = make_model(2, std=0.5)
    if model.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    lengths = [5, 17, 9]
    g = torch.Generator().manual_seed(0)
    caches = [_prefilled(model, lengths, layers) for _ in range(2)]
    first = torch.randint(2, 8192, (3,), generator=g)
    pos = torch.tensor(lengths)
    with torch.inference_mode():
        fast = model.runner.native.draft_argmax(first, pos, 6, caches[0], layers)                # (3, 6)
        tok, slow = first, []
        for i in range(6):
            logits = model(tok[:, None], (pos + i)[:, None], caches[1], num_layers=layers)
            tok = logits[:, 0].argmax(-1)
            slow.append(tok)
    assert torch.equal(fast, torch.stack(slow, 1))
    for k_fast, k_slow in zip(caches[0].k, caches[1].k):
        assert torch.equal(k_fast, k_slow)
    with pytest.raises(ValueError, match="position"):
        model.runner.native.draft_argmax(first, pos + 60, 6, caches[0])


@pytest.mark.parametrize("path", ["native", "eager"])
def test_argmax_out_is_torch_argmax_of_the_logits(path):
    """The forward's argmax_out (what greedy rounds verify with) equals torch.argmax of the
    logits it returns, ties included: lm_head rows 7 and 9 are made equal so tokens tie."""
    model = make_model(2, std=0.5, prepare=False)
    with torch.no_grad():
        model.lm_head.weight[9] = model.lm_head.weight[7]
        model.lm_head.weight[7:10] *= 40.0              # rows 7 and 9 win often, tied exactly
    model.prepare(choose_kernel())
    if path == "native" and model.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    if path == "eager":
        model.runner.native = None
    cache = model.new_cache(3, 64)
    tokens = torch.randint(2, 8192, (3, 6), generator=torch.Generator().manual_seed(1))
    best = torch.full((3, 6), -1, dtype=torch.long)
    with torch.inference_mode():
        logits = model(tokens, torch.arange(6)[None].expand(3, 6), cache, argmax_out=best)
    assert torch.equal(best, logits.argmax(-1))
    assert bool((best == 7).any()), "the tie never came up: the test would not see a wrong tie-break"


def test_draft_sample_equals_the_step_by_step_loop():
    """The compiled sampled draft loop: q equals softmax(logits / t) of one forward per step,
    and each token is verify.sampling.sample's draw from it at the same uniform."""
    from specdec.verify.sampling import probs_from_logits, sample
    steps = 5
    model, caches, first, pos, u = _sampling_case(seed=4, width=1, steps=steps)
    temperature = torch.tensor([0.7, 1.0, 1.3])
    with torch.inference_mode():
        fast, q_fast = model.runner.native.draft_sample(first, pos, steps, caches[0], temperature, u)
        tok, slow, q_slow = first, [], []
        for i in range(steps):
            logits = model(tok[:, None], (pos + i)[:, None], caches[1])
            q = probs_from_logits(logits, temperature)[:, 0]
            tok = sample(q, u[:, i])
            slow.append(tok)
            q_slow.append(q)
    q_slow = torch.stack(q_slow, 1)
    assert torch.allclose(q_fast, q_slow, rtol=1e-5, atol=1e-8)
    assert torch.equal(fast, torch.stack(slow, 1))
    assert len(set(fast.flatten().tolist())) > 5           # real draws, not one token repeated


def _prefilled(model, lengths, layers=None):
    """A 3-row cache whose row b holds a seeded random prompt of lengths[b] tokens."""
    cache = model.new_cache(3, 64)
    with torch.inference_mode():
        for b, L in enumerate(lengths):
            ids = torch.randint(2, 8192, (1, L), generator=torch.Generator().manual_seed(b))
            model(ids, torch.arange(L)[None], cache.rows(b, b + 1), num_layers=layers)
    return cache


def test_draft_sample_with_two_tokens_fed_equals_the_step_by_step_loop():
    """After a round that accepted every draft the draft model feeds two tokens (the last draft
    and the bonus token): the first step is a 2-position forward whose last logits give q."""
    from specdec.verify.sampling import probs_from_logits, sample
    steps = 4
    model, caches, feed, pos, u = _sampling_case(seed=5, width=2, steps=steps)
    temperature = torch.tensor([1.0, 0.8, 1.2])
    with torch.inference_mode():
        fast, q_fast = model.runner.native.draft_sample(feed, pos, steps, caches[0], temperature, u)
        logits = model(feed, pos[:, None] + torch.arange(2), caches[1])[:, -1:]
        slow, q_slow = [], []
        for i in range(steps):
            q = probs_from_logits(logits, temperature)[:, 0]
            tok = sample(q, u[:, i])
            slow.append(tok)
            q_slow.append(q)
            if i < steps - 1:
                logits = model(tok[:, None], (pos + 2 + i)[:, None], caches[1])
    assert torch.allclose(q_fast, torch.stack(q_slow, 1), rtol=1e-5, atol=1e-8)
    assert torch.equal(fast, torch.stack(slow, 1))
    for fast_kv, slow_kv in zip(caches[0].k + caches[0].v, caches[1].k + caches[1].v):   # the same entries
        assert torch.equal(fast_kv, slow_kv)


def _sampling_case(seed: int, width: int, steps: int):
    """A model with the compiled decoder, two identical 3-row caches, the tokens to feed
    ((3,) for width 1, else (3, width)), their first positions and (3, steps) uniforms."""
    model = make_model(3, std=0.5)
    if model.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    lengths = [5, 17, 9]
    caches = [_prefilled(model, lengths) for _ in range(2)]
    g = torch.Generator().manual_seed(seed)
    feed = torch.randint(2, 8192, (3,) if width == 1 else (3, width), generator=g)
    return model, caches, feed, torch.tensor(lengths), torch.rand(3, steps, generator=g)
