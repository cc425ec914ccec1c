"""Where each output token came from, collected from the engine's round results, and the
one palette every view of it uses (generate --show-rounds, trace pages, the analyzer's
samples).

Origins:
- `accepted`: a draft token the target kept;
- `recovered`: the token drawn at the first rejection (from norm(max(0, p - q)); greedy:
  the target's argmax there);
- `bonus`: the token drawn from p after a round that accepted every draft;
- `plain`: the target's token in a round without drafts, and the first token (prefill).

Listening costs the engine nothing when nobody listens: `Engine.on_round` is None by default,
and a `RoundLog` reads only what the round already computed (RoundResult).
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

from .round import RoundResult

ACCEPTED, RECOVERED, BONUS, PLAIN = "accepted", "recovered", "bonus", "plain"
ORIGINS = (ACCEPTED, RECOVERED, BONUS, PLAIN)
# One colour per origin (terminal style, HTML colour): green for what the draft got right, red
# for the target's correction, blue for the free token, amber for the target alone.
TERMINAL = {ACCEPTED: "green", RECOVERED: "bold red", BONUS: "bold blue", PLAIN: "yellow"}
HEX = {ACCEPTED: "#1b7f3b", RECOVERED: "#c62828", BONUS: "#1565c0", PLAIN: "#a66a00"}


def round_origins(num_draft: int, accepted: int) -> list[str]:
    """The origins of the 1 + accepted tokens a round emitted for one row."""
    if num_draft <= 0:
        return [PLAIN]
    return [ACCEPTED] * accepted + [RECOVERED if accepted < num_draft else BONUS]


@dataclass
class RowRound:
    """One request's share of one decode round."""
    index: int              # the request's round number, from 1
    k: int                  # drafts the policy asked for (the whole batch's k)
    num_draft: int          # drafts verified for this request
    accepted: int
    dt: float               # seconds of the whole round (the batch's)
    tokens: list[int]       # what verification emitted: accepted drafts + the next token
    origins: list[str]      # one per token
    kept: int               # how many of `tokens` the request kept (a stop or the length cut the rest)


@dataclass
class RoundLog:
    """An `Engine.on_round` listener: every request's rounds, by sequence id."""
    rounds: dict[int, list[RowRound]] = field(default_factory=dict)

    def __call__(self, result: RoundResult) -> None:
        if result.emitted is None:
            raise ValueError("RoundLog needs the round's emitted tokens (RoundResult.emitted)")
        for b, seq in enumerate(result.batch):
            mine = self.rounds.setdefault(seq.id, [])
            n, a = result.num_draft[b], result.accepted[b]
            mine.append(RowRound(len(mine) + 1, result.k, n, a, result.dt, list(result.emitted[b]),
                                 round_origins(n, a), len(seq.new_tokens)))

    def tokens(self, seq) -> list[tuple[int, str, int, bool]]:
        """(token, origin, round index (0: the prefill), kept) for every token the request's
        rounds emitted, in order: the output tokens, then any a stop or the length cut."""
        out = [(t, PLAIN, 0, True) for t in seq.output_ids[:1]]
        for r in self.rounds.get(seq.id, []):
            out += [(t, o, r.index, j < r.kept) for j, (t, o) in enumerate(zip(r.tokens, r.origins))]
        return out

    def totals(self, seq) -> dict[str, int]:
        """Emitted tokens per origin (cut ones included, as the engine's statistics count them)."""
        counts = dict.fromkeys(ORIGINS, 0)
        for _, origin, _, _ in self.tokens(seq):
            counts[origin] += 1
        return counts


def html_tokens(pieces: list[str], origins: list[str], rounds: list[int] | None = None,
                kept: list[bool] | None = None) -> str:
    """Coloured <span>s, one per token: class `tok <origin>` (plus `cut`), data-round its
    round. Pair with `HTML_CSS`."""
    out = []
    for i, (piece, origin) in enumerate(zip(pieces, origins)):
        cls = f"tok {origin}" + ("" if kept is None or kept[i] else " cut")
        data = f' data-round="{rounds[i]}"' if rounds is not None else ""
        out.append(f'<span class="{cls}"{data} title="{origin}">{html.escape(piece) or "&#8709;"}</span>')
    return "".join(out)


HTML_CSS = ("".join(f".tok.{o}{{color:{c}}}" for o, c in HEX.items())
            + ".tok.accepted{background:#e8f5e9}.tok.recovered{background:#ffebee;font-weight:bold}"
              ".tok.bonus{background:#e3f2fd;font-weight:bold}.tok.plain{background:#fff3e0}.tok.cut{text-decoration:line-through;opacity:.6}"
              ".sample{white-space:pre-wrap;font-family:ui-monospace,Menlo,Consolas,monospace;"
              "font-size:.9em;border:1px solid #ddd;padding:.6em;border-radius:4px;line-height:1.5}")


def legend_html() -> str:
    return " ".join(f'<span class="tok {o}">{o}</span>' for o in ORIGINS)
