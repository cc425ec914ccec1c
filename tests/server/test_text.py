"""Incremental detokenization with stop strings, and the default chat template."""
from __future__ import annotations

import pytest

from specdec.defaults import bundled_dir
from specdec.models.tokenizer import Tokenizer
from specdec.server.text import ChatFormatter, TextStream, default_chat_prompt

TOK = Tokenizer.from_file(bundled_dir() / "tokenizer.json")
TEXT = "def área(x):\n    return x * 2  # ünïcode ✓\n\nprint(área(3))\n"


@pytest.mark.parametrize("stop", [None, "return", "\n\n", "✓", "3))"])
def test_token_by_token_deltas_equal_text_cut_at_stop(stop):
    ids = TOK.encode(TEXT, bos=False)
    s = TextStream(TOK, [stop] if stop else [])
    out = ""
    for t in ids:
        delta = s.push([t])
        assert "\ufffd" not in delta
        out += delta
        if s.stopped:
            break
    out += s.flush()
    want = TEXT if stop is None else TEXT[:TEXT.index(stop)]
    assert out == want and s.stopped == (stop is not None)


def test_default_chat_template_and_checkpoint_template(tmp_path):
    msgs = [("system", "Be brief."), ("user", "Hi")]
    assert default_chat_prompt(msgs) == "System: Be brief.\nUser: Hi\nAssistant:"
    assert ChatFormatter(TOK, None).encode(msgs) == TOK.encode("System: Be brief.\nUser: Hi\nAssistant:")
    (tmp_path / "tokenizer_config.json").write_text(
        '{"bos_token": "<s>", "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]'
        '{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}')
    f = ChatFormatter(TOK, tmp_path)
    assert f.kind == "checkpoint"
    assert f.encode(msgs) == TOK.encode("[system]Be brief.[user]Hi[assistant]")   # one BOS, not two
