"""The chat data a feature head trains on: ShareGPT's training split only (never a held-out
conversation, which the chat benchmark prompts with), rendered through the target's template."""
from __future__ import annotations

import json

import numpy as np
import torch

from specdec.corpus import is_held_out
from specdec.models.chat_template import ChatTemplate
from specdec.models.tokenizer import Tokenizer, TokenizerRules
from specdec.train import chat_data
from specdec.train.data import Batches
from tests.conftest import TOKENIZER

TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}</s>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _ids(n_train: int, n_held: int) -> tuple[list[str], list[str]]:
    train, held, i = [], [], 0
    while len(train) < n_train or len(held) < n_held:
        cid = f"conv{i}"
        (held if is_held_out(cid) else train).append(cid)
        i += 1
    return train[:n_train], held[:n_held]


def _sharegpt(path, ids):
    """A ShareGPT file cut mid-element (as the packaged one is), a reply to every first turn
    but the one conversation that has none."""
    elems = [{"id": cid, "conversations": [{"from": "human", "value": f"question {cid}"},
                                           {"from": "gpt", "value": f"answer {cid} " * 3},
                                           {"from": "human", "value": "more"}]} for cid in ids]
    elems[0]["conversations"] = elems[0]["conversations"][:1]
    text = json.dumps(elems)
    path.write_text(text[:-40])                    # the last element is cut off
    return path


def _template():
    tok = Tokenizer.from_file(TOKENIZER, bos_id=0, eos_id=1, rules=TokenizerRules(chat_template=TEMPLATE))
    return ChatTemplate(tok)


def test_training_exchanges_leave_out_held_out_and_unanswered_conversations(tmp_path):
    train, held = _ids(6, 3)
    f = _sharegpt(tmp_path / "sg.json", train[:3] + held + train[3:])
    ex = chat_data.training_exchanges(f)
    got = [m[0]["content"].split()[1] for m in ex]
    assert got == train[1:5]                        # train[0]: no reply; train[5]: cut off; held: never
    assert all(not is_held_out(cid) for cid in got)
    assert [m["role"] for m in ex[0]] == ["user", "assistant"]     # the first turn and its reply only


def test_prompts_end_with_the_generation_prompt_and_replies_render_whole(tmp_path):
    train, _ = _ids(8, 0)
    ex = chat_data.training_exchanges(_sharegpt(tmp_path / "sg.json", train + ["pad"]))
    template = _template()
    prompts = chat_data.chat_prompts(template, ex, n=3, seed=0)
    assert len(prompts) == 3
    for p in prompts:
        text = template.tok.decode(p)
        assert text.startswith("<|user|>question") and text.endswith("<|assistant|>")
        assert "answer" not in text
    assert chat_data.chat_prompts(template, ex, n=3, seed=0, max_tokens=3) == []   # too long: skipped, not cut
    stream = chat_data.reply_stream(template, ex, n=2, seed=0)
    text = template.tok.decode(stream.tolist())
    assert text.count("<|user|>") == 2 and text.count("answer") == 6 and "<|assistant|>" in text


def test_batches_alternate_the_targets_replies_and_the_text():
    gen = Batches(np.full(600, 7, dtype=np.int64), 2, 16, 0)
    text = Batches(np.full(600, 9, dtype=np.int64), 2, 16, 1)
    fn = chat_data.chat_batches(gen, text, text_every=3)
    assert [int(fn(s)[0][0, 0]) for s in range(6)] == [9, 7, 7, 9, 7, 7]
    assert fn(1)[0].shape == (2, 16)
    assert chat_data.sequence_stream([[1, 2], [3]]).tolist() == [1, 2, 3]
    assert chat_data.coverage(np.array([1, 2, 3, 4]), torch.tensor([1, 2])) == 0.5
