"""The chat-rewrite workload (rewrite.py): deterministic, held-out passages, whole, long enough;
`--workload chat` and `auto` pick both chat workloads."""
import pytest

from specdec.analysis.rewrite import INSTRUCTIONS, MIN_PASSAGE_TOKENS, first_reply, rewrite_messages
from specdec.analysis.workloads import CHAT_WORKLOADS, pick_workloads


def words(n, tag):
    return " ".join(f"{tag}{i}" for i in range(n))


CONVS = [[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": words(100 + i, f"w{i}_")}]
         for i in range(20)]
CONVS += [[{"role": "user", "content": "short"}, {"role": "assistant", "content": "too short"}],
          [{"role": "assistant", "content": words(200, "x")}, {"role": "user", "content": "no reply after me"}]]
COUNT = lambda text: len(text.split())                                  # noqa: E731
RENDERED = lambda msgs: len(msgs[0]["content"].split())                 # noqa: E731


def test_first_reply():
    assert first_reply(CONVS[0]) == CONVS[0][1]["content"]
    assert first_reply(CONVS[-1]) is None                   # a reply before any question is no answer
    assert first_reply([{"role": "user", "content": "q"}, {"role": "assistant", "content": "  "}]) is None


def test_rewrite_prompts_are_deterministic_whole_and_long_enough():
    got = rewrite_messages(CONVS, 8, 0, COUNT, RENDERED, max_tokens=10_000)
    assert got == rewrite_messages(CONVS, 8, 0, COUNT, RENDERED, max_tokens=10_000)
    assert got != rewrite_messages(CONVS, 8, 1, COUNT, RENDERED, max_tokens=10_000)
    assert len(got) == 8
    passages = {c[1]["content"] for c in CONVS}
    for i, msgs in enumerate(got):
        assert len(msgs) == 1 and msgs[0]["role"] == "user"
        instruction, passage = msgs[0]["content"].split("\n\n", 1)
        assert instruction == INSTRUCTIONS[i % len(INSTRUCTIONS)]
        assert passage in passages and COUNT(passage) >= MIN_PASSAGE_TOKENS
    # a prompt that renders too long is left out, never cut
    limit = max(RENDERED(m) for m in got) - 1
    shorter = rewrite_messages(CONVS, 8, 0, COUNT, RENDERED, max_tokens=limit)
    assert all(RENDERED(m) <= limit for m in shorter)
    assert rewrite_messages(CONVS, 50, 0, COUNT, RENDERED, max_tokens=10_000).__len__() == 20


class _Tok:
    def __init__(self, template):
        self.chat_template = template


@pytest.mark.parametrize("asked, template, want", [
    ("chat", None, list(CHAT_WORKLOADS)), ("auto", "{{ x }}", list(CHAT_WORKLOADS)),
    ("chat-rewrite", None, ["chat-rewrite"]), ("auto", None, ["code", "long-code", "prose", "grounded", "random"]),
])
def test_chat_workloads_picked(asked, template, want):
    assert pick_workloads(asked, _Tok(template))[0] == want
