"""Retiring finished rows keeps the running rows [0, n) and never copies a finished row."""
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine.engine import Engine
from tests.conftest import random_prompts


def _engine(target, draft, rows, spec):
    """An engine whose caches log each move_row as (src, dst, was src's request finished)."""
    eng = Engine(target, spec, EngineConfig(max_batch=rows, max_model_len=128), draft=draft)
    moves = []
    for cache in (eng.cache, getattr(eng.proposer, "cache", None)):
        if cache is not None:
            def spy(src, dst, move=cache.move_row):
                moves.append((src, dst, eng.running[src].finished))
                move(src, dst)
            cache.move_row = spy
    return eng, moves


def test_a_batch_finishing_together_moves_no_row(tiny_target):
    eng, moves = _engine(tiny_target, None, 6, SpecConfig(method="none", k=0))
    seqs = eng.generate(random_prompts(6, seed=3), SamplingParams(max_new_tokens=9, ignore_eos=True))
    assert moves == [] and eng.running == [] and all(s.num_output == 9 for s in seqs)


def test_holes_are_filled_from_the_last_running_row(tiny_target):
    eng, moves = _engine(tiny_target, None, 6, SpecConfig(method="none", k=0))
    lengths = [3, 40, 3, 40, 40, 3]                # rows 0, 2 and 5 finish in the same step
    seqs = [eng.add_request(p, SamplingParams(max_new_tokens=n, ignore_eos=True))
            for p, n in zip(random_prompts(6, seed=4), lengths)]
    while not any(s.finished for s in seqs):
        eng.step()
    assert [s.row for s in eng.running] == [0, 1, 2]
    assert {id(s) for s in eng.running} == {id(s) for s in seqs if not s.finished}
    assert sorted((src, dst) for src, dst, _ in moves) == [(3, 2), (4, 0)]   # row 5 is dropped, not moved
    for b, s in enumerate(eng.running):            # a moved row keeps its cache: all but the pending token
        assert eng.cache.lengths[b] == len(s.token_ids) - 1


def test_speculative_rows_finishing_apart_move_only_running_rows(tiny_target, tiny_draft):
    eng, moves = _engine(tiny_target, tiny_draft, 5, SpecConfig(method="draft", k=3))
    lengths = [5, 30, 12, 7, 21, 9, 16]           # more requests than rows: later ones fill freed rows
    seqs = eng.generate(random_prompts(7, seed=5),
                        [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in lengths])
    assert moves and not any(finished for _, _, finished in moves)
    assert [s.num_output for s in seqs] == lengths and eng.running == []
