"""`eagle` and `mtp`: a feature head drafts from the target's own hidden states.

One implementation, two sources of weights (models/head_loader.py): an EAGLE head trained on
the frozen target, or the MTP layer a checkpoint carries. Head entry j reads token j and the
feature of position j-1 (models/feature_head.py) and is cached in the head's own one-layer KV
cache at position j. Per row:

    head cache: entries 0..L-1, each built from a verified feature (the target's)
    pending:    the target's features of positions L-1 .. n-1 (n = the pending token's
                position), handed over by take_features, not yet fed
    propose:    feed entries L..n (one forward), then k-1 steps that feed each draft with the
                head's own output as its feature; rollback drops those k-1 entries (their
                features were the head's, not the target's), whatever was accepted
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from ..batch import Batch, RowSlots, prompt_runs
from ..costs.key import CostKey
from ..models.feature_head import FeatureHead, head_decoder
from ..models.quantize import quantize
from .base import Draft, Proposer
from .picking import pick


HEAD_DTYPE = "int8"  # the head's linears by default: a draft step streams the head's weight bytes, so
                     # 1-byte weights make each step cheaper while q barely moves (its numerics change q,
                     # never the output); figures: benchmarks/results/eagle/variants.md.
                     # eagle_dtype=float32 restores fp32


class FeatureHeadProposer(Proposer):
    uses_features = True

    def __init__(self, target, head: FeatureHead, rows: int, max_len: int, name: str = "eagle",
                 weights: str = HEAD_DTYPE, vocab_size: int | None = None):
        """weights: the head's linears as "float32", "int8" or "int4" (rounded on a
        copy: its numerics change q, never the output); vocab_size: score only the first (most
        frequent) tokens of the head's draft vocabulary."""
        self.target, self.head, self.name = target, head, name
        self.vocab = head.draft_vocab[:vocab_size].to(target.device)                   # (N,) token ids
        self.decoder = head_decoder(copy.deepcopy(head) if weights != "float32" else head,
                                    target.lm_head.dense_weight(), self.vocab)
        quantize(self.decoder, weights)
        if target.kernel is not None:
            self.decoder.prepare(target.kernel)         # the target's kernel: nothing is measured here
        self.full = len(self.vocab) == target.config.vocab_size and bool(
            (self.vocab == torch.arange(len(self.vocab), device=target.device)).all())
        # eh_proj([enorm(e), hnorm(f)]) = A e' + B hnorm(f): the token half is a table (V, d),
        # computed once, so a draft step's input is a lookup, one fused norm and one linear
        d = head.config.hidden_size
        with torch.no_grad():
            w = head.eh_proj.dense_weight().detach()                                     # (d, 2d)
            self._token_part = F.linear(head.enorm(target.model.embed_tokens.weight.detach()), w[:, :d])
            self._feature_proj = w[:, d:].contiguous()                                   # (d, d)
        self._proj_packed = self.decoder.runner.pack(self._feature_proj)   # None: no fused head loop
        self.cache = self.decoder.new_cache(rows, max_len)
        self.pending = RowSlots()                       # row -> (m, d) target features not yet fed
        self._committed: list[int] | None = None

    # ---- lifecycle ----------------------------------------------------------------------
    def take_features(self, rows, features):
        for row, f in zip(rows, features):
            old = self.pending.get(row)
            self.pending[row] = f if old is None else torch.cat([old, f])

    def start(self, row, seq):
        self.start_rows([row], [seq])

    def start_rows(self, rows, seqs):
        """Cache entries 0..P-1 of each prompt (token j with the feature of j-1; zeros before
        the first), one forward per run of equal lengths; the last feature stays pending."""
        d = self.head.config.hidden_size
        prompts = [seq.token_ids[:-1] for seq in seqs]     # the first output token is pending
        for i, j in prompt_runs([len(p) for p in prompts]):
            rs = rows[i:j]
            for row in rs:
                self.cache.reset(row)
            P = len(prompts[i])
            feats = [self.pending[r] for r in rs]                                       # (P, d) each
            if any(f.shape[0] != P for f in feats):
                raise ValueError("a prompt's features do not match its length")
            prev = torch.stack([torch.cat([f.new_zeros(1, d), f[:-1]]) for f in feats])  # (n, P, d)
            toks = torch.tensor(prompts[i:j], dtype=torch.long, device=self.target.device)  # (n, P)
            with torch.inference_mode():
                self._forward(toks, prev, None, self.cache.rows(rs[0], rs[-1] + 1))
            for r, f in zip(rs, feats):
                self.cache.advance(r, P)
                self.pending[r] = f[-1:]

    def row_state(self):
        return [self.cache, self.pending]

    # ---- drafting ------------------------------------------------------------------------
    def _forward(self, tokens, feats, positions, cache, hidden=None, tree=None):
        """The head over entries (tokens (B, T), features (B, T, d)) at `positions` (default
        0..T-1) -> logits over the draft vocabulary (B, T, N); `hidden` (B, T, d) gets the
        head's outputs (the next entries' features); `tree`: tree attention (models/tree.py)."""
        B, T = tokens.shape
        if positions is None:
            positions = torch.arange(T, device=tokens.device).expand(B, T).contiguous()
        hn = self.head.hnorm
        x = self._token_part[tokens] + F.linear(F.rms_norm(feats, hn.weight.shape, hn.weight, hn.eps),
                                                self._feature_proj)                     # (B, T, d)
        return self.decoder(tokens, positions, cache, embeds=x, hidden_out=hidden, tree=tree)

    def _full(self, logits):
        """(B, T, N) draft-vocabulary logits -> (B, T, V), -inf outside the draft vocabulary."""
        if self.full:
            return logits
        out = logits.new_full((*logits.shape[:-1], self.target.config.vocab_size), float("-inf"))
        out[..., self.vocab] = logits
        return out

    def _verified(self, context: Batch):
        """Every row's entries whose features are the target's (handed over since the last round),
        not yet fed -> (tokens (B, T) right-padded, features (B, T, d), entries per row)."""
        dev, d = self.target.device, self.head.config.hidden_size
        lens = self.cache.lengths
        feeds = [seq.token_ids[lens[b]:] for b, seq in enumerate(context)]
        for b, f in enumerate(feeds):
            have = self.pending[b].shape[0] if self.pending.get(b) is not None else 0
            if len(f) != have:
                raise RuntimeError(f"row {b}: {len(f)} entries to feed but {have} features")
        T = max(len(f) for f in feeds)
        tokens = torch.tensor([f + [0] * (T - len(f)) for f in feeds], dtype=torch.long, device=dev)  # (B, T)
        feats = torch.stack([torch.cat([self.pending.pop(b), torch.zeros(T - len(f), d, device=dev)])
                             for b, f in enumerate(feeds)])                                      # (B, T, d)
        return tokens, feats, [len(f) for f in feeds]

    def _draft_fused(self, feed, feats, n, start, steps, s, u, portable):
        """The whole round by the runner's fused head loop (models/native/head.py) from this
        proposer's tables, else `portable()` -> (tokens (B, steps), q)."""
        hn, sampled = self.head.hnorm, s.sampled
        return self.decoder.runner.head_draft(
            portable, feed, feats, torch.tensor(start), steps, self.cache, self._token_part, self._proj_packed,
            hn.weight.detach(), hn.eps, self.vocab, s.temperature if sampled else None, u if sampled else None,
            self.target.config.vocab_size, n_feed=n)

    def _feed(self, tokens, feats, n, start):
        """Feed the verified entries (tokens (B, T), features (B, T, d), n[b] per row, from
        cache slot start[b]) in one forward -> the last entry's logits (B, N) and output (B, d)."""
        B, T, dev = *tokens.shape, tokens.device
        positions = (torch.tensor(start, device=dev)[:, None] + torch.arange(T, device=dev)).clamp_(
            max=self.cache.max_len - 1)                                                        # (B, T)
        hidden = torch.empty(B, T, self.head.config.hidden_size, device=dev)
        logits = self._forward(tokens, feats, positions, self.cache, hidden)                    # (B, T, N)
        for b in range(B):
            self.cache.advance(b, n[b])
        last, rows = torch.tensor([m - 1 for m in n], device=dev), torch.arange(B)
        return logits[rows, last], hidden[rows, last]

    @torch.inference_mode()
    def propose(self, context: Batch, k: int) -> Draft:
        B = len(context)
        tokens, feats, n = self._verified(context)                               # (B, T), (B, T, d), (B,)
        start = list(self.cache.lengths[:B])                                     # where each row's entries go
        self._committed = [a + m for a, m in zip(start, n)]                     # rollback keeps these entries
        s, first = context.sampling, [len(seq.token_ids) for seq in context]      # first: draft 1's position
        u = None if s.all_argmax else s.uniforms(k)                                            # (B, k)
        greedy = s.fused_argmax
        loop = lambda: self._draft_loop(tokens, feats, n, start, k, s, u, first, greedy)  # noqa: E731
        if greedy or s.temperature_only:            # the whole round fused where the runner can
            out, q = self._draft_fused(tokens, feats, n, start, k, s, u, loop)         # (B, k), (B, k, V)
        else:
            out, q = loop()
        for b in range(B):                          # the verified entries and drafts 1..k-1, either way
            self.cache.advance(b, self._committed[b] + k - 1 - self.cache.lengths[b])
        return Draft(tokens=out, probs=q)

    def _draft_loop(self, tokens, feats, n, start, k, s, u, first, greedy):
        """The round step by step: feed the verified entries, then each draft with the head's own
        output as its feature -> (tokens (B, k), q (B, k, V) or None)."""
        B, dev, d = tokens.shape[0], self.target.device, self.head.config.hidden_size
        logits, h = self._feed(tokens, feats, n, start)                    # the verified entries, then a loop
        logits, h = logits[:, None], h[:, None]                                        # (B, 1, N), (B, 1, d)
        out, qs = [], []
        for i in range(k):                          # draft i+1 fills position first + i
            if greedy:                                  # argmax within the draft vocabulary
                tok = self.vocab[logits[:, 0].argmax(-1)]
            else:
                before = torch.stack(out, 1) if out and s.processed else None
                tok, q = pick(s, self._full(logits), [[t + i] for t in first], before, None if u is None else u[:, i])
                if q is not None:
                    qs.append(q)
            out.append(tok)
            if i < k - 1:                           # feed it, with the head's own output as its feature
                pos = torch.tensor([[min(t + i, self.cache.max_len - 1)] for t in first], device=dev)
                nxt = torch.empty(B, 1, d, device=dev)
                logits = self._forward(tok[:, None], h, pos, self.cache, nxt)                   # (B, 1, N)
                h = nxt
                for b in range(B):
                    self.cache.advance(b, 1)
        tokens = torch.stack(out, 1) if out else torch.zeros(B, 0, dtype=torch.long, device=dev)
        return tokens, torch.stack(qs, 1) if qs else None

    def rollback(self, num_accepted):
        if self._committed is None:        # no proposal this round (k = 0): nothing to drop
            return
        for b, n in enumerate(self._committed):
            self.cache.truncate(b, n)
        self._committed = None

    def cost_key(self):
        return CostKey(self.name)
