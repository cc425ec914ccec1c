"""Speculative sampling draws exactly from the target's processed distribution.

chi^2 of N seeded 3-token continuations against the exact joint law of the next 3 tokens
(V = 5: 125 cells), enumerated from the target's own forwards with temperature, top-k and
top-p applied independently of specdec's sampler. Every proposer (draft model, layer-skip,
n-gram, suffix), three temperatures, top-k, top-p and a batch mixing greedy rows in. The
negative controls run the real engine with a deliberately broken verifier passed in (or a
10% temperature error) and must be caught by the same test.
"""
from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

import specdec.engine.verification as verification
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.verify.greedy import accepted_prefix
from specdec.models.native.forward import NativeForward
from specdec.verify.rejection import acceptance_probability, rejection_verify
from specdec.verify.sampling import probs_from_logits, sample
from tests.conftest import make_model, perturbed, priced_rounds

N = 20000               # continuations per test of a correct sampler (the floor)
N_CONTROL = 8000        # per negative control: each bug measured p < 1e-29 at this size
V, NEW = 5, 3
PROMPT = [2, 3, 4, 2, 3]   # repeats itself, so the n-gram and suffix proposers find matches
P_MIN = 1e-3            # the threshold: a correct sampler fails 1 run in 1,000
OPTIONS = {"draft": {}, "layerskip": {"layerskip_layers": 1}, "ngram": {"ngram_min": 1}, "suffix": {}}


@pytest.fixture(scope="module")
def pair():
    target = make_model(3, std=0.5, vocab=V)
    # a draft that is rejected often: with a close draft (noise 0.3) rejections are rare and
    # the reused-uniform bug went unseen (p = 0.54 at N = 20,000)
    return target, perturbed(target, 1.0)


def _processed(logits: torch.Tensor, T: float, top_k: int, top_p: float) -> torch.Tensor:
    """softmax(logits / T) restricted to the top_k largest, then to the smallest prefix of
    the sorted rest whose mass before each kept token is < top_p (the top token always)."""
    p = torch.softmax(logits.double() / T, -1)
    order = p.argsort(descending=True)
    keep = torch.zeros(V, dtype=torch.bool)
    keep[order[:top_k or V]] = True
    p = torch.where(keep, p, 0.0)
    p = p / p.sum()
    mass = 0.0
    for rank, i in enumerate(order.tolist()):
        if rank > 0 and mass >= top_p:
            p[i] = 0.0
        mass += float(p[i])
    return p / p.sum()


def exact_law(model, T=1.0, top_k=0, top_p=1.0) -> torch.Tensor:
    """(V**3,) the joint law of the next three tokens after PROMPT."""
    def p_next(ctx):
        with torch.inference_mode():
            lg = model(torch.tensor([ctx]), torch.arange(len(ctx))[None])[0, -1]
        return _processed(lg, T, top_k, top_p)
    law = torch.zeros(V, V, V, dtype=torch.float64)
    p1 = p_next(PROMPT)
    for a in range(V):
        p2 = p_next(PROMPT + [a])
        for b in range(V):
            law[a, b] = p1[a] * p2[b] * p_next(PROMPT + [a, b])
    return law.flatten()


def sampled(pair, method, T=1.0, top_k=0, top_p=1.0, greedy_every=0, n=N, tree=0, adaptive=False):
    """Counts (V**3,) of n continuations; every `greedy_every`-th request is greedy (left out
    of the counts: it shares the batch only). tree: a node budget (trees of depth 2); adaptive:
    k chosen every round by k = auto from a cold start (the round table learnt online)."""
    target, draft = pair
    eng = Engine(target, SpecConfig(method=method, k=2, options=OPTIONS.get(method, {}), tree=tree),
                 EngineConfig(max_batch=256, max_model_len=32), draft=draft if method in ("draft", "parallel") else None)
    if adaptive:
        eng.policy = cold_policy(eng.proposer)
    greedy = [greedy_every and i % greedy_every == 0 for i in range(n)]
    params = [SamplingParams(temperature=0.0 if g else T, top_k=top_k, top_p=top_p, seed=i,
                             max_new_tokens=NEW, ignore_eos=True) for i, g in enumerate(greedy)]
    seqs = eng.generate([PROMPT] * n, params)
    idx = torch.tensor([a * V * V + b * V + c for s, g in zip(seqs, greedy) if not g for a, b, c in [s.output_ids]])
    if method != "none":
        m = eng.metrics
        assert 0 < m.num_accepted_tokens < m.num_draft_tokens, "the test must see acceptances and rejections"
    return torch.bincount(idx, minlength=V ** 3).double()


def p_value(counts: torch.Tensor, law: torch.Tensor) -> float:
    """chi^2 p-value; 0 when a continuation the law forbids (top-k/top-p) was drawn."""
    n = counts.sum()
    if counts[law == 0].sum() > 0:
        return 0.0
    keep, rare = law * n >= 5, (law > 0) & (law * n < 5)      # pool the rare cells
    obs = torch.cat([counts[keep], counts[rare].sum()[None]])
    exp = torch.cat([law[keep], law[rare].sum()[None]]) * n
    if not rare.any():
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue)


@pytest.mark.parametrize("method,T,top_k,top_p", [
    ("draft", 0.7, 0, 1.0), ("draft", 1.0, 0, 1.0), ("draft", 1.3, 0, 1.0),
    ("draft", 1.0, 3, 1.0), ("draft", 1.0, 0, 0.8),
    ("layerskip", 1.0, 0, 1.0), ("ngram", 1.0, 0, 1.0), ("suffix", 1.0, 0, 1.0), ("ngram", 0.7, 2, 0.9),
])
def test_speculative_sampling_follows_the_exact_law(pair, method, T, top_k, top_p):
    assert p_value(sampled(pair, method, T, top_k, top_p), exact_law(pair[0], T, top_k, top_p)) > P_MIN


def cold_policy(proposer):
    """k = auto as a cold start builds it (build.make_policy): a prior of forwards alone (here
    synthetic, drafting priced cheap) and an online table fed by the engine's real rounds."""
    from specdec.adaptive.online import OnlineRounds
    from specdec.adaptive.policy import AdaptiveK
    from tests.synthetic_costs import synthetic_cost_model
    prior = synthetic_cost_model(lambda b, q, L: 1e-3 + 1e-6 * b * q, {"draft:draft": lambda b, L: 1e-5}, k_max=2)
    return AdaptiveK(2, proposer, prior, OnlineRounds(prior, persist=False))


def test_the_online_adaptive_policy_samples_exactly(pair):
    """Each round's k from the online round table and the acceptance estimates, both fed only
    by the rounds before it (timed by the engine): the law stays exact. A closer draft (noise
    0.3) than the controls' makes drafting and plain rounds both worth choosing."""
    target = pair[0]
    counts = sampled((target, perturbed(target, 0.3)), "draft", adaptive=True)
    assert p_value(counts, exact_law(target)) > P_MIN


@pytest.mark.parametrize("T", [0.7, 1.3])
def test_tree_sampling_follows_the_exact_law(pair, T):
    """The tree rule's engine path at the same N as the chains, at a sharpened and a flattened
    law (T = 1's trees run in test_auto_rounds_of_every_kind_sample_exactly; 14 s a case on Zen 3)."""
    assert p_value(sampled(pair, "draft", T, tree=4), exact_law(pair[0], T)) > P_MIN


def test_auto_rounds_of_every_kind_sample_exactly(pair):
    """`--tree auto` under sampling picks a plain step, a chain or a tree per round from measured
    rates (tree_size.py); priced so that all three run in turn, the law stays exact."""
    from specdec.proposers.draft_tree import DraftTreeProposer
    target, draft = pair
    prop = DraftTreeProposer(draft, 256, 32, "auto", cost=lambda b, q: 1.0)
    priced_rounds(prop, tree=1.0, chain=1.0, none=1.0)        # equal prices: the drafts lead, trees are tried
    kinds, choose = [], prop.auto_size.choose
    prop.auto_size.choose = lambda *a: kinds.append(choose(*a)) or kinds[-1]
    eng = Engine(target, SpecConfig(method="draft", k=2, tree="auto"), EngineConfig(max_batch=256, max_model_len=32),
                 draft=draft, proposer=prop)
    params = [SamplingParams(temperature=1.0, seed=i, max_new_tokens=NEW, ignore_eos=True) for i in range(N)]
    seqs = eng.generate([PROMPT] * N, params)
    idx = torch.tensor([a * V * V + b * V + c for s in seqs for a, b, c in [s.output_ids]])
    assert {"none", "chain", "tree"} <= set(kinds), kinds
    assert p_value(torch.bincount(idx, minlength=V ** 3).double(), exact_law(target, 1.0)) > P_MIN


def test_a_batch_mixing_greedy_rows_samples_exactly(pair):
    assert p_value(sampled(pair, "draft", greedy_every=4), exact_law(pair[0])) > P_MIN


# ---- negative controls: each known bug must fail the test above -------------------------------

def _recover_from_p(p, q, draft_tokens, num_draft, u_accept, u_sample):
    """Bug: at a rejection, resample from p itself instead of norm(max(0, p - q))."""
    B, k = draft_tokens.shape
    p_x = p[:, :k].gather(2, draft_tokens[:, :, None]).squeeze(2)
    q_x = torch.ones_like(p_x) if q is None else q.gather(2, draft_tokens[:, :, None]).squeeze(2)
    n = accepted_prefix(u_accept * q_x < p_x, num_draft)
    return n, sample(p.gather(1, n[:, None, None].expand(B, 1, p.shape[2])).squeeze(1), u_sample)


def _reused_uniform(p, q, draft_tokens, num_draft, u_accept, u_sample):
    """Bug: the recovered token is drawn with the rejected position's acceptance uniform."""
    k = draft_tokens.shape[1]
    p_x = p[:, :k].gather(2, draft_tokens[:, :, None]).squeeze(2)
    q_x = torch.ones_like(p_x) if q is None else q.gather(2, draft_tokens[:, :, None]).squeeze(2)
    n = accepted_prefix(u_accept * q_x < p_x, num_draft)
    reused = u_accept.gather(1, n.clamp(max=k - 1)[:, None]).squeeze(1)
    return rejection_verify(p, q, draft_tokens, num_draft, u_accept, torch.where(n < num_draft, reused, u_sample))


def _as_native(bug):
    """The bug in the compiled verifier's place (NativeForward.verify_sample, which the engine
    runs for temperature-only batches; tests/models/test_native_verify.py pins its rule to
    rejection_verify's), so that the control breaks whichever path the engine takes."""
    def verify_sample(self, logits, temperature, drafts, q, num_draft, uniforms, want_beta):
        k = drafts.shape[1]
        p = probs_from_logits(logits, temperature)
        n, nxt = bug(p, q, drafts, torch.tensor(num_draft), uniforms[:, :k], uniforms[:, k])
        beta = acceptance_probability(p, q, drafts).tolist() if want_beta and k else None
        return n.tolist(), nxt.tolist(), beta
    return verify_sample


@pytest.mark.parametrize("bug", [_recover_from_p, _reused_uniform])
@pytest.mark.parametrize("method", ["draft", "layerskip", "ngram", "suffix"])
def test_negative_control_a_broken_verifier_fails(pair, monkeypatch, method, bug):
    monkeypatch.setattr(verification, "rejection_verify", bug)
    monkeypatch.setattr(NativeForward, "verify_sample", _as_native(bug))
    assert p_value(sampled(pair, method, n=N_CONTROL), exact_law(pair[0])) < P_MIN


def test_negative_control_a_10_percent_temperature_error_fails(pair):
    assert p_value(sampled(pair, "draft", T=1.1, n=N_CONTROL), exact_law(pair[0], T=1.0)) < P_MIN


def _tree_without_residual(p, q, tokens, parents, u):
    """Bug: every sibling is tested against p itself (no residual after a rejection)."""
    paths, nexts = [], []
    for b, (toks, par) in enumerate(zip(tokens, parents)):
        cur, path = -1, []
        while True:
            kids = [j for j, pj in enumerate(par) if pj == cur]
            hit = next((j for j in kids if u[b, j] < p[b, cur + 1, toks[j]]), None)
            if hit is None:
                break
            path.append(hit)
            cur = hit
        paths.append(path)
        nexts.append(int(sample(p[b, cur + 1][None], u[b, -1:])[0]))
    return paths, nexts


def test_negative_control_a_broken_tree_verifier_fails(pair, monkeypatch):
    monkeypatch.setattr(verification, "tree_rejection", _tree_without_residual)
    assert p_value(sampled(pair, "draft", tree=4, n=N_CONTROL), exact_law(pair[0])) < P_MIN
