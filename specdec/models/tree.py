"""A token tree as a forward sees it: where each input sits and what it attends to.

A verify block is [root, node_0, ..., node_{n-1}] per row: the root is the row's pending token,
and node j's parent is the root (-1) or an earlier node. Input i of the block is written to
cache slot length + i, rotated at position length + depth(i), and attends to the row's cache
before the block (slots < base = length) plus its own ancestors and itself. A chain (parent
j - 1) is the special case where slot and position agree and the mask is causal. A draft that
grows a tree level by level feeds each level as its own block: its inputs' ancestors may be
inputs of earlier blocks, still within the MAX_TREE slots from the same base.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_TREE = 64   # slots a tree spans from its base: one bit each in an int64 ancestor mask (attention.h)


@dataclass(frozen=True)
class TreeAttention:
    slots: torch.Tensor        # (B, T) int64: the cache slot each input writes
    ancestors: torch.Tensor    # (B, T) int64: bit j set when the input at slot base + j is this one or its ancestor
    base: torch.Tensor         # (B,) int64: the tree's first slot; every slot before it is visible


def bits_tensor(masks: list[list[int]]) -> torch.Tensor:
    """Ancestor masks (host ints < 2^64) -> (B, T) int64 with the same bit patterns."""
    return torch.tensor([[a - (1 << 64) if a >= 1 << 63 else a for a in r] for r in masks], dtype=torch.long)


def depths(parents: list[int]) -> list[int]:
    """Node depths (a root child is at depth 1) from parents (-1: the root); parents come first."""
    out: list[int] = []
    for j, par in enumerate(parents):
        if not -1 <= par < j:
            raise ValueError(f"node {j}'s parent {par} is not the root (-1) or an earlier node")
        out.append(1 if par < 0 else out[par] + 1)
    return out


def block_layout(lengths: list[int], parents: list[list[int]], width: int
                 ) -> tuple[list[list[int]], TreeAttention]:
    """Rows' cache lengths (B,) and node parents (B, <= width - 1) -> (positions (B, width) as
    host lists, TreeAttention). Rows with fewer nodes are padded with inputs that see only
    themselves (their outputs are never read)."""
    if width > MAX_TREE:
        raise ValueError(f"a token tree holds at most {MAX_TREE} inputs per row, got {width}")
    pos_rows, slot_rows, anc_rows = [], [], []
    for n, par in zip(lengths, parents):
        d = [0] + depths(par)
        anc = [1]                                                    # the root: itself
        for j, pj in enumerate(par):
            anc.append(anc[pj + 1] | 1 << (j + 1))
        pad = width - len(anc)
        pos_rows.append([n + x for x in d] + [n] * pad)
        slot_rows.append([n + i for i in range(width)])
        anc_rows.append(anc + [1 << i for i in range(len(anc), width)])
    tree = TreeAttention(torch.tensor(slot_rows), bits_tensor(anc_rows), torch.tensor(list(lengths)))
    return pos_rows, tree


def visible(tree: TreeAttention, max_len: int) -> torch.Tensor:
    """(B, T, S) bool: which cache slots each input attends to (the eager path's mask)."""
    keys = torch.arange(max_len)[None, None, :]                                      # (1, 1, S)
    base = tree.base[:, None, None]                                                  # (B, 1, 1)
    offset = (keys - base).clamp(0, MAX_TREE - 1)                                    # (B, 1, S)
    in_tree = (keys >= base) & (keys < base + MAX_TREE)
    bit = (tree.ancestors[:, :, None] >> offset) & 1                                 # (B, T, S)
    return (keys < base) | (in_tree & bit.bool())
