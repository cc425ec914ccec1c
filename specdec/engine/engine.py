"""The engine: continuous batching around one verify forward per step.

    engine = Engine(target, SpecConfig(method="draft", k=4), EngineConfig(), draft=draft_model)
    seq_id = engine.add_request(prompt_ids, SamplingParams(max_new_tokens=64))
    while engine.has_unfinished():
        engine.step()                       # returns the sequences that got tokens
    engine.collect_finished()

Invariant: for a running sequence, the target cache holds every token but the last
(`seq.token_ids[-1]`, the "pending" token), which the next verify forward feeds first.
The running batch is always cache rows [0, n): finished rows are compacted away.
"""
from __future__ import annotations

import time
import warnings
from collections import deque
from dataclasses import replace
from typing import Callable

import torch

from ..batch import Batch
from ..config import EngineConfig, SamplingParams, SpecConfig
from ..errors import ConfigError
from ..models.llama import LlamaModel, padded
from ..models.tree import MAX_TREE
from ..proposers import create as create_proposer
from ..proposers.base import Draft, Proposer
from ..verify.coupling import CoupledNoise
from .admission import first_tokens, prefill
from .logprobs import emitted_logprobs
from .metrics import EngineMetrics, record_row
from .policy import KPolicy, simple_policy
from .round import Proposal, RoundResult, Verdict
from .rows import RowTable
from .sequence import Sequence, Status
from .validation import check_params, check_request
from .verification import block_inputs, verify


def cache_length(config: EngineConfig, spec: SpecConfig) -> int:
    """Cache slots per row: the context plus a round's drafts and bonus token (a request near
    its limit still verifies a full block), rounded up to whole attention blocks."""
    slack = max(spec.k_max, MAX_TREE if spec.tree else 0) + 2     # a tree's draft levels span <= MAX_TREE slots
    return padded(config.max_model_len + slack)


class Engine:
    def __init__(self, target: LlamaModel, spec: SpecConfig = SpecConfig(method="none", k=0),
                 config: EngineConfig = EngineConfig(), draft: LlamaModel | None = None,
                 proposer: Proposer | None = None, policy: KPolicy | None = None, head=None):
        """`proposer` defaults to `spec.method` built from the registry (with `draft` as its
        model, `head` as a feature head's weights); `policy` to the fixed or heuristic k of
        `spec` (k = "auto" needs one passed in: specdec.build makes it). Nothing here measures
        the machine."""
        self.target, self.spec, self.config = target, spec, config
        self.device = target.device
        if config.max_model_len > target.config.max_position_embeddings:
            raise ConfigError(f"max_model_len {config.max_model_len} exceeds the model's context length "
                              f"{target.config.max_position_embeddings}")
        if spec.tree and not target.runner.exact_trees:
            # eager tree attention rounds differently from a chain: greedy would not be exact
            warnings.warn("token trees need the compiled decoder (models/native); drafting chains", stacklevel=2)
            self.spec = spec = replace(spec, tree=0)
        self.cache_len = cache_length(config, spec)
        self.cache = target.new_cache(config.max_batch, self.cache_len)
        # the running rows: the cache's, the proposer's and the policy's state of each request
        self.rows = RowTable(self.cache, proposer or create_proposer(
            spec.method if spec.k != 0 else "none", target, spec,
            draft_model=draft, rows=config.max_batch, max_len=self.cache_len, head=head),
            policy or simple_policy(spec), self.device)
        self.eos_ids = target.config.eos_ids
        self.waiting: deque[Sequence] = deque()
        self.finished: dict[int, Sequence] = {}
        self.metrics = EngineMetrics()
        self._no_draft = torch.zeros(config.max_batch, 0, dtype=torch.long)             # (B, 0)
        # called with every decode round's RoundResult after the policy saw it (None: nothing
        # is called); for tools that show rounds (generate --show-rounds, trace)
        self.on_round: Callable[[RoundResult], None] | None = None

    # ---- requests -------------------------------------------------------------------------
    def add_request(self, prompt_ids: list[int], params: SamplingParams = SamplingParams()) -> Sequence:
        """Queue a request. Raises PromptError for an empty or over-long prompt."""
        V = self.target.config.vocab_size
        check_request(prompt_ids, params.max_new_tokens, V, self.config.max_model_len)
        check_params(params, V)
        seq = Sequence(prompt_ids, params, self.eos_ids)
        if params.coupled:
            seq.noise = CoupledNoise(seq.seed, V)
        self.waiting.append(seq)
        return seq

    def abort(self, seq_id: int) -> None:
        """Stop a request now; its cache row is freed at the next step boundary."""
        for seq in list(self.waiting):
            if seq.id == seq_id:
                self.waiting.remove(seq)
                self._finish(seq, "abort")
        for seq in self.running:
            if seq.id == seq_id and not seq.finished:
                self._finish(seq, "abort")
        self.rows.retire()

    @property
    def running(self) -> list[Sequence]:
        """The running sequences, row i = running[i] (the row table's)."""
        return self.rows.seqs

    @property
    def proposer(self) -> Proposer:
        """Drafts each round; keeps per-row state in the row table's rows."""
        return self.rows.proposer

    @proposer.setter
    def proposer(self, proposer: Proposer) -> None:
        self.rows.proposer = proposer

    @property
    def policy(self) -> KPolicy:
        """Chooses k each round; keeps per-row state in the row table's rows."""
        return self.rows.policy

    @policy.setter
    def policy(self, policy: KPolicy) -> None:
        self.rows.policy = policy

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def collect_finished(self) -> list[Sequence]:
        out = list(self.finished.values())
        self.finished.clear()
        return out

    # ---- the loop ---------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[Sequence]:
        """Run one round for the whole batch; return the sequences that received tokens.
        schedule (admit, choose k) -> propose -> verify -> commit (append, roll back, record)."""
        t0 = time.perf_counter()
        for seq in self.running:
            seq.new_tokens, seq.new_logprobs = [], []
        admitted = self._admit()       # a step that admits does only that: first tokens reach callers at once
        if admitted or not self.running:
            return admitted
        batch, k = self._schedule()
        proposal = self._propose(batch, k)
        verdict = self._verify(batch, proposal)
        self._commit(batch, k, proposal, verdict, t0)
        self.rows.retire()
        return list(batch)

    def _schedule(self) -> tuple[Batch, int]:
        """The running rows as this round's batch, and k: fixed, heuristic or from the cost
        model (the proposer plans first, so that its cost key describes this round)."""
        batch = self.rows.batch(draining=not self.waiting)
        self.proposer.plan(batch)
        return batch, self.policy.choose(batch)

    def _propose(self, batch: Batch, k: int) -> Proposal:
        """Up to k drafts per row (a chain or a token tree), capped per row by the policy."""
        B = len(batch)
        draft = self.proposer.propose(batch, k) if k > 0 else Draft(self._no_draft[:B], lengths=[0] * B)
        num_draft, caps = draft.num_tokens(), self.policy.row_caps()
        if caps is not None:
            num_draft = [min(n, c) for n, c in zip(num_draft, caps)]
        rows = draft.tokens.tolist() if draft.tokens.shape[1] else [[] for _ in batch]
        return Proposal(draft, rows, num_draft, self.proposer.cost_key())

    def _verify(self, batch: Batch, proposal: Proposal) -> Verdict:
        """One target forward over [pending, d_1..d_kk] for every row, then the accepted path
        and the recovered or bonus token per row (verification.py). A greedy batch has the
        forward compute its argmaxes too; a feature head gets the final hidden states."""
        B, kk, dev, s = len(batch), proposal.draft.tokens.shape[1], self.device, batch.sampling
        tokens, positions, tree = block_inputs(batch, self.cache.lengths[:B], proposal.draft, proposal.rows,
                                               self.cache_len - 1, dev)                  # (B, kk+1) each
        greedy = s.fused_argmax
        best = torch.empty(B, kk + 1, dtype=torch.long, device=dev) if greedy else None   # (B, kk+1)
        hidden = (torch.empty(B, kk + 1, self.target.config.hidden_size, device=dev)
                  if self.proposer.uses_features else None)                              # (B, kk+1, d)
        logits = self.target(tokens, positions, self.cache, argmax_out=best, tree=tree, hidden_out=hidden)
        chosen = [[len(seq.token_ids) + j for j in range(kk + 1)] for seq in batch]   # the positions outputs fill
        accepted, nxt, paths, beta = verify(logits, best.tolist() if best is not None else None, proposal, s,
                                            chosen, self.policy.wants_accept_prob, self.target.runner)
        return Verdict(accepted, nxt, paths, beta, logits, hidden)

    def _commit(self, batch: Batch, k: int, proposal: Proposal, v: Verdict, t0: float) -> None:
        """Advance the cache past each row's accepted path and new token (a tree's branch first
        moves to chain slots; rejected entries stay past the row's length, masked: the
        rollback), append the tokens, roll the proposer back, record the round."""
        draft, B = proposal.draft, len(batch)
        draft.paths = v.paths if draft.parents is not None else None
        inputs = [[0] + [j + 1 for j in path] for path in v.paths]          # the block inputs kept, per row
        self.cache.keep_path(inputs)                                        # a chain's are in place already
        emitted = [[proposal.rows[b][j] for j in v.paths[b]] + [v.next_ids[b]] for b in range(B)]
        tops = [seq.params.logprobs for seq in batch]
        lps = emitted_logprobs(v.logits, emitted, tops, inputs) if any(t is not None for t in tops) else [None] * B
        for b, seq in enumerate(batch):
            self.cache.advance(b, 1 + v.accepted[b])
            seq.append(emitted[b], lps[b])
            record_row(self.metrics, seq, proposal.num_draft[b], v.accepted[b], k, v.paths[b],
                       draft.parents and draft.parents[b])
            self.metrics.generated_tokens += len(seq.new_tokens)
        if v.hidden is not None:       # a feature head takes the target's features of the kept inputs
            self.proposer.take_features(list(range(B)), [v.hidden[b, inputs[b]] for b in range(B)])
        self.proposer.rollback(v.accepted)
        dt = time.perf_counter() - t0
        result = RoundResult(batch, k, proposal.cost_key, proposal.num_draft, v.accepted, dt,
                             accept_prob=v.beta, emitted=emitted)
        self.policy.observe(result)
        if self.on_round is not None:
            self.on_round(result)
        self.metrics.record_round(k, dt)
        for seq in batch:
            if seq.finished:
                self._finish(seq, seq.finish_reason)

    # ---- admission and retirement ------------------------------------------------------------
    def _admit(self) -> list[Sequence]:
        """Prefill waiting requests into free rows (admission.py); a request finished by its
        first token leaves at once, and the others close up to keep rows [0, n)."""
        free = min(len(self.waiting), self.config.max_batch - len(self.running))
        seqs, base = [self.waiting.popleft() for _ in range(free)], len(self.running)
        if not seqs:
            return []
        feats = [] if self.proposer.uses_features else None              # each prompt's (P, d)
        logits, forwards = prefill(self.target, self.cache, [s.token_ids for s in seqs], base, feats)
        self.metrics.target_forwards += forwards
        live, kept = [], []
        for i, (seq, (first, lps)) in enumerate(zip(seqs, first_tokens(seqs, logits, self.device))):
            seq.status = Status.RUNNING
            seq.stats.target_forwards += 1
            seq.append([first], lps)
            self.metrics.generated_tokens += len(seq.new_tokens)
            if seq.finished:
                self._finish(seq, seq.finish_reason)
                self.cache.reset(base + i)
                continue
            if base + len(live) != base + i:          # not started anywhere yet: its prefill moves alone
                self.cache.move_row(base + i, base + len(live))
            live.append(seq)
            kept.append(i)
        if feats is not None:
            self.proposer.take_features([base + j for j in range(len(live))], [feats[i] for i in kept])
        self.rows.add(live)
        return seqs

    def _finish(self, seq: Sequence, reason: str | None) -> None:
        seq.status, seq.finish_reason = Status.FINISHED, reason or seq.finish_reason
        if seq.stats.t_end is None:
            seq.stats.t_end = time.perf_counter()
        self.finished[seq.id] = seq

    # ---- convenience ---------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams] = SamplingParams(),
                 on_step=None) -> list[Sequence]:
        """Run `prompts` to completion (continuous batching) and return them in order."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        seqs = [self.add_request(p, sp) for p, sp in zip(prompts, plist)]
        while self.has_unfinished():
            out = self.step()
            if on_step:
                on_step(out)
        self.collect_finished()
        return seqs
