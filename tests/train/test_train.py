"""Corpus split, data windows and a resumable training run on a tiny model."""
import torch

from specdec.models.llama import LlamaModel
from specdec.models.loader import load_model
from specdec.corpus import corpus_files, is_held_out
from specdec.train.data import Batches
from specdec.train.trainer import TrainConfig, lm_loss, train
from tests.conftest import TOKENIZER, tiny_config


def test_split_is_deterministic_disjoint_and_about_5_percent():
    train_files, held = corpus_files("train"), corpus_files("heldout")
    assert set(train_files).isdisjoint(held)
    assert 0.02 < len(held) / (len(held) + len(train_files)) < 0.1
    assert all(is_held_out(f) for f in held) and not any(is_held_out(f) for f in train_files[:50])
    assert not any("/test/" in f or f.startswith("test/") or "site-packages" in f for f in train_files)


def test_batches_are_seeded_and_shifted():
    import numpy as np
    b = Batches(np.arange(1000, dtype=np.uint16), batch=4, seq_len=16, seed=3)
    x1, y1 = b.get(5)
    x2, _ = b.get(5)
    assert torch.equal(x1, x2) and torch.equal(y1[:, :-1], x1[:, 1:])


def test_training_lowers_loss_and_resumes(tmp_path):
    import numpy as np
    torch.manual_seed(0)
    stream = np.tile(np.arange(2, 50, dtype=np.uint16), 200)     # a learnable periodic stream
    model = LlamaModel(tiny_config(vocab=64))
    batches = Batches(stream, batch=4, seq_len=32, seed=0)
    cfg = TrainConfig(tokens=4 * 32 * 30, minutes=5, lr=3e-3, warmup_steps=5, batch=4, seq_len=32, threads=1)
    with torch.no_grad():
        x, y = batches.get(999)
        before = lm_loss(model, x, y).item()
    state = train(model, cfg, batches.get, lm_loss, tmp_path / "work", tmp_path / "out", TOKENIZER)
    assert state["step"] == 30
    with torch.no_grad():
        after = lm_loss(model, x, y).item()
    assert after < before - 0.5
    # resuming with a larger budget continues from step 30, and the export loads
    cfg2 = TrainConfig(**{**cfg.__dict__, "tokens": 4 * 32 * 35})
    state2 = train(LlamaModel(tiny_config(vocab=64)), cfg2, batches.get, lm_loss, tmp_path / "work",
                   tmp_path / "out", TOKENIZER)
    assert state2["step"] == 35
    loaded = load_model(tmp_path / "out")
    assert loaded.config.vocab_size == 64


def test_training_settings_are_checked_before_anything_runs(monkeypatch):
    import pytest
    from specdec.errors import ConfigError
    good = dict(tokens=1000, minutes=1.0)
    for bad in (dict(tokens=0), dict(batch=0), dict(minutes=0.0), dict(lr=-1.0), dict(device="tpu"),
                dict(bf16="yes")):
        with pytest.raises(ConfigError):
            TrainConfig(**{**good, **bad})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no CUDA device"):
        TrainConfig(**good, device="cuda")


def test_only_the_target_and_draft_train_on_a_gpu(capsys):
    """distill and eagle train on the CPU: --device cuda is refused with exit 2, before any
    model or corpus is read."""
    from specdec.cli import main
    assert main(["train", "eagle", "--device", "cuda", "--work", "/nonexistent/w"]) == 2
    assert "eagle trains on the CPU" in capsys.readouterr().err


def test_bf16_training_autocasts_the_forward_and_keeps_fp32_weights(tmp_path):
    """--bf16 on the CPU: the loss's logits come out in bf16, the weights and the export stay
    fp32-trained, and the loss still falls on a learnable stream."""
    import numpy as np
    torch.manual_seed(0)
    stream = np.tile(np.arange(2, 50, dtype=np.uint16), 200)
    model = LlamaModel(tiny_config(vocab=64))
    batches = Batches(stream, batch=4, seq_len=32, seed=0)
    seen = []

    def loss_fn(m, x, y):
        pos = torch.arange(x.shape[1]).expand_as(x)
        logits = m(x, pos)
        seen.append(logits.dtype)
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    with torch.no_grad():
        x, y = batches.get(999)
        before = lm_loss(model, x, y).item()
    cfg = TrainConfig(tokens=4 * 32 * 30, minutes=5, lr=3e-3, warmup_steps=5, batch=4, seq_len=32,
                      threads=1, bf16=True)
    train(model, cfg, batches.get, loss_fn, tmp_path / "work", tmp_path / "out", TOKENIZER)
    assert set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with torch.no_grad():
        assert lm_loss(model, x, y).item() < before - 0.5


def test_stop_after_ends_the_invocation_and_resume_goes_on(tmp_path):
    """--stop-after: a run in pieces (each saved) keeps one schedule; the next piece resumes."""
    import numpy as np
    stream = np.tile(np.arange(2, 50, dtype=np.uint16), 200)
    batches = Batches(stream, batch=2, seq_len=16, seed=0)
    cfg = TrainConfig(tokens=2 * 16 * 1000, minutes=5, batch=2, seq_len=16, threads=1, stop_after=0.005)
    first = train(LlamaModel(tiny_config(vocab=64)), cfg, batches.get, lm_loss, tmp_path / "w", tmp_path / "o",
                  TOKENIZER)
    assert 1 <= first["step"] < 1000 and (tmp_path / "w" / "state.pt").exists()
    second = train(LlamaModel(tiny_config(vocab=64)), cfg, batches.get, lm_loss, tmp_path / "w", tmp_path / "o",
                   TOKENIZER)
    assert second["step"] > first["step"] and second["elapsed"] < 5 * 60


def test_chat_data_is_for_a_head_and_needs_a_checkpoint(tmp_path, capsys):
    from specdec.cli import main
    assert main(["train", "target", "--corpus", "sharegpt", "--work", str(tmp_path / "a")]) == 2
    assert "trains a feature head" in capsys.readouterr().err
    assert main(["train", "eagle", "--target", str(tmp_path / "none.gguf"), "--work", str(tmp_path / "b")]) == 2
    assert "no checkpoint there" in capsys.readouterr().err
