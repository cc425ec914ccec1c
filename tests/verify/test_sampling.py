import torch

from specdec.verify.sampling import probs_from_logits, sample


def test_top_k_and_top_p_filter_per_row():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]] * 3)).unsqueeze(1)  # (3, 1, 5)
    p = probs_from_logits(logits, torch.ones(3), torch.tensor([2, 0, 0]), torch.tensor([1.0, 0.6, 1.0]))
    assert torch.allclose(p[0, 0], torch.tensor([5 / 7, 2 / 7, 0, 0, 0]))
    assert torch.allclose(p[1, 0], torch.tensor([5 / 7, 2 / 7, 0, 0, 0]))  # 0.5 < 0.6, 0.7 >= 0.6
    assert torch.allclose(p[2, 0], torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]))


def test_temperature_sharpens():
    logits = torch.tensor([[[1.0, 0.0]]])
    hot = probs_from_logits(logits, torch.tensor([2.0]))[0, 0, 0]
    cold = probs_from_logits(logits, torch.tensor([0.5]))[0, 0, 0]
    assert cold > torch.softmax(logits, -1)[0, 0, 0] > hot


def test_sample_never_picks_zero_probability():
    probs = torch.tensor([[0.0, 1.0, 0.0]] * 4)
    out = sample(probs, torch.tensor([0.0, 0.5, 0.999999, 1.0 - 1e-9]))
    assert out.tolist() == [1, 1, 1, 1]
