"""The row table moves and frees every owner's per-row state in one operation (rows.py)."""
from specdec.batch import RowSlots
from specdec.engine.policy import HeuristicK
from specdec.engine.rows import RowTable
from specdec.proposers.base import NoProposer


class Cache:
    """A target cache that logs the table's calls."""
    def __init__(self):
        self.calls = []

    def move_row(self, src, dst):
        self.calls.append(("move", src, dst))

    def reset(self, row):
        self.calls.append(("reset", row))


class Owner(NoProposer):
    """A proposer with per-row slots and a cache of its own; `finish` reads its row's state."""
    def __init__(self):
        self.slots, self.cache, self.seen = RowSlots(), Cache(), []

    def row_state(self):
        return [self.slots, self.cache]

    def start(self, row, seq):
        self.slots[row] = seq

    def finish(self, row):
        self.seen.append(self.slots.get(row))


class Seq:
    def __init__(self, name):
        self.name, self.finished, self.row = name, False, None


def test_move_and_free_cover_every_owner_state():
    target, owner, policy = Cache(), Owner(), HeuristicK(3, 8)
    table = RowTable(target, owner, policy, "cpu")
    a, b, c = Seq("a"), Seq("b"), Seq("c")
    table.add([a, b, c])
    policy.rows[2] = 7
    a.finished = True
    table.retire()                                       # c moves into a's row
    assert owner.seen == [a]                             # finish saw the row's state before the free
    assert dict(owner.slots) == {0: c, 1: b} and dict(policy.rows) == {0: 7, 1: 3}
    assert table.seqs == [c, b] and c.row == 0
    assert target.calls == owner.cache.calls == [("reset", 0), ("move", 2, 0)]
    c.finished = True
    b.finished = True
    table.retire()
    assert dict(owner.slots) == {} and dict(policy.rows) == {} and table.seqs == []
