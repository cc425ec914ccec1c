"""`specdec generate --show-rounds`: every token on screen carries its origin's colour, and
the counts on screen equal the --json statistics."""
import json
import re

import pytest
from rich.console import Console
from rich.text import Text

from specdec.cli import main
from specdec.engine.origins import ORIGINS, TERMINAL

RUN = re.compile(r"\x1b\[([\d;]+)m(.*?)\x1b\[0m", re.S)      # one styled run: (SGR codes, text)
ANSI = re.compile(r"\x1b\[[\d;]*m")


def sgr_codes() -> dict[str, tuple[str, bool]]:
    """SGR code string -> (origin, kept), as this console renders each style."""
    console, out = Console(), {}
    for origin in ORIGINS:
        for kept, extra in ((True, ""), (False, " strike")):
            with console.capture() as cap:
                console.print(Text("x", style=TERMINAL[origin] + extra), end="")
            out[RUN.match(cap.get()).group(1)] = (origin, kept)
    return out


@pytest.mark.parametrize("sampling", [[], ["--temperature", "1", "--seed", "7"]], ids=["greedy", "T=1"])
@pytest.mark.parametrize("k", ["3", "heuristic"])
def test_every_token_marked_and_counts_match_json(capsys, monkeypatch, tiny_dirs, sampling, k):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    t, d = tiny_dirs
    assert main(["generate", "--target", str(t), "--draft", str(d), "--k", k, "--prompt", "def f(x):",
                 "--max-new-tokens", "23", "--ignore-eos", "--show-rounds", "--json", *sampling]) == 0
    out = capsys.readouterr().out.splitlines()
    record = json.loads(out[-1])
    stats, codes = record["stats"], sgr_codes()
    counts = dict.fromkeys(ORIGINS, 0)
    kept_by_round = []
    rounds = [line for line in out if ANSI.sub("", line).startswith(("round ", "prefill"))]
    assert len(rounds) == stats["target_forwards"]             # the prefill line + one per round
    for line in rounds:
        head, _, tokens = line.partition(" ms  ") if "ms  " in line else line.partition("prefill")
        runs = RUN.findall(tokens)
        assert runs and RUN.sub("", tokens).strip(" ") == ""   # nothing on the line is unmarked
        marks = [codes[c] for c, _ in runs]                    # KeyError: a style of no origin
        for origin, _ in marks:
            counts[origin] += 1
        kept_by_round.append(sum(kept for _, kept in marks))
        m = re.search(r"accepted (\d+)/(\d+)", ANSI.sub("", head))
        if m:                                                  # accepted drafts, then one more
            a, n = int(m.group(1)), int(m.group(2))
            assert [o for o, _ in marks] == ["accepted"] * a + ["recovered" if a < n else "bonus"]
    assert counts["accepted"] == stats["accepted_tokens"]
    assert counts["recovered"] == stats["recovered_tokens"]
    assert counts["bonus"] == stats["bonus_tokens"]
    assert counts["recovered"] + counts["bonus"] == stats["drafts"]
    assert counts["plain"] == 1                                # the prefill's token; k > 0 every round
    assert sum(kept_by_round) == len(record["token_ids"]) == 23
    # the coloured text after the legend is the output, every visible character inside a run
    legend = next(i for i, line in enumerate(out) if ANSI.sub("", line).startswith("legend:"))
    text = "\n".join(out[legend + 1:-1])
    assert ANSI.sub("", text) == record["text"]
    assert RUN.sub("", text).strip() == ""
    assert all(c in codes and codes[c][1] for c, _ in RUN.findall(text))


def test_show_rounds_without_color_still_prints_rounds(capsys, monkeypatch, tiny_dirs):
    monkeypatch.setenv("NO_COLOR", "1")
    t, d = tiny_dirs
    assert main(["generate", "--target", str(t), "--draft", str(d), "--k", "2", "--prompt", "x =",
                 "--max-new-tokens", "6", "--ignore-eos", "--show-rounds"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out and re.search(r"round +1  k=2  accepted \d/2", out) and "legend:" in out


def test_rounds_without_drafts_are_plain(capsys, monkeypatch, tiny_dirs):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    t, d = tiny_dirs
    assert main(["generate", "--target", str(t), "--draft", str(d), "--k", "0", "--prompt", "x =",
                 "--max-new-tokens", "7", "--ignore-eos", "--show-rounds", "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    stats, codes = json.loads(out[-1])["stats"], sgr_codes()
    lines = [line for line in out if ANSI.sub("", line).startswith(("round ", "prefill"))]
    marks = [codes[c] for line in lines for c, _ in RUN.findall(line.split(" ms  ")[-1])]
    assert marks == [("plain", True)] * 7 and stats["drafts"] == 0
    assert all("accepted 0/0" in ANSI.sub("", line) for line in lines[1:])
