"""Training a parallel draft (train/parallel.py): the mask groups' layout gives every slot
what inference gives it, training lowers the mask slots' distance to the target, and the
export loads back as a parallel draft (models/mask_token.py)."""
import json

import numpy as np
import pytest
import torch

from specdec.errors import CheckpointError
from specdec.models.loader import load_model
from specdec.models.mask_token import CONFIG_KEY, MASK_FILE, read_mask, write_mask
from specdec.train.data import Batches
from specdec.train.parallel import ParallelDraft, draw_anchors, exporter, group_layout, parallel_loss
from specdec.train.trainer import TrainConfig, train
from tests.conftest import TOKENIZER, make_model

K = 4


def _layout_forward(model, x, anchors):
    B, L = x.shape
    lay = group_layout(L, anchors, K)
    T = len(lay["positions"])
    tokens = torch.cat([x, x.new_zeros(B, T - L)], 1)
    with torch.no_grad():
        return model(tokens, lay["positions"].expand(B, T), lay["is_mask"].expand(B, T),
                     lay["attn"].expand(B, T, T)), lay


def test_each_slot_sees_what_inference_shows_it():
    """Real slots equal a causal forward; a group's masks equal a forward of the prefix up to
    its anchor and K - 1 masks; a mask's teacher position is the one it predicts after."""
    model = ParallelDraft(make_model(seed=1, vocab=64, prepare=False).eval())
    x = torch.randint(2, 64, (2, 24))
    anchors = torch.tensor([3, 10, 20])
    logits, lay = _layout_forward(model, x, anchors)
    with torch.no_grad():
        ref = model.draft(x, torch.arange(24).expand(2, 24))
        torch.testing.assert_close(logits[:, :24], ref, atol=1e-4, rtol=1e-4)
        for g, a in enumerate(anchors.tolist()):
            emb = torch.cat([model.draft.model.embed_tokens(x[:, :a + 1]),
                             model.mask_embedding.expand(2, K - 1, -1)], 1)
            alone = model.draft(x[:, :a + K], torch.arange(a + K).expand(2, a + K), embeds=emb)[:, a + 1:]
            torch.testing.assert_close(logits[:, 24 + g * (K - 1): 24 + (g + 1) * (K - 1)], alone, atol=1e-4, rtol=1e-4)
            assert lay["source"][24 + g * (K - 1):24 + (g + 1) * (K - 1)].tolist() == list(range(a + 1, a + K))


def test_anchors_leave_room_for_every_mask():
    a = draw_anchors(20, 50, K, torch.Generator().manual_seed(0))
    assert len(a) == 20 - K + 1 and a.max() <= 20 - K and torch.equal(a, a.sort().values)


def test_training_pulls_the_mask_slots_toward_the_target_and_exports_a_parallel_draft(tmp_path):
    teacher = make_model(seed=0, vocab=64, std=0.3, prepare=False).eval()
    model = ParallelDraft(make_model(seed=1, vocab=64, std=0.3, prepare=False))
    stream = np.random.default_rng(0).integers(2, 64, 20000).astype(np.uint16)
    batches = Batches(stream, batch=4, seq_len=24, seed=0)
    loss_fn = parallel_loss(teacher, groups=4, K=K, seed=0)
    probe, _ = batches.get(999)
    with torch.no_grad():
        before = loss_fn(model, probe, None).item()
    cfg = TrainConfig(tokens=4 * 24 * 150, minutes=5, lr=1e-2, warmup_steps=5, batch=4, seq_len=24, threads=1)
    train(model, cfg, batches.get, loss_fn, tmp_path / "w", tmp_path / "out", TOKENIZER,
          export_fn=exporter(model, TOKENIZER, tmp_path / "out", max_k=K))
    with torch.no_grad():
        after = loss_fn(model, probe, None).item()
    assert after < 0.8 * before, (before, after)
    loaded = load_model(tmp_path / "out")              # the weights: an ordinary Llama checkpoint
    mask = read_mask(tmp_path / "out", loaded.config.hidden_size)
    assert mask.max_k == K
    torch.testing.assert_close(mask.embedding, model.mask_embedding.detach().half().float())


def test_a_bad_mask_record_is_a_clear_error(tmp_path):
    from specdec.models.loader import save_checkpoint
    m = make_model(seed=1, vocab=64, prepare=False)
    save_checkpoint(m, TOKENIZER, tmp_path)
    assert read_mask(tmp_path, 64) is None                                  # a plain draft
    write_mask(tmp_path, torch.zeros(64), 8)
    assert read_mask(tmp_path, 64).max_k == 8
    with pytest.raises(CheckpointError, match="hidden size"):
        read_mask(tmp_path, 32)
    (tmp_path / MASK_FILE).unlink()
    with pytest.raises(CheckpointError, match="mask embedding"):
        read_mask(tmp_path, 64)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg[CONFIG_KEY] = {"max_k": 0}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="max_k"):
        read_mask(tmp_path, 64)
