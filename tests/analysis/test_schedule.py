"""k by batch size: the KTable format, the table policy, and the sweep's prediction against a
synthetic server whose optimum is known in closed form."""
from __future__ import annotations

import json
import math

import pytest

from specdec.analysis import schedule as S
from specdec.analysis import sweep
from specdec.config import KTable, SpecConfig
from specdec.engine.policy import TableK, simple_policy
from specdec.errors import ConfigError

ALPHA = 0.75        # the synthetic server accepts each draft position with this probability


def slope(c: int) -> float:
    """The synthetic server's round cost per draft token, in plain steps: linear in log c, so
    the sweep's interpolation between levels is exact and the optimum is known everywhere."""
    return 0.08 + 0.12 * math.log(c)


def tokens(k: int) -> float:
    return sum(ALPHA ** j for j in range(k + 1))


def analytic_best(c: int, k_max: int) -> int:
    return max(range(k_max + 1), key=lambda k: tokens(k) / (1 + slope(c) * k))


class SyntheticServer:
    """Endpoint's contract with a fixed per-step latency and acceptance: a plain step at
    concurrency c takes 10 ms * (1 + c / 8), a round of k drafts (1 + slope(c) k) plain steps,
    and every draft position is accepted with probability ALPHA (expected counts, no noise)."""
    def __init__(self, per_request: bool = True, k_server: int = 3):
        self.per_request, self.k_server, self.calls = per_request, k_server, []

    def supports_speculative(self) -> bool:
        return self.per_request

    async def run(self, prompts, max_tokens, spec, concurrency):
        k = 0 if spec and spec.get("method") == "none" else (spec or {}).get("k", self.k_server)
        self.calls.append((concurrency, k))
        step = 0.010 * (1 + concurrency / 8)
        n_tokens = len(prompts) * max_tokens
        rounds = n_tokens / tokens(k)
        wall = rounds / concurrency * step * (1 + slope(concurrency) * k)
        drafts = rounds if k else 0
        per_pos = [drafts * ALPHA ** (j + 1) for j in range(k)]
        return {"completion_tokens": n_tokens, "wall_s": wall, "tokens_per_s": n_tokens / wall,
                "drafts": drafts, "draft_tokens": drafts * k, "accepted_tokens": sum(per_pos),
                "per_position_acceptance": [p / drafts for p in per_pos] if drafts else []}


# many tokens per cell: the acceptance intervals are narrow, so the rule's caution (draft only
# where the interval stays above 1) changes no row whose gain is clear
SETTINGS = {"concurrencies": [1, 4, 16], "ks": [1, 2, 3, 5, 6], "method": None, "max_tokens": 20000, "n": 4}


def test_emitted_rows_equal_the_analytic_optimum(tmp_path):
    ep = SyntheticServer()
    cells = sweep.sweep(ep, None, {"code": ["a", "b", "c", "d"]}, SETTINGS, None, lambda s: None)
    cfg = sweep.write_emit(cells, {"method": "draft_model", "model": "d"}, tmp_path, None)
    table = KTable.from_vllm(cfg["num_speculative_tokens_per_batch_size"])
    want = [analytic_best(b, 6) for b in range(1, 17)]
    assert [table.k_for(b) for b in range(1, 17)] == want
    assert len(set(want)) > 2, "the synthetic costs should move the optimum across batch sizes"
    side = json.loads((tmp_path / "schedule.json").read_text())
    for row in side["per_batch"]:
        k = row["k"]
        assert row["speedup"] == pytest.approx(tokens(k) / (1 + slope(row["batch"]) * k), rel=1e-9)
        assert row["low"] <= row["speedup"] <= row["high"]
    assert "| 1-" in (tmp_path / "vllm_config.md").read_text()


def test_the_sweep_measures_the_fit_first_and_stops_at_the_budget(monkeypatch):
    assert sweep.plan([1, 4], [1, 3, 5]) == [(1, 0), (1, 5), (4, 0), (4, 5), (1, 3), (4, 3), (1, 1), (4, 1)]

    class Slow(SyntheticServer):
        async def run(self, *a):
            r = await super().run(*a)
            clock[0] += 10.0
            return r
    clock = [0.0]
    monkeypatch.setattr(sweep.time, "perf_counter", lambda: clock[0])
    cells = sweep.sweep(Slow(), None, {"w": ["a"]}, {**SETTINGS, "concurrencies": [1, 4]}, 35.0, lambda s: None)
    assert [(c.concurrency, c.k) for c in cells] == [(1, 0), (1, 6), (4, 0)]


def test_a_server_at_one_k_and_a_plain_baseline_give_one_cell_per_level():
    ep, base = SyntheticServer(per_request=False, k_server=3), SyntheticServer(per_request=False, k_server=0)
    cells = sweep.sweep(ep, base, {"w": ["a", "b"]}, SETTINGS, None, lambda s: None)
    assert sorted((c.concurrency, c.k) for c in cells) == [(1, 0), (1, 3), (4, 0), (4, 3), (16, 0), (16, 3)]
    table, _ = S.schedule(cells)
    assert [table.k_for(b) for b in (1, 4, 16)] == [analytic_best(b, 3) for b in (1, 4, 16)]
    with pytest.raises(ConfigError, match="endpoint-baseline"):
        sweep.sweep(ep, None, {"w": ["a"]}, SETTINGS, None, lambda s: None)


def test_the_emitted_json_has_vllms_shape():
    cells = sweep.sweep(SyntheticServer(), None, {"w": ["a"]}, SETTINGS, None, lambda s: None)
    cfg = sweep.write_emit(cells, {"method": "draft_model", "model": "d"}, None, None)
    sched = cfg["num_speculative_tokens_per_batch_size"]
    assert cfg["method"] == "draft_model" and isinstance(cfg["num_speculative_tokens"], int)
    ranges = []
    for key, k in sched.items():
        lo, hi = (int(x) for x in key.split("-"))        # inclusive "lo-hi"
        assert type(k) is int and 0 <= k <= cfg["num_speculative_tokens"]
        ranges.append((lo, hi))
    assert ranges[0][0] == 1 and all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))
    json.dumps(cfg)


def test_a_gain_within_the_noise_does_not_draft():
    """At concurrency 256 the best k gains 0.3%, less than its interval: that row stays plain."""
    few = {**SETTINGS, "max_tokens": 8, "concurrencies": [1, 256]}
    cells = sweep.sweep(SyntheticServer(), None, {"w": ["a"]}, few, None, lambda s: None)
    table, rows = S.schedule(cells)
    assert table.k_for(1) == analytic_best(1, 6) and table.k_for(256) == 0
    assert analytic_best(256, 6) == 1 and tokens(1) / (1 + slope(256)) > 1.0   # a tiny gain, left alone
    assert all(r["low"] >= 1.0 for r in rows)


def test_a_table_that_never_drafts_emits_null():
    never = [S.Cell(1, 0, 100.0), S.Cell(1, 2, 50.0, 10, (1.0, 0.0))]
    assert sweep.write_emit(never, {"method": "ngram"}, None, None) is None


def test_ktable_reads_vllms_mapping_and_keeps_its_gap_rule(tmp_path):
    t = KTable.from_vllm({"1-16": 3, "64-128": 2, "256-4096": 0})
    assert [t.k_for(b) for b in (1, 16, 17, 63, 64, 128, 200, 256, 9999)] == [3, 3, 3, 3, 2, 2, 2, 0, 0]
    assert t.to_vllm() == {"1-16": 3, "64-128": 2, "256-4096": 0} and t.max_k == 3
    assert KTable.from_vllm({"1": 2, "2-8": 1}).rows == ((1, 1, 2), (2, 8, 1))
    full = tmp_path / "cfg.json"
    full.write_text(json.dumps({"method": "ngram", "num_speculative_tokens": 3,
                                "num_speculative_tokens_per_batch_size": {"1-4": 3, "5-8": 1}}))
    assert KTable.read(full).rows == ((1, 4, 3), (5, 8, 1))
    bare = tmp_path / "bare.json"
    bare.write_text('{"1-2": 1}')
    assert KTable.read(bare).rows == ((1, 2, 1),)


@pytest.mark.parametrize("bad, msg", [
    ({}, "non-empty"), ({"1-4": 2, "3-8": 1}, "non-overlapping"), ({"2-4": 1}, "start at batch size 1"),
    ({"1-x": 1}, "not a batch range"), ({"1-4": 99}, "0..16"), ({"1-4": "3"}, "integers"),
    ({"4-1": 1}, "lo <= hi"), ([1, 2], "mapping")])
def test_ktable_refuses_bad_tables(bad, msg):
    with pytest.raises(ConfigError, match=msg):
        KTable.from_vllm(bad)


def test_ktable_read_errors_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        KTable.read(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read"):
        KTable.read(broken)


def test_the_table_policy_drafts_by_running_rows():
    spec = SpecConfig(method="draft", k=KTable(((1, 2, 4), (3, 8, 1), (9, 64, 0))))
    assert spec.k_max >= 4
    policy = simple_policy(spec)
    assert isinstance(policy, TableK)
    assert [policy.choose([None] * b) for b in (1, 2, 3, 8, 9, 30)] == [4, 4, 1, 1, 0, 0]
    assert hash(spec) == hash(SpecConfig(method="draft", k=KTable(((1, 2, 4), (3, 8, 1), (9, 64, 0)))))


def test_k_table_flag(tmp_path):
    import argparse
    from specdec.commands.common import add_method_args, spec_from_args
    p = argparse.ArgumentParser()
    add_method_args(p)
    f = tmp_path / "t.json"
    f.write_text('{"1-4": 2, "5-8": 0}')
    spec = spec_from_args(p.parse_args(["--k-table", str(f)]), has_draft=True)
    assert spec.k == KTable(((1, 4, 2), (5, 8, 0)))
    assert spec_from_args(p.parse_args([]), has_draft=True).k == "auto"
    with pytest.raises(ConfigError, match="mutually exclusive"):
        spec_from_args(p.parse_args(["--k", "3", "--k-table", str(f)]), has_draft=True)
