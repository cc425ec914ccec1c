import torch

from specdec.models.kv_cache import KVCache


def test_truncate_advance_move_and_views():
    c = KVCache(num_layers=2, rows=3, kv_heads=1, max_len=8, head_dim=2)
    c.advance(0, 5)
    c.advance(2, 3)
    c.k[0][2, :, :3] = 7.0
    c.truncate(0, 2)
    assert c.lengths == [2, 0, 3]
    c.move_row(2, 1)
    assert c.lengths == [2, 3, 0] and torch.equal(c.k[0][1, :, :3], torch.full((1, 3, 2), 7.0))
    v = c.rows(1, 2)
    assert v.lengths == [3] and v.k[0].data_ptr() == c.k[0][1:2].data_ptr()
    for bad in (lambda: c.truncate(0, 5), lambda: c.advance(1, 6)):
        try:
            bad()
            raise AssertionError("expected ValueError")
        except ValueError:
            pass
