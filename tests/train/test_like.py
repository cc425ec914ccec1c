"""`specdec train draft --like TARGET`: a small draft with the target's tokenizer, trained in
resumable pieces on chats through the target's template, loadable as `--draft`; bad targets
are refused with one line."""
from __future__ import annotations

import json

import pytest
import torch

from specdec.build import load_models
from specdec.cli import main
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.errors import ConfigError
from specdec.models.loader import load_tokenizer, save_checkpoint
from specdec.train import chat_data
from specdec.train.like import check_like_target, init_from_target, like_config, projected_embedding
from specdec.models.llama import LlamaModel
from tests.conftest import TOKENIZER, make_model, random_prompts
from tests.train.test_chat_data import TEMPLATE, _ids, _sharegpt


@pytest.fixture(scope="module")
def chat_target(tmp_path_factory):
    """A tiny target folder with the bundled tokenizer and a chat template."""
    root = tmp_path_factory.mktemp("like")
    folder = save_checkpoint(make_model(3, std=0.2, prepare=False), TOKENIZER, root / "target", dtype=torch.float32)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": TEMPLATE}))
    return folder


@pytest.fixture
def sharegpt(tmp_path, monkeypatch):
    train, _ = _ids(40, 0)
    path = _sharegpt(tmp_path / "sg.json", train + ["pad"])
    monkeypatch.setattr(chat_data, "sharegpt_file", lambda: path)
    return path


def _train(target, out, work, *extra) -> int:
    return main(["train", "draft", "--like", str(target), "--out", str(out), "--work", str(work),
                 "--hidden", "64", "--layers", "1", "--batch", "2", "--threads", "1", "--minutes", "5", *extra])


def test_the_shape_keeps_the_vocabulary_and_narrows_the_rest():
    target = make_model(0, prepare=False).config                  # 8192 tokens, hidden 64
    cfg = like_config(target, hidden=256, layers=3)
    assert cfg.hidden_size == 64 and cfg.vocab_size == target.vocab_size and cfg.tie_word_embeddings
    assert cfg.num_hidden_layers == 3 and cfg.eos_token_id == target.eos_token_id
    with pytest.raises(ConfigError, match="multiple of 64"):
        like_config(target, hidden=48)


def test_the_embedding_starts_as_the_targets_projected():
    target = make_model(1, prepare=False)
    draft = LlamaModel(like_config(target.config, hidden=64, layers=1))
    init_from_target(draft, target)
    emb = target.model.embed_tokens.weight
    # at the target's full width the projection is a rotation: every inner product is kept
    torch.testing.assert_close(draft.model.embed_tokens.weight @ draft.model.embed_tokens.weight.T,
                               emb @ emb.T, atol=1e-3, rtol=1e-3)
    assert draft.lm_head.weight is draft.model.embed_tokens.weight                     # tied
    narrow = projected_embedding(target, 16)
    assert narrow.shape == (8192, 16)


def test_a_draft_trains_resumes_and_drafts_for_its_target(chat_target, sharegpt, tmp_path, capsys):
    out, work = tmp_path / "draft", tmp_path / "work"
    assert _train(chat_target, out, work, "--tokens", str(2 * 256 * 2)) == 0               # 2 steps
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["step"] == 2 and (work / "chat-data.pt").exists()
    assert _train(chat_target, out, work, "--tokens", str(2 * 256 * 3), "--resume") == 0  # one more
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == 3
    card = (out / "README.md").read_text()
    assert "tokens trained: 1,536" in card and "ratio" in card
    assert load_tokenizer(out).tok.get_vocab() == load_tokenizer(chat_target).tok.get_vocab()
    assert load_tokenizer(out).chat_template == TEMPLATE
    models = load_models(chat_target, out)
    assert getattr(models.draft, "vocab_map", None) is None                          # the same vocabulary
    prompts = random_prompts(3, seed=4, hi=20)
    plain = Engine(models.target, SpecConfig(method="none", k=0), EngineConfig(max_batch=3, max_model_len=64))
    spec = Engine(models.target, SpecConfig(method="draft", k=3), EngineConfig(max_batch=3, max_model_len=64),
                  draft=models.draft)
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    assert [s.token_ids for s in spec.generate(prompts, params)] == [s.token_ids for s in plain.generate(prompts, params)]
    assert spec.metrics.num_draft_tokens > 0


def test_bad_targets_are_refused_with_one_line(chat_target, tmp_path, capsys):
    check_like_target(chat_target)
    no_tok = tmp_path / "no-tokenizer"
    save_checkpoint(make_model(0, prepare=False), TOKENIZER, no_tok, dtype=torch.float32)
    (no_tok / "tokenizer.json").unlink()
    plain = save_checkpoint(make_model(0, prepare=False), TOKENIZER, tmp_path / "no-template", dtype=torch.float32)
    cases = [([str(tmp_path / "nowhere")], "no such file"),
             ([str(tmp_path)], "not a checkpoint"),
             ([str(no_tok)], "no tokenizer.json"),
             ([str(plain)], "no chat template")]
    for like, message in cases:
        assert _train(like[0], tmp_path / "out", tmp_path / "w") == 2
        assert message in capsys.readouterr().err
    assert main(["train", "eagle", "--like", str(chat_target), "--out", str(tmp_path / "o")]) == 2
    assert "--like goes with `specdec train draft`" in capsys.readouterr().err
    assert main(["train", "draft", "--like", str(chat_target)]) == 2
    assert "--out" in capsys.readouterr().err


def test_more_chat_prompts_extend_the_cached_replies(chat_target, sharegpt, tmp_path, monkeypatch):
    """`--chat-prompts` above a cached run's: only the next prompts are answered, appended; the
    same or fewer: the cache as it is; fewer than one: refused."""
    from specdec.models.loader import load_model
    from specdec.train.eagle_command import chat_streams
    target, work, calls = load_model(chat_target), tmp_path / "work", []
    work.mkdir()
    real = chat_data.chat_generations

    def counted(target, prompts, seed, **kw):
        calls.append((len(prompts), seed))
        return real(target, prompts, seed, new_tokens=8)
    monkeypatch.setattr(chat_data, "chat_generations", counted)
    first, _ = chat_streams(chat_target, 0, target, work, 3)
    more, what = chat_streams(chat_target, 0, target, work, 5)
    assert calls == [(3, 0), (2, 3)] and more["prompts"] == 5 and "to 5 of them" in what
    assert torch.equal(more["gen"][:len(first["gen"])], first["gen"]) and len(more["gen"]) > len(first["gen"])
    assert torch.equal(more["text"], first["text"]) and more["new_tokens"] > first["new_tokens"]
    again, _ = chat_streams(chat_target, 0, target, work, 4)
    assert len(calls) == 2 and torch.equal(again["gen"], more["gen"])
    with pytest.raises(ConfigError, match="--chat-prompts"):
        chat_streams(chat_target, 0, target, tmp_path / "other", 0)
