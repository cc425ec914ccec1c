"""`ModelRunner`: one model's cached inference, on the fastest path its device has.

    runner = model.runner                                   # made by LlamaModel.prepare
    logits = runner.forward(tokens, positions, cache, argmax_out=best)   # what, never how
    tokens, q = runner.draft(feed, positions, fed, k, cache, rule)       # k draft tokens

The fast path is chosen here and only here, once per model: the compiled decoder
(models/native) on the CPU, captured CUDA graphs on CUDA (models/cuda_graphs.py), else eager
PyTorch (LlamaModel.eager). Callers say what they want: logits, their argmaxes, the final
hidden states, k drafted tokens, a round verified by rejection sampling. Every fused
operation has a portable twin with the same arithmetic rule, so which path ran changes the
time of a call, never what it returns (docs/exactness.md).
"""
from __future__ import annotations

from typing import Callable, Protocol

import torch

from .kv_cache import KVCache
from .tree import TreeAttention


class DraftRule(Protocol):
    """How a proposer picks each draft token (proposers/picking.py builds it from the batch's
    sampling settings). `greedy`: every row takes the argmax of its logits, nothing else;
    `temperature` (B,): every row samples from softmax(logits / t) at `uniforms` (B, k), no
    other filter (None otherwise). A rule that is neither (penalties, coupled or top-k rows)
    is run step by step through `pick`."""
    greedy: bool
    temperature: torch.Tensor | None
    uniforms: torch.Tensor | None

    def pick(self, logits: torch.Tensor, i: int, before: list[torch.Tensor]
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """logits (B, 1, V) of draft i's position, the drafts so far -> (tokens (B,), q (B, V) or None)."""


class ModelRunner:
    """The path a model's cached forwards take, and the fused loops built on it."""

    def __init__(self, model, native=None, graphs=None):
        """native: a models.native.NativeForward; graphs: a models.cuda_graphs.CudaGraphs;
        neither: eager PyTorch."""
        self.model, self.native, self.graphs = model, native, graphs
        # the fused loops (a drafting or verification round in one C call); False runs the same
        # rounds step by step over this path's forwards (tests compare the two)
        self.fused = True

    @classmethod
    def build(cls, model, kernel) -> tuple["ModelRunner", object]:
        """The runner for `model` prepared with `kernel` (models/linear.py), and the kernel its
        linears use: the whole-model kernel builds the compiled decoder, or falls back to a
        row-invariant linear kernel where the model's shapes or the machine cannot run it."""
        if not getattr(kernel, "whole_model", False):
            return cls(model), kernel
        from . import native
        lib = native.load()
        if lib is None or native.supported(model) is not None:
            from .linear import fallback_kernel
            return cls(model), fallback_kernel(model.device)
        return cls(model, native=native.NativeForward(model, lib)), kernel

    @property
    def path(self) -> str:
        """"native", "graphs" or "eager": the path this model's cached forwards take."""
        return "native" if self.native is not None else "graphs" if self.graphs is not None else "eager"

    @property
    def exact_trees(self) -> bool:
        """Whether token-tree attention scores each node exactly as a chain would (the compiled
        decoder's; eager tree attention rounds differently, so greedy would not be exact)."""
        return self.native is not None

    @property
    def build_id(self) -> str | None:
        """The compiled decoder's build (its cost tables are its own), or None."""
        return self.native.build_id if self.native is not None else None

    def use_graphs(self, graphs) -> None:
        """On CUDA: replay cached forwards from `graphs` (models/cuda_graphs.py)."""
        self.graphs = graphs

    # ---- forwards ---------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                num_layers: int | None = None, hidden_only: bool = False,
                argmax_out: torch.Tensor | None = None, tree: TreeAttention | None = None,
                hidden_out: torch.Tensor | None = None, embeds: torch.Tensor | None = None) -> torch.Tensor:
        """A cached forward: tokens, positions (B, T) -> logits (B, T, V) (LlamaModel.forward
        documents the options); the compiled decoder, CUDA graphs or eager, whichever this
        model has."""
        if self.native is not None:
            return self.native(tokens, positions, cache, num_layers, hidden_only, argmax_out, tree, hidden_out,
                               embeds)
        if self.graphs is not None and tree is None and hidden_out is None and embeds is None:
            return argmax_into(self.graphs(tokens, positions, cache, num_layers, hidden_only), argmax_out)
        logits = self.model.eager(tokens, positions, cache, num_layers, hidden_only, tree, hidden_out, embeds)
        return argmax_into(logits, argmax_out)

    def draft(self, feed: torch.Tensor, positions: torch.Tensor, fed: list[int], steps: int, cache: KVCache,
              rule: DraftRule, num_layers: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Autoregressive drafting: feed (B, T) at positions (B, T), of which row b's first
        fed[b] are real (the rest right padding), pick a token from each row's last real
        position, then feed each pick and pick again, `steps` picks in all -> (tokens (B,
        steps), q (B, steps, V) or None). The caller's cache rows grow by fed[b] + steps - 1.
        On the compiled decoder, greedy and temperature-only rules run their steps in one C
        call (decoder.c: sd_draft_argmax, sd_draft_sample); other rules and paths loop here."""
        B, T = feed.shape
        n = self.native if self.fused else None
        start = positions[:, 0]                                         # (B,) the feed's first position
        after = start + torch.tensor(fed, device=feed.device)           # (B,) where the first pick feeds
        last = (after - start - 1)[:, None]                             # (B, 1) each row's last real input
        if n is not None and rule.greedy and steps > 1:
            best = torch.empty(B, T, dtype=torch.long)                                  # (B, T)
            n(feed, positions, cache, num_layers, argmax_out=best)
            first = best.gather(1, last)                                                # (B, 1)
            return torch.cat([first, n.draft_argmax(first[:, 0], after, steps - 1, cache, num_layers)], 1), None
        if n is not None and rule.temperature is not None and all(f == T for f in fed):
            return n.draft_sample(feed, start, steps, cache, rule.temperature, rule.uniforms, num_layers)
        logits = self.forward(feed, positions, cache, num_layers)                       # (B, T, V)
        logits = logits.gather(1, last[:, :, None].expand(B, 1, logits.shape[-1]))      # (B, 1, V)
        tok, q = rule.pick(logits, 0, [])
        if n is not None and rule.temperature is not None and steps > 1:   # rows fed unequal lengths
            rest, q_rest = n.draft_sample(tok, after, steps - 1, cache, rule.temperature, rule.uniforms[:, 1:],
                                          num_layers)                                   # (B, k-1), (B, k-1, V)
            return torch.cat([tok[:, None], rest], 1), torch.cat([q[:, None], q_rest], 1)
        out, qs = [tok], [q]
        for i in range(1, steps):
            logits = self.forward(out[-1][:, None], (after + i - 1)[:, None], cache, num_layers)   # (B, 1, V)
            tok, q = rule.pick(logits, i, out)
            out.append(tok)
            qs.append(q)
        probs = torch.stack(qs, 1) if qs[0] is not None else None                       # (B, k, V)
        return torch.stack(out, 1), probs

    # ---- fused verification and head drafting -----------------------------------------
    def sample_verify(self, logits: torch.Tensor, temperature: torch.Tensor, drafts: torch.Tensor,
                      q: torch.Tensor | None, num_draft: list[int], uniforms: torch.Tensor, want_beta: bool,
                      portable: Callable[[], tuple]) -> tuple:
        """Rejection-sampling verification of temperature-only rows -> (num_accepted (B,),
        next_token (B,), beta (B, k) or None), host lists: on the compiled decoder in one C
        call while the logits are in cache (NativeForward.verify_sample), else `portable()`,
        verify/rejection.py's rule in torch (the same rule and draws)."""
        if self.native is not None and self.fused and logits.device.type == "cpu":
            return self.native.verify_sample(logits, temperature, drafts, q, num_draft, uniforms, want_beta)
        return portable()

    def pack(self, weight: torch.Tensor) -> torch.Tensor | None:
        """An (N, K) weight in the compiled decoder's panel layout (for head_draft), or None
        where this model has no compiled decoder."""
        if self.native is None:
            return None
        from .native.head import pack
        return pack(self.native, weight)

    def head_draft(self, portable: Callable[[], tuple], *args, **kwargs) -> tuple:
        """A feature head's whole drafting round (models/native/head.py, head_draft(native,
        *args, **kwargs)) in one C call on the compiled decoder, else `portable()`: the
        proposer's step-by-step loop."""
        if self.native is None or not self.fused:
            return portable()
        from .native.head import head_draft
        return head_draft(self.native, *args, **kwargs)


def argmax_into(logits: torch.Tensor, argmax_out: torch.Tensor | None) -> torch.Tensor:
    """Fill argmax_out (B, T) with the argmax of logits (B, T, V), if given; -> logits."""
    if argmax_out is not None:
        argmax_out.copy_(logits.argmax(-1))                                  # (B, T)
    return logits
