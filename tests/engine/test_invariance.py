"""The target's forward is bitwise shape-invariant: a position's logits are identical whether
it is scored alone (decode) or among k+1 positions (verify), in a batch of any size, beside
rows of other lengths, at any point of the key cache. Greedy speculation is exact because of
this, so the grid spans what the engine sends: batch up to 16, chunks up to K_MAX + 1 = 17,
ragged rows, and cached lengths that cross several 64-key blocks."""
import pytest
import torch

from specdec.defaults import MODELS_DIR
from specdec.models.linear import KERNELS
from specdec.models.loader import load_model
from tests.conftest import make_model

BATCHES = (1, 2, 5, 16)
CHUNKS = (1, 2, 4, 9, 17)
NEW = 34            # positions scored after each row's prompt: two 17-chunks
MAX_ROWS = max(BATCHES)


def _prompt_lengths(n: int) -> list[int]:
    """Ragged: 50..200 cached keys, so rows sit in different 64-key blocks and cross them."""
    return [50 + (37 * r) % 151 for r in range(n)]


def _model(name: str, kernel: str):
    if name == "tiny":
        model = make_model(0, prepare=False).prepare(KERNELS[kernel]())
    else:
        if not (MODELS_DIR / "target" / "config.json").exists():
            pytest.fail(f"the bundled target is missing from {MODELS_DIR}")
        model = load_model(MODELS_DIR / "target", compile=None if kernel == "native" else False)
    if kernel == "native" and model.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    if kernel == "onednn" and model.kernel.name != "onednn":
        pytest.skip("oneDNN unavailable")
    return model


def _score(model, tokens, lengths, rows, chunk, cache_rows=None):
    """Logits (len(rows), NEW, V) of each row's NEW positions, scored `chunk` at a time with
    `rows` sharing every forward (in a cache of `cache_rows`, default len(rows)); each row's
    prompt is prefilled alone first."""
    cache = model.new_cache(cache_rows or len(rows), max(lengths) + NEW + 1)
    with torch.inference_mode():
        for i, r in enumerate(rows):        # prefill row by row, then mark each row's length
            one = model.new_cache(1, max(lengths) + NEW + 1)
            model(tokens[r:r + 1, :lengths[r]], torch.arange(lengths[r], device=tokens.device)[None], one)
            for layer in range(len(cache.k)):
                cache.k[layer][i] = one.k[layer][0]
                cache.v[layer][i] = one.v[layer][0]
            cache.lengths[i] = lengths[r]
        pieces = []
        for a in range(0, NEW, chunk):
            t = min(chunk, NEW - a)
            pos = torch.tensor([[lengths[r] + a + j for j in range(t)] for r in rows], device=tokens.device)  # (B, t)
            toks = torch.stack([tokens[r, lengths[r] + a:lengths[r] + a + t] for r in rows])  # (B, t)
            pieces.append(model(toks, pos, cache))                                           # (B, t, V)
            for i, r in enumerate(rows):
                cache.lengths[i] = lengths[r] + a + t
    return torch.cat(pieces, 1)


@pytest.mark.parametrize("name,kernel", [("tiny", "native"), ("bundled", "native"), ("tiny", "onednn")])
def test_forward_is_bitwise_shape_invariant(name, kernel):
    model = _model(name, kernel)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)            # two threads split the outputs; each owns whole ones
    try:
        lengths = _prompt_lengths(MAX_ROWS)
        g = torch.Generator().manual_seed(3)
        tokens = torch.randint(2, model.config.vocab_size, (MAX_ROWS, max(lengths) + NEW), generator=g)
        alone = [_score(model, tokens, lengths, [r], 1)[0] for r in range(MAX_ROWS)]       # (NEW, V) each
        for batch in BATCHES:
            rows = list(range(MAX_ROWS - batch, MAX_ROWS))   # batch 1 is row 15: the longest prompt
            for chunk in CHUNKS:
                got = _score(model, tokens, lengths, rows, chunk)
                for i, r in enumerate(rows):
                    assert torch.equal(got[i], alone[r]), (name, kernel, batch, chunk, r)
    finally:
        torch.set_num_threads(threads)


def test_negative_control_the_stock_kernel_fails_the_grid():
    """Stock F.linear (MKL) is not shape-invariant: the same grid catches it, so the test
    above can fail (SPECDEC_LINEAR=stock gives up the guarantee, docs/exactness.md)."""
    model = make_model(0, prepare=False).prepare(KERNELS["stock"]())
    lengths = _prompt_lengths(5)
    tokens = torch.randint(2, model.config.vocab_size, (5, max(lengths) + NEW), generator=torch.Generator().manual_seed(3))
    alone = [_score(model, tokens, lengths, [r], 1)[0] for r in range(5)]
    got = _score(model, tokens, lengths, list(range(5)), 9)
    assert any(not torch.equal(got[r], alone[r]) for r in range(5))
