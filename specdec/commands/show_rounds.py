"""`generate --show-rounds`: every round of a request on one line, its tokens coloured by
origin (engine/origins.py), then the whole text in the same colours.

    round   3  k=4  accepted 2/4    1.84 ms  def ·parse _args
    ...
    legend: accepted recovered bonus plain (struck through: cut by a stop or the length)

Tokens on a round line are separated by one unstyled space; inside a token a space shows
as "·" and a newline as "⏎", so that every token stays visible. Tokens that verification
emitted but a stop or max-new-tokens cut are struck through: the statistics count them
(vLLM's definitions), so the totals on screen equal --json's.
"""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ..engine.origins import ORIGINS, TERMINAL, RoundLog

CUT = " strike"        # added to an origin's style for a token the request did not keep
EMPTY = "∅"            # a token that decodes to nothing (end of sequence, special tokens)


def visible(piece: str) -> str:
    """A token's text with its spaces and newlines made visible."""
    return piece.replace(" ", "·").replace("\n", "⏎").replace("\t", "⇥") or EMPTY


def style(origin: str, kept: bool) -> str:
    return TERMINAL[origin] + ("" if kept else CUT)


def show(console: Console, tok, log: RoundLog, seq, label: str = "") -> None:
    """Print `seq`'s rounds and its coloured text."""
    tokens = log.tokens(seq)
    pieces = tok.pieces([t for t, *_ in tokens])
    first = Text(f"{label}prefill            ")
    by_round: dict[int, list[int]] = {}
    for i, (_, _, r, _) in enumerate(tokens):
        by_round.setdefault(r, []).append(i)
    lines = []
    for r in [None] + log.rounds.get(seq.id, []):
        index = 0 if r is None else r.index
        line = first if r is None else Text(
            f"{label}round {r.index:3d}  k={r.k}  accepted {r.accepted}/{r.num_draft}  {r.dt * 1e3:7.2f} ms  ")
        for n, i in enumerate(by_round.get(index, [])):
            _, origin, _, kept = tokens[i]
            if n:
                line.append(" ")
            line.append(visible(pieces[i]), style=style(origin, kept))
        lines.append(line)
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False)
    legend = Text("legend: ")
    for o in ORIGINS:
        legend.append(o, style=TERMINAL[o])
        legend.append(" ")
    legend.append("(struck through: cut by a stop or the length)")
    console.print(legend, soft_wrap=True, highlight=False)
    text = Text()
    for (_, origin, _, kept), piece in zip(tokens, pieces):
        if kept and piece:
            text.append(piece, style=style(origin, kept))
    console.print(text, soft_wrap=True, highlight=False)
