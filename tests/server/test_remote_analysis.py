"""`specdec analyze --endpoint` against specdec's own live server, and the vLLM config."""
from __future__ import annotations

import json

import pytest

from specdec.analysis.endpoint import parse_metrics, percentile
from specdec.analysis.remote import emit_vllm_config, recommend
from specdec.cli import main
from specdec.errors import ConfigError


def test_analyze_endpoint_on_live_server(server, tmp_path, capsys):
    url, app = server
    rc = main(["analyze", "--endpoint", url, "--workload", "code", "--k", "2", "--remote-prompts", "3",
               "--max-new-tokens", "8", "--prompt-tokens", "16", "--concurrency", "2",
               "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr()
    payload = json.loads((tmp_path / "remote.json").read_text())
    res = payload["results"]
    assert set(res) == {"off", "k=2", "auto"}      # auto: see test_auto_speculation_request
    off, on = res["off"]["code"], res["k=2"]["code"]
    for r in (off, on):
        assert r["requests"] == 3 and r["completion_tokens"] == 24 and r["tokens_per_s"] > 0
        assert 0 < r["latency_p50_s"] <= r["latency_p99_s"]
    assert off["draft_tokens"] == 0 and off["drafts"] == 0
    assert on["drafts"] > 0 and on["draft_tokens"] <= 2 * on["drafts"]
    assert 0 <= on["acceptance_rate"] <= 1 and 1 <= on["mean_acceptance_length"] <= 3
    assert "| k=2 | code |" in out.out


def test_emit_and_check_a_k_table_on_live_server(server, tmp_path, capsys):
    """The sweep over two concurrency levels emits vLLM's table, and --check-config replays it."""
    url, _ = server
    common = ["--endpoint", url, "--workload", "code", "--remote-prompts", "2", "--max-new-tokens", "8",
              "--prompt-tokens", "16", "--vllm-draft-model", "org/draft"]
    assert main(["analyze", *common, "--k", "1,2", "--concurrency", "1,2", "--emit-vllm-config",
                 "--out", str(tmp_path)]) == 0
    cfg = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    side = json.loads((tmp_path / "schedule.json").read_text())
    assert sorted((c["concurrency"], c["k"]) for c in side["cells"]) == [(1, 0), (1, 1), (1, 2),
                                                                         (2, 0), (2, 1), (2, 2)]
    assert [r["batch"] for r in side["per_batch"]] == [1, 2]
    if cfg is None:                       # speculation predicted to lose at both levels
        assert all(r["k"] == 0 for r in side["per_batch"])
        return
    assert cfg["method"] == "draft_model" and cfg["model"] == "org/draft"
    assert cfg["num_speculative_tokens"] == max(cfg["num_speculative_tokens_per_batch_size"].values())
    assert main(["analyze", *common, "--check-config", str(tmp_path / "vllm_config.json"),
                 "--out", str(tmp_path / "check")]) == 0
    rows = json.loads((tmp_path / "check" / "check.json").read_text())
    assert {r["concurrency"] for r in rows} == {1, 2}
    assert all(r["table_vs_plain"] > 0 and (r["k"] == 0 or r["table_vs_fixed"] > 0) for r in rows)


def test_several_levels_without_emit_are_refused(tmp_path, capsys):
    assert main(["analyze", "--endpoint", "http://127.0.0.1:9", "--concurrency", "1,4", "--out", str(tmp_path)]) == 2
    assert "add --emit-vllm-config" in capsys.readouterr().err


def test_auto_speculation_request(server):
    import httpx
    r = httpx.post(server[0] + "/v1/completions", timeout=120, json={
        "prompt": "def f(x):", "max_tokens": 16, "temperature": 0, "ignore_eos": True,
        "speculative": {"method": "draft", "k": "auto"}})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 16


def test_recommend_picks_fastest_and_converts_auto_to_k():
    def r(tps, drafts=0, dtok=0):
        return {"tokens_per_s": tps, "drafts": drafts, "draft_tokens": dtok}
    res = {"off": {"a": r(10), "b": r(10)}, "k=2": {"a": r(12, 5, 10), "b": r(11, 5, 10)},
           "auto": {"a": r(15, 10, 31), "b": r(14, 10, 29)}}
    assert recommend(res, "draft") == {"mode": "auto", "speedup": pytest.approx((1.5 * 1.4) ** 0.5),
                                       "method": "draft", "k": 3}
    slow = {"off": {"a": r(10)}, "k=2": {"a": r(9, 5, 10)}}
    assert recommend(slow, "draft") is None


def test_emit_vllm_config():
    assert emit_vllm_config("ngram", 4, 2, 5) == {"method": "ngram", "num_speculative_tokens": 4,
                                                  "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    assert emit_vllm_config("draft", 3, draft_model="org/d")["model"] == "org/d"
    with pytest.raises(ConfigError):
        emit_vllm_config("layerskip", 3)
    with pytest.raises(ConfigError):
        emit_vllm_config("ngram", 0)


def test_parse_metrics_reads_vllm_exposition():
    text = ('# TYPE vllm:spec_decode_num_drafts counter\n'
            'vllm:spec_decode_num_drafts_total{model_name="m",engine="0"} 7.0\n'
            'vllm:spec_decode_num_drafts_total{model_name="m",engine="1"} 3.0\n'
            'vllm:spec_decode_num_drafts_created{model_name="m"} 1.7e9\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 4.0\n'
            'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 2.0\n')
    m = parse_metrics(text)
    assert m["vllm:spec_decode_num_drafts"] == 10 and m["per_pos"] == {1: 4.0}
    assert not any(k.endswith("_bucket") or k.endswith("_created") for k in m)
    assert percentile([3, 1, 2, 4], 50) == 2 and percentile([3, 1, 2, 4], 99) == 4


def test_two_endpoints_when_server_cannot_switch_per_request(server, monkeypatch):
    from specdec.analysis import remote
    monkeypatch.setattr(remote.Endpoint, "supports_speculative", lambda self: False)
    url, _ = server
    ep, base = remote.Endpoint(url, None, None), remote.Endpoint(url, None, "tiny")
    res = remote.measure(ep, base, {"w": ["def f(x):", "import os"]},
                         {"ks": [2], "method": None, "max_tokens": 6, "concurrency": 2})
    assert set(res) == {"on", "off"}
    for r in (res["on"]["w"], res["off"]["w"]):
        assert r["requests"] == 2 and r["completion_tokens"] == 12
    # no `speculative` field was sent, so both ran the server default (draft, k=3)
    assert res["on"]["w"]["drafts"] > 0 and res["off"]["w"]["drafts"] > 0


def test_check_config_serves_the_table_locally(tiny_dirs, tmp_path):
    """Without --endpoint, --check-config serves the local models with the table as their default."""
    t, d = tiny_dirs
    table = tmp_path / "k_table.json"
    table.write_text('{"num_speculative_tokens_per_batch_size": {"1-1": 2, "2-2": 0}}')
    assert main(["analyze", "--target", str(t), "--draft", str(d), "--workload", "code", "--remote-prompts", "2",
                 "--max-new-tokens", "6", "--prompt-tokens", "16", "--check-config", str(table),
                 "--out", str(tmp_path / "out")]) == 0
    rows = json.loads((tmp_path / "out" / "check.json").read_text())
    assert [(r["range"], r["k"], r["concurrency"]) for r in rows] == [("1-1", 2, 1), ("2-2", 0, 2)]
    assert rows[0]["table_vs_fixed"] > 0 and rows[1]["table_vs_fixed"] is None


class _Answer:
    """A loopback HTTP server that answers every request with one canned status and body."""

    def __init__(self, status: int, body: str):
        import http.server
        import threading
        answer = (status, body.encode())

        class Handler(http.server.BaseHTTPRequestHandler):
            def _reply(self):
                self.send_response(answer[0])
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(answer[1])
            do_GET = do_POST = _reply

            def log_message(self, *a):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def _refused_url() -> str:
    import socket
    with socket.socket() as s:            # a port nobody listens on once this socket closes
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("case, says", [
    ("refused", "/v1/models: ConnectError"),
    ("500", "/v1/models answered 500"),
    ("not json", "/v1/models did not answer JSON"),
    ("no model", "/v1/models lists no model"),
    ("other model", "serves other-model, not 'mine'"),
])
def test_a_bad_endpoint_is_one_line_and_exit_code_2(case, says, tmp_path, capsys):
    srv = None
    if case == "refused":
        url = _refused_url()
    else:
        status, body = {"500": (500, '{"error": "boom"}'), "not json": (200, "<html>"),
                        "no model": (200, '{"data": []}'),
                        "other model": (200, '{"data": [{"id": "other-model"}]}')}[case]
        srv = _Answer(status, body)
        url = srv.url
    try:
        rc = main(["analyze", "--endpoint", url, "--served-model", "mine", "--workload", "code",
                   "--remote-prompts", "1", "--max-new-tokens", "4", "--out", str(tmp_path)])
    finally:
        if srv is not None:
            srv.close()
    err = capsys.readouterr().err
    assert rc == 2 and says in err and url in err and "Traceback" not in err, err
