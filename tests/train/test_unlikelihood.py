"""Unlikelihood fine-tuning: the loop mask, the greedy continuation, and that it unlearns loops."""
import numpy as np
import pytest
import torch

from specdec.repetition import repetition_fraction
from specdec.train.data import Batches
from specdec.train.trainer import TrainConfig, lm_loss, train
from specdec.train.unlikelihood import greedy_continue, mle_and_unlikelihood, repeat_mask, unlikelihood_loss
from specdec.models.llama import LlamaModel
from tests.conftest import TOKENIZER, make_model, tiny_config


def test_the_mask_marks_what_the_repetition_fraction_counts():
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 5, (60,), generator=g),                       # small alphabet: chance repeats
            torch.tensor([7, 8, 9] * 20),                                  # a loop of period 3
            torch.arange(60)]                                              # no repeat at all
    mask = repeat_mask(torch.stack(rows), n=4)
    for row, m in zip(rows, mask):
        assert m.float().mean().item() == pytest.approx(repetition_fraction(row.tolist(), 4))
    assert mask[1, :6].tolist() == [False] * 6 and mask[1, 6:].all()       # the loop, from its second period
    assert not mask[2].any()


def test_greedy_continue_is_the_uncached_argmax():
    model = make_model(seed=0, vocab=64, prepare=False)
    prompts = torch.randint(2, 64, (3, 5), generator=torch.Generator().manual_seed(1))
    cont = greedy_continue(model, prompts, 12)                            # (3, 12)
    seq = prompts
    with torch.no_grad():
        for _ in range(12):
            pos = torch.arange(seq.shape[1]).expand_as(seq)
            seq = torch.cat([seq, model(seq, pos)[:, -1:].argmax(-1)], 1)
    assert torch.equal(cont, seq[:, 5:])
    # under the trainer's bf16 autocast (--bf16) the continuation is still the fp32 model's
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(greedy_continue(model, prompts, 12), cont)


def test_no_loop_no_loss_and_a_loop_has_a_gradient():
    model = make_model(seed=0, vocab=64, prepare=False).train()
    prompts = torch.randint(2, 64, (4, 6), generator=torch.Generator().manual_seed(2))
    loss = unlikelihood_loss(model, prompts, new_tokens=40, n=2)
    assert loss.item() > 0 and loss.requires_grad                        # bigrams repeat in 40 tokens of 64
    assert unlikelihood_loss(model, prompts, new_tokens=3, n=4).item() == 0.0   # too short to repeat a 4-gram


def _loop_probability(model, prompt, loop, n):
    """The mean probability the model gives the tokens of `loop` (the prompt's continuation)
    that repeat an earlier n-gram of it."""
    seq = torch.cat([prompt, loop], 1)
    pos = torch.arange(seq.shape[1]).expand_as(seq)
    with torch.no_grad():
        p = torch.softmax(model.eval()(seq, pos)[:, prompt.shape[1] - 1:-1], -1)      # (B, N, V)
    p_loop = p.gather(-1, loop[..., None])[..., 0]                                  # (B, N)
    return p_loop[repeat_mask(loop, n)].mean().item()


def test_the_trainer_loss_is_the_sum_of_the_two():
    model = make_model(seed=0, vocab=64, prepare=False).train()
    x = torch.randint(2, 64, (2, 12), generator=torch.Generator().manual_seed(5))
    y = torch.randint(2, 64, (2, 12), generator=torch.Generator().manual_seed(6))
    both = mle_and_unlikelihood(prompt_len=6, new_tokens=30, weight=0.5, n=2)(model, x, y)
    parts = lm_loss(model, x, y) + 0.5 * unlikelihood_loss(model, x[:, :6], 30, n=2)
    assert both.item() == pytest.approx(parts.item(), rel=1e-6)


def test_unlikelihood_training_unlearns_the_loop_that_next_token_training_keeps(tmp_path):
    """A model trained on a cycle of 8 tokens continues it greedily, repeating itself. From there,
    30 steps of the next-token loss keep that loop certain; 30 steps of the unlikelihood loss of
    the model's own continuations make it unlikely. (A model this small then falls into another
    loop: the real target's repetition is measured by benchmarks/model_card.py.)"""
    n, cycle = 3, np.tile(np.arange(2, 10, dtype=np.uint16), 2000)
    batches = Batches(cycle, batch=4, seq_len=16, seed=0)
    prompt = torch.tensor(cycle[:8].astype(np.int64)).expand(4, 8)
    loop = torch.tensor(cycle[8:40].astype(np.int64)).expand(4, 32)
    torch.manual_seed(0)
    looping = LlamaModel(tiny_config(vocab=64))
    cfg = TrainConfig(tokens=4 * 16 * 40, minutes=5, lr=3e-3, warmup_steps=5, batch=4, seq_len=16, threads=1)
    train(looping, cfg, batches.get, lm_loss, tmp_path / "start", tmp_path / "start-out", TOKENIZER)
    assert torch.equal(greedy_continue(looping.eval(), prompt, 32), loop)
    before = _loop_probability(looping, prompt, loop, n)
    assert before > 0.9, before
    more = TrainConfig(**{**cfg.__dict__, "tokens": 4 * 16 * 30})
    after = {}
    for name, loss_fn in {"mle": lm_loss,
                          "ul": lambda m, x, y: unlikelihood_loss(m, x[:, :8], 32, n=n)}.items():
        model = LlamaModel(tiny_config(vocab=64))
        model.load_state_dict(looping.state_dict())
        train(model, more, batches.get, loss_fn, tmp_path / name, tmp_path / f"{name}-out", TOKENIZER)
        after[name] = _loop_probability(model, prompt, loop, n)
    assert after["mle"] > 0.9 and after["ul"] < 0.1, (before, after)
