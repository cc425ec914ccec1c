"""`draft` with another tokenizer: a small model of any byte-level BPE family proposes for the target.

Each row keeps the committed text as bytes and the draft's own spelling of it (`_RowText`:
draft ids, each with the byte offset where it ends), and the draft's KV cache over those ids.
A round:

1. **Catch up** (`_sync`): the target tokens committed since the last round are appended to
   the text; the text from `BACKOFF` draft tokens before the end of the draft's history is
   re-encoded by the draft's tokenizer, and where that spelling departs from the history, the
   history and the cache are cut and the new tokens fed. Bytes that end inside a character
   wait as *lag* until the character is whole.
2. **Draft** (`CrossRule`, one `ModelRunner.draft` call for the batch):
   - argmax rows (greedy, coupled) draft freely; their bytes, past the lag, are re-tokenized
     by the target's tokenizer into the proposal (exact by construction: the target's argmax
     verifies it);
   - sampled rows draw every step from q = the draft's law restricted to the intersection
     vocabulary and renormalised (vocab_map.restrict), so each draft token *is* one target
     token and q is the law it was drawn from: min(1, p/q) verification is lossless
     (docs/how-it-works.md). A sampled row with lag proposes nothing.
3. **Roll back**: the draft keeps the proposed tokens that lie wholly inside the accepted text;
   the recovered or bonus token is caught up next round.

The host work (steps 1-3 outside the forwards) is timed per draft token: `host_seconds_per_token`,
which the cost model adds to each draft step (costs/cost_model.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
import math
import time

import torch

from ..batch import Batch, RowSlots
from ..costs.key import CostKey
from ..models.prefill import prefill_rows
from ..verify.sampling import probs_from_logits, sample
from .base import Draft, Proposer
from ..errors import ConfigError
from .vocab_map import VocabMap, restrict

BACKOFF = 2          # draft tokens re-encoded behind the history's end each round: BPE merges reach
                     # back across a token boundary (" re" + "turn" -> " return"); two covers the
                     # merges that span the newly committed text's first byte
MAX_STEPS_PER_TOKEN = 3.0   # cap on draft steps per target token proposed by argmax rows: a draft with a
                            # much smaller vocabulary spells a text in up to ~3x the tokens (the bundled
                            # tokenizer cut to 1000 tokens: 1.5x; the bundled draft under SmolLM2: 0.99)
GREEDY_MODES = ("retokenize", "shared")
HOST_PRIOR = 150e-6  # seconds of host work per draft token before any round is timed: the catch-up
                     # encode, the re-tokenization and the per-row bookkeeping (110-230 us measured on a
                     # Zen 4 with SmolLM2 and the bundled draft, benchmarks/cross_tokenizer.py)


@dataclass
class _RowText:
    """One row's committed text and the draft's spelling of it."""
    text: bytearray = field(default_factory=bytearray)   # the committed target tokens' bytes
    synced: int = 0                  # target tokens (of seq.token_ids) whose bytes are in text
    ids: list = field(default_factory=list)    # the draft's history: draft ids
    ends: list = field(default_factory=list)   # byte offset in text where each of ids ends
    prefix: int = 0                  # ids before the text (the draft's BOS)

    @property
    def covered(self) -> int:
        return self.ends[-1] if len(self.ends) > self.prefix else 0


@dataclass
class _Proposed:
    """A row's proposal this round: the draft ids it drafted with their ends, and the target
    tokens' byte lengths (what rollback needs to keep the accepted part)."""
    start: int                       # len(text) when proposed
    draft_ids: list
    draft_ends: list
    target_bytes: list


class CrossRule:
    """The round's picking rule for ModelRunner.draft over the draft's vocabulary: argmax rows
    take the draft's argmax, sampled rows draw from vocab_map.restrict(q) with the round's
    uniforms. pick returns (draft ids (B,), q over the target's vocabulary (B, V_target))."""

    def __init__(self, sampling, vmap: VocabMap, steps: int, shared_argmax: bool = False):
        self.s, self.vmap, self.shared_argmax = sampling, vmap, shared_argmax
        self.greedy = sampling.all_argmax and not shared_argmax     # the runner's fused argmax loop
        self.temperature = None                         # no fused sampling loop: the law is restricted
        self.uniforms = None if sampling.all_argmax else sampling.uniforms(steps)       # (B, steps)

    def pick(self, logits: torch.Tensor, i: int, before) -> tuple[torch.Tensor, torch.Tensor | None]:
        lg = logits[:, 0].float()                                                       # (B, V_draft)
        if self.shared_argmax:                                                          # argmax over the intersection
            best = self.vmap.shared_draft[lg[:, self.vmap.shared_draft].argmax(-1)]     # (B,)
        else:
            best = lg.argmax(-1)                                                        # (B,)
        if self.s.all_argmax:
            return best, None
        s = self.s
        q_draft = probs_from_logits(lg[:, None], s.temperature, s.top_k, s.top_p)[:, 0]   # (B, V_draft)
        q = restrict(q_draft, self.vmap)                                                # (B, V_target)
        shared = q[:, self.vmap.shared_target]                                          # (B, n)
        j = sample(shared, self.uniforms[:, i])                                         # (B,)
        tok = self.vmap.shared_draft[j]
        return torch.where(s.argmax_mask, best, tok), q


class CrossVocabProposer(Proposer):
    """Runs `model` (a LlamaModel with the draft's vocabulary) for a target whose vocabulary
    `vmap` relates to it (vocab_map.VocabMap)."""
    name = "draft"

    def __init__(self, model, vmap: VocabMap, rows: int, max_len: int, greedy: str = "retokenize"):
        """greedy: how argmax rows propose, "retokenize" (the draft's free text in the target's
        tokens) or "shared" (the argmax over the intersection, one draft token per target token)."""
        if greedy not in GREEDY_MODES:
            raise ConfigError(f"cross_greedy must be one of {', '.join(GREEDY_MODES)}, not {greedy!r}")
        self.model, self.vmap, self.num_layers, self.greedy_shared = model, vmap, None, greedy == "shared"
        self.cache = model.new_cache(rows, max_len)
        self.texts: RowSlots = RowSlots()              # row -> _RowText
        self._round: dict[int, _Proposed] | None = None
        self.steps_per_token = 1.0                     # draft tokens per target token, from the texts seen
        self.host_seconds = 0.0                        # host work so far (catch-up, re-tokenization)
        self.draft_tokens = 0                          # draft tokens drafted so far
        self.host_seconds_per_token = HOST_PRIOR

    def row_state(self):
        return [self.cache, self.texts]

    def start(self, row, seq):
        self.start_rows([row], [seq])

    def start_rows(self, rows, seqs):
        """The prompts' draft spellings, all but the last id prefilled into the draft cache."""
        t0 = time.perf_counter()
        for row, seq in zip(rows, seqs):
            self.cache.reset(row)
            r = self.texts[row] = _RowText(ids=list(self.vmap.draft.prefix), ends=[0] * len(self.vmap.draft.prefix),
                                           prefix=len(self.vmap.draft.prefix))
            self._sync(row, seq)
        self.host_seconds += time.perf_counter() - t0
        if rows:
            with torch.inference_mode():
                fits = [self.texts[r].ids[:-1] if len(self.texts[r].ids) < self.cache.max_len else [] for r in rows]
                prefill_rows(self.model, self.cache, fits, rows[0], hidden_only=True)   # a row too long never drafts

    def _sync(self, row: int, seq) -> None:
        """Append the target tokens committed since the last round to the row's text and re-spell
        the history's tail in draft tokens, cutting the cache where the spelling changed."""
        r = self.texts[row]
        new = seq.token_ids[r.synced:]
        r.text += self.vmap.target.text(new)
        r.synced = len(seq.token_ids)
        w = max(r.prefix, len(r.ids) - BACKOFF)
        start = r.ends[w - 1] if w > r.prefix else 0
        ids, ends = self.vmap.draft.encode(bytes(r.text[start:]))
        ends = [start + e for e in ends]
        d = 0
        while w + d < len(r.ids) and d < len(ids) and r.ids[w + d] == ids[d] and r.ends[w + d] == ends[d]:
            d += 1
        r.ids[w + d:], r.ends[w + d:] = ids[d:], ends[d:]
        if self.cache.lengths[row] > w + d:
            self.cache.truncate(row, w + d)
        if len(r.ids) > r.prefix and r.synced:
            self.steps_per_token = (len(r.ids) - r.prefix) / max(1, r.synced)

    @torch.inference_mode()
    def propose(self, batch: Batch, k: int) -> Draft:
        t0 = time.perf_counter()
        s, B = batch.sampling, len(batch)
        argmax = s.argmax_mask.tolist()
        steps = k                                      # sampled rows: one draft token per target token
        if any(argmax) and not self.greedy_shared:     # free text: as many as the target's k tokens need
            steps = max(k, min(math.ceil(k * self.steps_per_token), int(k * MAX_STEPS_PER_TOKEN)))
        feeds, room = [], []
        for b, seq in enumerate(batch):
            self._sync(b, seq)
            r = self.texts[b]
            if self.cache.lengths[b] >= len(r.ids):              # the last id is fed again for its logits
                self.cache.truncate(b, max(0, len(r.ids) - 1))
            room.append(0 < len(r.ids) and len(r.ids) + steps <= self.cache.max_len)
            if not room[b]:                                      # a full draft cache: this row stops drafting
                self.cache.reset(b)
            feeds.append(r.ids[self.cache.lengths[b]:] if room[b] else [0])
        T = max(len(f) for f in feeds)
        dev = self.model.device
        tokens = torch.tensor([f + [0] * (T - len(f)) for f in feeds], dtype=torch.long, device=dev)   # (B, T)
        start = torch.tensor(self.cache.lengths[:B], device=dev)
        positions = (start[:, None] + torch.arange(T, device=dev)).clamp_(max=self.cache.max_len - 1)  # (B, T)
        host = time.perf_counter() - t0
        rule = CrossRule(s, self.vmap, steps, self.greedy_shared)
        out, q = self.model.runner.draft(tokens, positions, [len(f) for f in feeds], steps, self.cache,
                                         rule)                        # (B, steps) draft ids, (B, steps, V_target)
        t0 = time.perf_counter()
        for b, f in enumerate(feeds):
            self.cache.advance(b, len(f) + steps - 1)
        drafted = out.tolist()
        self._round, rows = {}, []
        for b in range(B):
            r, ids = self.texts[b], drafted[b]
            free = argmax[b] and not self.greedy_shared
            prop = (self._retokenized(r, ids, k) if free else self._shared(r, ids, k)) if room[b] else None
            if prop is None:
                rows.append([])
                if room[b]:
                    self.cache.truncate(b, min(self.cache.lengths[b], len(r.ids)))
                else:
                    self.cache.reset(b)                          # what it fed was a placeholder
                continue
            self._round[b] = prop[0]
            rows.append(prop[1])
        draft = self._draft(rows, q, argmax, B)
        self.draft_tokens += B * steps
        self.host_seconds += host + time.perf_counter() - t0
        self.host_seconds_per_token = self.host_seconds / max(1, self.draft_tokens)
        return draft

    def _shared(self, r: _RowText, ids: list[int], k: int):
        """A sampled row's proposal: its k intersection tokens as target ids (none with lag)."""
        if r.covered != len(r.text):
            return None
        pieces = [self.vmap.draft.pieces[i] for i in ids[:k]]
        ends = [len(r.text) + e for e in _cumulative([len(p) for p in pieces])]
        tokens = self.vmap.draft_to_target[torch.tensor(ids[:k])].tolist()
        return _Proposed(len(r.text), ids[:k], ends, [len(p) for p in pieces]), tokens

    def _retokenized(self, r: _RowText, ids: list[int], k: int):
        """An argmax row's proposal: the draft's text past the lag, in the target's tokens (up to k)."""
        pieces = []
        for i in ids:
            if self.vmap.draft.pieces[i] is None:                 # a special token ends the draft's text
                break
            pieces.append(self.vmap.draft.pieces[i])
        data, lag = b"".join(pieces), bytes(r.text[r.covered:])
        if not data.startswith(lag):
            return None
        tokens, ends = self.vmap.target.encode(data[len(lag):])
        tokens, ends = tokens[:k], ends[:k]
        if not tokens:
            return None
        draft_ends = [r.covered + e for e in _cumulative([len(p) for p in pieces])]
        target_bytes = [b - a for a, b in zip([0] + ends, ends)]
        return _Proposed(len(r.text), ids[:len(pieces)], draft_ends, target_bytes), tokens

    def _draft(self, rows: list[list[int]], q: torch.Tensor | None, argmax: list[bool], B: int) -> Draft:
        """The target-side Draft: tokens (B, kk) padded with 0, q (B, kk, V_target) where rows
        sample (argmax rows: one-hot at their tokens, unread by their verification)."""
        kk = max((len(t) for t in rows), default=0)
        tokens = torch.tensor([t + [0] * (kk - len(t)) for t in rows], dtype=torch.long).reshape(B, kk)   # (B, kk)
        probs = None
        if q is not None and kk:
            probs = q[:, :kk].clone()                                                  # (B, kk, V_target)
            for b in range(B):
                if argmax[b]:
                    probs[b].zero_()
                    probs[b].scatter_(1, tokens[b][:, None], 1.0)
        return Draft(tokens=tokens, probs=probs, lengths=[len(t) for t in rows])

    def rollback(self, num_accepted):
        """Keep the drafted tokens that lie wholly inside the accepted text; cut the cache to them."""
        if self._round is None:
            return
        for b, prop in self._round.items():
            r = self.texts[b]
            end = prop.start + sum(prop.target_bytes[:num_accepted[b]])
            keep = sum(1 for e in prop.draft_ends if e <= end)
            r.ids += prop.draft_ids[:keep]
            r.ends += prop.draft_ends[:keep]
        for b in range(len(num_accepted)):
            if b in self.texts:
                self.cache.truncate(b, min(self.cache.lengths[b], len(self.texts[b].ids)))
        self._round = None

    def cost_key(self):
        return CostKey("draft", "cross")


def _cumulative(lengths: list[int]) -> list[int]:
    out, at = [], 0
    for n in lengths:
        at += n
        out.append(at)
    return out
