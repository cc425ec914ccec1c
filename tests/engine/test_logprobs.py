"""Log-probabilities of emitted tokens come from the verify forward and equal the target's
log_softmax at those tokens, for plain and speculative decoding alike."""
import pytest
import torch

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.errors import ConfigError
from tests.conftest import perturbed, random_prompts


def _run(target, draft, spec, prompts, params):
    eng = Engine(target, spec, EngineConfig(max_batch=4, max_model_len=128), draft=draft)
    return eng.generate(prompts, params)


def _reference(target, seq):
    """log_softmax of one fresh full forward over prompt + output, at each output token."""
    ids = torch.tensor([seq.token_ids])
    with torch.inference_mode():
        logits = target(ids, torch.arange(ids.shape[1])[None])[0]                     # (L, V)
    lp = torch.log_softmax(logits.float(), -1)
    P = seq.prompt_len
    return lp[P - 1:len(seq.token_ids) - 1], lp[torch.arange(P - 1, len(seq.token_ids) - 1), seq.output_ids]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logprobs_are_the_targets_log_softmax(tiny_target, temperature):
    draft = perturbed(tiny_target, 0.02)
    prompts = random_prompts(6, seed=4, lo=3, hi=20)
    params = [SamplingParams(temperature=temperature, seed=i, max_new_tokens=10, ignore_eos=True, logprobs=3)
              for i in range(6)]
    plain = _run(tiny_target, None, SpecConfig(method="none", k=0), prompts, params)
    spec = _run(tiny_target, draft, SpecConfig(method="draft", k=3), prompts, params)
    tree = _run(tiny_target, perturbed(tiny_target, 0.05), SpecConfig(method="draft", k=3, tree=8), prompts, params)
    for seqs in (plain, spec, tree):
        for s in seqs:
            full, chosen = _reference(tiny_target, s)
            assert len(s.logprobs) == s.num_output == 10
            got = torch.tensor([lp for lp, _ in s.logprobs])
            assert torch.allclose(got, chosen, atol=1e-5), (got - chosen).abs().max()
            for j, (_, alts) in enumerate(s.logprobs):
                ids = [i for i, _ in alts]
                assert ids == full[j].topk(3).indices.tolist()
                assert torch.allclose(torch.tensor([v for _, v in alts]), full[j].topk(3).values, atol=1e-5)
    if temperature == 0:    # the verify forward's logits are plain decoding's, bit for bit
        assert [s.logprobs for s in spec] == [s.logprobs for s in plain]


def test_without_the_option_nothing_is_recorded(tiny_target):
    s = _run(tiny_target, None, SpecConfig(method="none", k=0), [[5, 6, 7]],
             [SamplingParams(max_new_tokens=4, ignore_eos=True)])[0]
    assert s.logprobs == []


@pytest.mark.parametrize("bad", [-1, 21, True, 1.5])
def test_logprobs_is_validated(bad):
    with pytest.raises(ConfigError, match="logprobs"):
        SamplingParams(logprobs=bad)
