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
    """Print `seq`'s rounds (the prefill's token first) and its coloured text."""
    tokens = log.tokens(seq)
    pieces = tok.pieces([t for t, *_ in tokens])
    heads = {0: f"{label}prefill            "}
    for r in log.rounds.get(seq.id, []):
        heads[r.index] = (f"{label}round {r.index:3d}  k={r.k}  accepted {r.accepted}/{r.num_draft}  "
                          f"{r.dt * 1e3:7.2f} ms  ")
    lines = {index: Text(head) for index, head in heads.items()}
    for (_, origin, index, kept), piece in zip(tokens, pieces):
        line = lines[index]
        if len(line) > len(heads[index]):
            line.append(" ")
        line.append(visible(piece), style=style(origin, kept))
    for line in lines.values():
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
