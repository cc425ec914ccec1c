"""The compiled verification (`NativeForward.verify_sample`, what the engine runs for
temperature-only batches) follows verify/rejection.py's rule with the same draws: on the
same logits, drafts, q and uniforms it accepts the same drafts and emits the same token as
rejection_verify on softmax(logits / T), and its beta equals acceptance_probability."""
import pytest
import torch

from specdec.verify.rejection import acceptance_probability, rejection_verify
from specdec.verify.sampling import probs_from_logits
from tests.conftest import make_model


def _case(seed, B, k, V, one_hot, close):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, k + 1, V, generator=g) * 3                         # (B, k+1, V)
    temperature = torch.rand(B, generator=g) + 0.5
    p = probs_from_logits(logits, temperature)
    # a draft near p (close) or far from it, its tokens drawn from q
    q_logits = logits[:, :k] + torch.randn(B, k, V, generator=g) * (0.3 if close else 2.0)
    q = None if one_hot else torch.softmax(q_logits, -1)                        # (B, k, V)
    src = p[:, :k] if one_hot else q
    drafts = torch.multinomial(src.reshape(-1, V), 1, generator=g).reshape(B, k) if k else torch.zeros(B, 0, dtype=torch.long)
    num_draft = torch.randint(0, k + 1, (B,), generator=g).tolist()
    u = torch.rand(B, k + 1, generator=g)
    return logits, temperature, p, q, drafts, num_draft, u


@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("k", [0, 1, 3, 8])
def test_native_verification_equals_rejection_verify(k, one_hot):
    model = make_model(1, std=0.5)
    if model.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    V, agree, rounds, accepted, rejected = 64, 0, 0, 0, 0
    for seed in range(60):
        logits, t, p, q, drafts, nd, u = _case(seed, 4, k, V, one_hot, close=seed % 2 == 0)
        n_fast, next_fast, beta_fast = model.runner.native.verify_sample(logits, t, drafts, q, nd, u, k > 0)
        n_ref, next_ref = rejection_verify(p, q, drafts, torch.tensor(nd), u[:, :k], u[:, k])
        assert n_fast == n_ref.tolist()
        agree += sum(a == b for a, b in zip(next_fast, next_ref.tolist()))
        rounds += 4
        accepted += sum(n_fast)
        rejected += sum(n < d for n, d in zip(n_fast, nd))
        if k:
            beta_ref = acceptance_probability(p, q, drafts)
            assert torch.allclose(torch.tensor(beta_fast), beta_ref, atol=1e-5)
    # the draws are the same up to float rounding at a CDF boundary (probability ~1e-6 each)
    assert agree == rounds
    if k:
        assert accepted > 0 and rejected > 0                       # both branches were taken
