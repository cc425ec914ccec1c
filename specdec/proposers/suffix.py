"""`suffix`: SuffixDecoding-style proposals from a suffix index with frequency counts.

The index is a depth-limited suffix tree (an uncompressed suffix trie of depth D): every
substring of length <= D of the indexed text is a path from the root, and each node
counts how often that substring occurs. Appending a token extends the <= D "active"
suffix nodes by one child each (O(D) per token), so the index grows online with the
output. Two indexes are consulted (as in SuffixDecoding, Oliaro et al. 2024):

- one per row over its own prompt + output, which catches up with the tokens the
  engine appended since the last call (so it stays in sync whoever proposed them);
- one global index over earlier requests' outputs, with bounded memory: the requests
  are kept in LRU order and the oldest is un-counted (nodes whose count hits 0 are
  freed) once more than `global_tokens` tokens are stored.

Proposal: take the longest suffix of the context (<= D - k tokens) that occurred before
with a continuation, then repeatedly follow the most frequent child (ties: the most
recently extended). Each step multiplies a score by the child's empirical frequency
count(child) / count(all continuations of the node); the proposal stops when the score
drops below `min_prob`, after ceil(alpha * match length) tokens, or at k. So a
continuation that was always seen after a long match is proposed in full, and a
branching or rarely-seen one yields a short proposal. The index whose proposal has the
larger expected accepted length (sum of the scores) wins.

With a tree budget (`--tree N`), the same index proposes a token tree instead of one path
(SuffixDecoding's speculation tree): the matched node's continuations are expanded best
first by score, the product of the frequencies along the path, so the N nodes kept are the
N likeliest continuations of depth <= k by the index's counts (docs/trees.md).
"""
from __future__ import annotations

import heapq
import math
from collections import OrderedDict

import numpy as np

from ..batch import RowSlots
from ..errors import ConfigError
from .base import Proposer, register
from .ngram import pack


class SuffixTrie:
    """Depth-limited suffix trie with occurrence counts; supports adding and removing text."""

    def __init__(self, depth: int):
        self.depth = depth
        self.kids: list[dict[int, int] | None] = [{}]   # node -> {token: child}
        self.count = [0]                                # occurrences of the node's string
        self.out = [0]                                  # occurrences followed by a token
        self.best = [-1]                                # most frequent child (recent on ties)
        self.free: list[int] = []

    def _new(self) -> int:
        if self.free:
            n = self.free.pop()
            self.kids[n], self.count[n], self.out[n], self.best[n] = {}, 0, 0, -1
            return n
        self.kids.append({}); self.count.append(0); self.out.append(0); self.best.append(-1)
        return len(self.count) - 1

    def extend(self, active: list[int], token: int) -> list[int]:
        """Append `token` to a text whose suffix nodes (depth 0..) are `active`; return the new ones."""
        new = [0]
        for node in active[:self.depth]:
            kids = self.kids[node]
            child = kids.get(token)
            if child is None:
                child = kids[token] = self._new()
            self.count[child] += 1
            self.out[node] += 1
            b = self.best[node]
            if b < 0 or self.count[child] >= self.count[b]:
                self.best[node] = child
            new.append(child)
        return new

    def add(self, tokens) -> None:
        active = [0]
        for t in tokens:
            active = self.extend(active, int(t))

    def remove(self, tokens) -> None:
        """Un-count every substring (length <= depth) of `tokens`, previously added by `add`."""
        tokens = [int(t) for t in tokens]
        for s in range(len(tokens)):
            node, dead = 0, []
            for t in tokens[s:s + self.depth]:
                child = self.kids[node][t]
                self.count[child] -= 1
                self.out[node] -= 1
                if self.count[child] == 0:              # its descendants reach 0 further down
                    del self.kids[node][t]
                    dead.append(child)
                if self.best[node] == child:
                    kids = self.kids[node]
                    self.best[node] = max(kids.values(), key=self.count.__getitem__, default=-1)
                node = child
            for n in dead:
                self.kids[n] = None
                self.free.append(n)

    def lookup(self, pattern) -> int:
        """The node of `pattern`, or -1."""
        node = 0
        for t in pattern:
            node = self.kids[node].get(int(t), -1)
            if node < 0:
                return -1
        return node

    def walk(self, node: int, match: int, k: int, alpha: float, min_prob: float):
        """Most frequent continuation of `node` -> (tokens, expected accepted length)."""
        limit = min(k, math.ceil(alpha * match))
        toks, score, expected = [], 1.0, 0.0
        while len(toks) < limit and self.out[node] > 0:
            child = self.best[node]
            score *= self.count[child] / self.out[node]
            if score < min_prob:
                break
            toks.append(next(t for t, c in self.kids[node].items() if c == child))
            expected += score
            node = child
        return toks, expected

    def expand(self, node: int, match: int, k: int, alpha: float, min_prob: float, budget: int):
        """The `budget` likeliest continuations of `node` as a token tree, best first ->
        (tokens, parents (-1: the root), expected accepted length). A node's score is the
        product of count(child) / out(parent) along its path (`walk`'s score), so a child
        never outscores its parent and parents come before their children."""
        limit = min(k, math.ceil(alpha * match))
        tokens: list[int] = []
        parents: list[int] = []
        expected = 0.0
        heap = [(-self.count[c] / self.out[node], c, t, -1, 1) for t, c in self.kids[node].items()]
        heapq.heapify(heap)                                  # (-score, trie node, token, parent, depth)
        while heap and len(tokens) < budget:
            neg, trie_node, tok, parent, depth = heapq.heappop(heap)
            if -neg < min_prob or depth > limit:
                continue
            index = len(tokens)
            tokens.append(tok)
            parents.append(parent)
            expected -= neg
            if depth < limit and self.out[trie_node] > 0:
                for t, c in self.kids[trie_node].items():
                    heapq.heappush(heap, (neg * self.count[c] / self.out[trie_node], c, t, index, depth + 1))
        return tokens, parents, expected

    def __len__(self):
        return len(self.count) - len(self.free)


class _Row:
    __slots__ = ("owner", "seen", "prompt_len", "trie", "active")

    def __init__(self, owner, depth, prompt_len):
        self.owner, self.seen, self.prompt_len = owner, 0, prompt_len
        self.trie, self.active = SuffixTrie(depth), [0]


class SuffixProposer(Proposer):
    name = "suffix"

    def __init__(self, depth: int = 24, max_match: int = 16, alpha: float = 1.0, min_prob: float = 0.1,
                 global_tokens: int = 4096, tree: int = 0):
        if depth < 2 or max_match < 1 or alpha <= 0 or not 0 <= min_prob <= 1 or global_tokens < 0:
            raise ConfigError("suffix needs depth >= 2, max_match >= 1, alpha > 0, 0 <= min_prob <= 1 "
                              f"and global_tokens >= 0; got {depth}, {max_match}, {alpha}, {min_prob}, "
                              f"{global_tokens}")
        self.depth, self.max_match, self.alpha, self.min_prob = depth, max_match, alpha, min_prob
        self.global_tokens = global_tokens
        self.global_trie = SuffixTrie(depth)
        self.stored: OrderedDict[int, list[int]] = OrderedDict()   # request id -> output (LRU order)
        self.stored_tokens = 0
        self.rows: RowSlots = RowSlots()                   # row -> _Row
        self.tree = tree                                   # a node budget: trees, not chains

    # ---- per-row index, kept in step with the sequence -------------------------------------
    def start(self, row, seq):
        self.rows[row] = _Row(seq, self.depth, len(seq.token_ids))

    def finish(self, row):
        r = self.rows.get(row)
        if r is not None and self.global_tokens > 0:
            self.remember(getattr(r.owner, "id", id(r.owner)), list(r.owner.token_ids[r.prompt_len:]))

    def _sync(self, row: int, seq) -> _Row:
        r = self.rows.get(row)
        ids = seq.token_ids
        if r is None or r.owner is not seq or len(ids) < r.seen:
            r = self.rows[row] = _Row(seq, self.depth, len(ids) if r is None else r.prompt_len)
        for t in ids[r.seen:]:
            r.active = r.trie.extend(r.active, int(t))
        r.seen = len(ids)
        return r

    # ---- global index over earlier outputs --------------------------------------------------
    def remember(self, key, tokens: list[int]) -> None:
        """Index an earlier request's output; evict least recently used ones beyond the budget."""
        if not tokens or len(tokens) > self.global_tokens:
            return
        if key in self.stored:
            self.forget(key)
        self.global_trie.add(tokens)
        self.stored[key] = tokens
        self.stored_tokens += len(tokens)
        while self.stored_tokens > self.global_tokens:
            self.forget(next(iter(self.stored)))

    def forget(self, key) -> None:
        tokens = self.stored.pop(key)
        self.global_trie.remove(tokens)
        self.stored_tokens -= len(tokens)

    # ---- proposing ------------------------------------------------------------------------------
    def _matches(self, r: _Row, ids, k: int):
        """(trie, node, match length) of the longest matched suffix with continuations in
        the row's own index, then in the global one (each at most once)."""
        m_cap = min(self.max_match, self.depth - max(k, 1), len(ids))
        # own history: active[m] is the node of the length-m suffix; it has continuations
        # only if that suffix occurred before, followed by something
        for m in range(min(m_cap, len(r.active) - 1), 0, -1):
            if r.trie.out[r.active[m]] > 0:
                yield r.trie, r.active[m], m
                break
        if self.stored:
            for m in range(m_cap, 0, -1):
                node = self.global_trie.lookup(ids[len(ids) - m:])
                if node >= 0 and self.global_trie.out[node] > 0:
                    yield self.global_trie, node, m
                    break

    def propose_row(self, row: int, seq, k: int) -> tuple[list[int], list[int]]:
        """(tokens, parents) of this row's proposal: a path (parents i - 1), or with a tree
        budget a token tree; of the index whose proposal expects more accepted tokens."""
        best, best_exp = ([], []), 0.0
        for trie, node, m in self._matches(self._sync(row, seq), seq.token_ids, k):
            if self.tree:
                toks, parents, exp = trie.expand(node, m, k, self.alpha, self.min_prob, self.tree)
            else:
                toks, exp = trie.walk(node, m, k, self.alpha, self.min_prob)
                parents = list(range(-1, len(toks) - 1))
            if exp > best_exp:
                best, best_exp = (toks, parents), exp
        return best

    def propose(self, context, k):
        rows = [self.propose_row(b, seq, k) for b, seq in enumerate(context)]
        d = pack([np.asarray(t, dtype=np.int64) for t, _ in rows])
        if self.tree:
            d.parents = [p for _, p in rows]
        return d


@register("suffix")
def _build(target, spec, draft_model=None, rows=1, max_len=1024, **_):
    o = spec.opts
    return SuffixProposer(depth=o.get("suffix_depth", 24), max_match=o.get("suffix_max_match", 16),
                          alpha=o.get("suffix_alpha", 1.0), min_prob=o.get("suffix_min_prob", 0.1),
                          global_tokens=o.get("suffix_global_tokens", 4096), tree=spec.tree)
