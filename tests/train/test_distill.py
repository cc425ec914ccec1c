"""Distillation pulls the draft's distribution toward the target's (lower TV = higher acceptance)."""
import numpy as np
import torch

from specdec.train.data import Batches
from specdec.train.distill import distill_loss, mixed_batches
from specdec.train.trainer import TrainConfig, train
from tests.conftest import TOKENIZER, make_model


class _Tok:
    bos_id = 0


def _tv(teacher, student, x):
    pos = torch.arange(x.shape[1]).expand_as(x)
    with torch.no_grad():
        p = torch.softmax(teacher(x, pos), -1)
        q = torch.softmax(student(x, pos), -1)
    return 0.5 * (p - q).abs().sum(-1).mean().item()


def test_distillation_reduces_total_variation(tmp_path):
    teacher = make_model(seed=0, vocab=128, std=0.3, prepare=False).eval()
    student = make_model(seed=1, vocab=128, std=0.3, prepare=False)
    stream = np.random.default_rng(0).integers(2, 128, 20000).astype(np.uint16)
    batches = Batches(stream, batch=4, seq_len=32, seed=0)
    batch_fn = mixed_batches(batches, teacher, _Tok(), seed=0, n_samples=4, new_tokens=24)
    x, y = batch_fn(1)                           # odd steps: the teacher's own samples
    assert x.shape == (4, 32) and torch.equal(x[:, 1:], y[:, :-1])
    probe, _ = batches.get(12345)
    before = _tv(teacher, student, probe)
    cfg = TrainConfig(tokens=4 * 32 * 200, minutes=5, lr=1e-2, warmup_steps=5, batch=4, seq_len=32, threads=1)
    train(student, cfg, batch_fn, distill_loss(teacher), tmp_path / "w", tmp_path / "out", TOKENIZER)
    after = _tv(teacher, student, probe)
    assert after < 0.85 * before, (before, after)
