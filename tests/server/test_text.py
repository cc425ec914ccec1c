"""Incremental detokenization with stop strings, and chat templates on the bundled tokenizer."""
from __future__ import annotations

import pytest

from specdec.defaults import bundled_dir
from specdec.models.tokenizer import Tokenizer
from specdec.models.chat_template import ChatTemplate, default_chat_prompt
from specdec.models.loader import load_tokenizer
from specdec.server.text import TextStream

TOK = Tokenizer.from_file(bundled_dir() / "tokenizer.json")
TEXT = "def área(x):\n    return x * 2  # ünïcode ✓\n\nprint(área(3))\n"


@pytest.mark.parametrize("stop", [None, "return", "\n\n", "✓", "3))"])
def test_token_by_token_deltas_equal_text_cut_at_stop(stop):
    ids = TOK.encode(TEXT, add_special_tokens=False)
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
    assert default_chat_prompt([{"role": r, "content": c} for r, c in msgs]) == "System: Be brief.\nUser: Hi\nAssistant:"
    assert ChatTemplate(TOK).encode(msgs) == TOK.encode("System: Be brief.\nUser: Hi\nAssistant:")
    assert ChatTemplate(TOK).kind == "default"
    (tmp_path / "tokenizer.json").write_text((bundled_dir() / "tokenizer.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(
        '{"bos_token": "<s>", "add_bos_token": true, "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]'
        '{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}')
    f = ChatTemplate(load_tokenizer(tmp_path))
    assert f.kind == "checkpoint"
    assert f.encode(msgs) == TOK.encode("[system]Be brief.[user]Hi[assistant]")   # one BOS, not two
    assert f.encode(msgs).count(TOK.bos_id) == 1


def test_a_chat_template_file_overrides_the_checkpoints():
    from specdec.errors import ConfigError
    f = ChatTemplate(TOK, "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}>>")
    assert f.kind == "--chat-template"
    assert f.encode([("user", "Hi")]) == TOK.encode("<user>Hi>>", add_special_tokens=False)
    with pytest.raises(ConfigError, match=r"--chat-template: not a valid Jinja template \(line 1"):
        ChatTemplate(TOK, "{% for m in messages %}unclosed")


@pytest.mark.parametrize("content, says", [("{% if %}", "not a valid Jinja template"), (None, "cannot read")])
def test_serve_refuses_a_bad_chat_template_file_at_startup(tmp_path, content, says):
    import subprocess
    import sys
    path = tmp_path / "t.jinja"
    if content is not None:
        path.write_text(content)
    r = subprocess.run([sys.executable, "-m", "specdec.cli", "serve", "--chat-template", str(path), "--port", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and says in r.stderr and str(path) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_the_server_renders_chat_with_the_template_file(tiny_models):
    import httpx
    from liveserver import live_server
    tmpl = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}[reply]"
    with live_server(tiny_models, model_name="tiny", chat_template=tmpl) as (url, _):
        r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hello"}],
                                                            "max_tokens": 2})
        assert r.json()["usage"]["prompt_tokens"] == len(TOK.encode("[user]hello[reply]", add_special_tokens=False))
