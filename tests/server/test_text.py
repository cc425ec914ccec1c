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


def test_a_chat_template_file_overrides_the_checkpoints(tmp_path):
    from specdec.errors import ConfigError
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{{ messages[0].content }}"}')
    f = ChatFormatter(TOK, tmp_path, template="{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}>>")
    assert f.kind == "--chat-template"
    assert f.encode([("user", "Hi")]) == TOK.encode("<user>Hi>>")
    with pytest.raises(ConfigError, match=r"--chat-template: not a valid Jinja template \(line 1"):
        ChatFormatter(TOK, None, template="{% for m in messages %}unclosed")


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
        assert r.json()["usage"]["prompt_tokens"] == len(TOK.encode("[user]hello[reply]"))
