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
from ..models.tree import MAX_TREE, block_layout
from ..proposers import create as create_proposer
from ..proposers.base import Draft, Proposer
from ..verify.coupling import CoupledNoise
from ..verify.sampling import BatchSampling
from .admission import first_tokens, prefill
from .logprobs import emitted_logprobs
from .metrics import EngineMetrics, record_row
from .policy import KPolicy, simple_policy
from .round import RoundResult
from .sequence import Sequence, Status
from .validation import check_params, check_request
from .verification import plain_next, verify_round, verify_tree


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
        self.proposer = proposer or create_proposer(
            spec.method if spec.k != 0 else "none", target, spec,
            draft_model=draft, rows=config.max_batch, max_len=self.cache_len, head=head)
        self.policy = policy or simple_policy(spec)
        self.eos_ids = target.config.eos_ids
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.finished: dict[int, Sequence] = {}
        self.metrics = EngineMetrics()
        self._no_draft = torch.zeros(config.max_batch, 0, dtype=torch.long)             # (B, 0)
        self._sampling: BatchSampling | None = None
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
        self._retire()

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def collect_finished(self) -> list[Sequence]:
        out = list(self.finished.values())
        self.finished.clear()
        return out

    # ---- the loop ---------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[Sequence]:
        """Run one round for the whole batch; return the sequences that received tokens."""
        t0 = time.perf_counter()
        for seq in self.running:
            seq.new_tokens, seq.new_logprobs = [], []
        # 1. Admit waiting requests into free rows; prefill gives each its first token.
        #    A step that admits does only that, so first tokens reach callers without delay.
        admitted = self._admit()
        if admitted or not self.running:
            return admitted
        batch = Batch(self.running, self._batch_sampling(), draining=not self.waiting)
        B = len(batch)
        # 2. Choose k for this round (fixed, heuristic or from the cost model).
        self.proposer.plan(batch)
        k = self.policy.choose(batch)
        # 3. Propose up to k tokens per row.
        draft = self.proposer.propose(batch, k) if k > 0 else Draft(self._no_draft[:B], lengths=[0] * B)
        key = self.proposer.cost_key()
        num_draft = draft.num_tokens()
        caps = self.policy.row_caps()
        if caps is not None:
            num_draft = [min(n, c) for n, c in zip(num_draft, caps)]
        kk = draft.tokens.shape[1]
        # 4. One target forward over [pending, d_1..d_k] for every row. Inputs are built on
        #    the host from lists: two small tensors, not a chain of cat/arange/clamp ops. A
        #    greedy batch has the forward compute its argmaxes too.
        dev = self.device
        draft_rows = draft.tokens.tolist() if kk else [[] for _ in batch]
        last = self.cache_len - 1
        tokens = torch.tensor([[s.token_ids[-1]] + d for s, d in zip(batch, draft_rows)], device=dev)  # (B, k+1)
        tree = None
        if draft.parents is None:
            pos_rows = [[min(n + j, last) for j in range(kk + 1)] for n in self.cache.lengths[:B]]
        else:      # a token tree: positions by depth, slots by node, attention along branches
            pos_rows, tree = block_layout(self.cache.lengths[:B], draft.parents, kk + 1)
        positions = torch.tensor(pos_rows, device=dev)                                  # (B, k+1)
        sampling = batch.sampling
        best = (torch.empty(B, kk + 1, dtype=torch.long, device=dev)
                if sampling.all_argmax and not sampling.any_coupled and not sampling.processed
                else None)                                                               # (B, k+1)
        hidden = (torch.empty(B, kk + 1, self.target.config.hidden_size, device=dev)
                  if self.proposer.uses_features else None)            # (B, k+1, d) a feature head's input
        logits = self.target(tokens, positions, self.cache, argmax_out=best, tree=tree, hidden_out=hidden)
        target_argmax = best.tolist() if best is not None else None                     # the host sync
        # 5. Verify: accepted prefix per row and the recovered/bonus token. A plain round
        #    (no drafts) only picks the next token. chosen[b][j]: the position output j fills.
        chosen = [[len(s.token_ids) + j for j in range(kk + 1)] for s in batch]
        runner = self.target.runner
        next_ids = plain_next(logits, target_argmax, sampling, chosen, runner) if kk == 0 else None
        beta, paths = None, None
        if next_ids is not None:
            accepted = [0] * B
        elif draft.parents is not None:                    # a tree: the accepted branch per row
            paths, next_ids = verify_tree(logits, target_argmax, draft, draft_rows, sampling)
            accepted, draft.paths = [len(path) for path in paths], paths
        else:
            accepted, next_ids, beta = verify_round(logits, target_argmax, draft, draft_rows, num_draft,
                                                    sampling, chosen, self.policy.wants_accept_prob, runner)
        # 6. Commit: advance the cache past the accepted drafts and the new token (the
        #    rejected drafts' entries stay beyond the row's length, masked: the rollback),
        #    append the tokens, check stop conditions. A tree's branch first moves to chain slots.
        paths = paths or [list(range(n)) for n in accepted]
        inputs = [[0] + [j + 1 for j in path] for path in paths]      # the block inputs kept, per row
        if draft.parents is not None:                      # a chain's branch is already in place
            self.cache.keep_path(inputs)
        emitted = [[draft_rows[b][j] for j in paths[b]] + [next_ids[b]] for b in range(B)]
        tops = [s.params.logprobs for s in batch]
        lps = emitted_logprobs(logits, emitted, tops, inputs) if any(t is not None for t in tops) else [None] * B
        for b, seq in enumerate(batch):
            n = accepted[b]
            self.cache.advance(b, 1 + n)
            seq.append(emitted[b], lps[b])
            record_row(self.metrics, seq, num_draft[b], n, k, paths[b], draft.parents and draft.parents[b])
            self.metrics.generated_tokens += len(seq.new_tokens)
        # 7. The proposer rolls back to the accepted prefix (a feature head takes the target's
        #    features of the kept inputs first); the policy learns from the round.
        if hidden is not None:
            self.proposer.take_features(list(range(B)), [hidden[b, inputs[b]] for b in range(B)])
        self.proposer.rollback(accepted)
        dt = time.perf_counter() - t0
        result = RoundResult(batch, k, key, num_draft, accepted, dt, accept_prob=beta, emitted=emitted)
        self.policy.observe(result)
        if self.on_round is not None:
            self.on_round(result)
        self.metrics.target_forwards += 1
        self.metrics.steps += 1
        self.metrics.step_time_s += dt
        self.metrics.k_hist[k] = self.metrics.k_hist.get(k, 0) + 1
        for seq in batch:
            if seq.finished:
                self._finish(seq, seq.finish_reason)
        # 8. Free the rows of finished requests.
        self._retire()
        return list(batch)

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
            seq.row = base + len(live)
            if seq.row != base + i:
                self.cache.move_row(base + i, seq.row)
            live.append(seq)
            kept.append(i)
        self.running += live
        if feats is not None:
            self.proposer.take_features([s.row for s in live], [feats[i] for i in kept])
        self.proposer.start_rows([s.row for s in live], live)
        for seq in live:
            self.policy.start(seq.row, seq)
        self._sampling = None
        return seqs

    def _finish(self, seq: Sequence, reason: str | None) -> None:
        seq.status, seq.finish_reason = Status.FINISHED, reason or seq.finish_reason
        if seq.stats.t_end is None:
            seq.stats.t_end = time.perf_counter()
        self.finished[seq.id] = seq

    def _retire(self) -> None:
        """Drop finished rows, moving the last running row into each hole (rows stay [0, n)).
        Finished rows at the end are dropped first, so no finished row is ever moved."""
        i = 0
        while i < len(self.running):
            while self.running and self.running[-1].finished:
                self._drop(len(self.running) - 1)
            if i >= len(self.running) or not self.running[i].finished:
                i += 1
                continue
            last = len(self.running) - 1                  # running, since the loop above
            self.proposer.finish(i)
            self.policy.finish(i)
            self.cache.move_row(last, i)
            self.proposer.move_row(last, i)
            self.policy.move_row(last, i)
            self.running[i] = self.running.pop()
            self.running[i].row = i
            self._sampling = None

    def _drop(self, row: int) -> None:
        """Free the last row."""
        self.proposer.finish(row)
        self.policy.finish(row)
        self.cache.reset(row)
        self.running.pop()
        self._sampling = None

    def _batch_sampling(self) -> BatchSampling:
        if self._sampling is None:
            self._sampling = BatchSampling([s.params for s in self.running],
                                           [s.generator for s in self.running], self.device,
                                           [s.noise for s in self.running], self.running)
        return self._sampling

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
