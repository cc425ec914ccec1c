"""Seeds: the same seed reproduces a sampled output with a fixed k, alone and batched; other
seeds give other outputs; sampling differs from greedy. (k = "auto" reproduces under the
invariant coupling: test_coupling.py.)"""
import pytest

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from tests.conftest import perturbed, random_prompts

PROMPTS = random_prompts(12, seed=8, lo=3, hi=20)


def _outputs(target, draft, k, params, max_batch, order=None):
    eng = Engine(target, SpecConfig(method="draft" if k else "none", k=k),
                 EngineConfig(max_batch=max_batch, max_model_len=128), draft=draft if k else None)
    order = order or list(range(len(PROMPTS)))
    seqs = eng.generate([PROMPTS[i] for i in order], [params[i] for i in order])
    out = [None] * len(PROMPTS)
    for i, s in zip(order, seqs):
        out[i] = s.output_ids
    return out


@pytest.mark.parametrize("k", [0, 3])
def test_a_seed_reproduces_alone_and_batched(tiny_target, k):
    draft = perturbed(tiny_target, 0.02)
    params = [SamplingParams(temperature=1.0, top_p=0.95, seed=100 + i, max_new_tokens=12, ignore_eos=True)
              for i in range(len(PROMPTS))]
    alone = _outputs(tiny_target, draft, k, params, 1)
    assert _outputs(tiny_target, draft, k, params, 1) == alone
    assert _outputs(tiny_target, draft, k, params, 6, order=list(reversed(range(len(PROMPTS))))) == alone


def test_other_seeds_and_greedy_give_other_outputs(tiny_target):
    draft = perturbed(tiny_target, 0.02)
    mk = lambda seed, t=1.0: [SamplingParams(temperature=t, seed=seed + i, max_new_tokens=12, ignore_eos=True)  # noqa: E731
                              for i in range(len(PROMPTS))]
    a = _outputs(tiny_target, draft, 3, mk(100), 4)
    b = _outputs(tiny_target, draft, 3, mk(500), 4)
    greedy = _outputs(tiny_target, draft, 3, mk(100, 0.0), 4)
    assert sum(x != y for x, y in zip(a, b)) >= 10          # 12 prompts: nearly all differ
    assert sum(x != g for x, g in zip(a, greedy)) >= 10
