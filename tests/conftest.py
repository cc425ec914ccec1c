"""Shared fixtures: tiny seeded models (random weights) and checkpoint directories.

The whole run writes only below one temporary folder: specdec's cache (measured cost
tables, the compiled decoder, token streams) and the caches of the libraries it loads are
pointed there before anything imports them, so results never depend on an earlier run or
on the user's ~/.cache, and the user's home is left untouched."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_SCRATCH = tempfile.mkdtemp(prefix="specdec-tests-")
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
for _var, _sub in (("SPECDEC_CACHE", "specdec"), ("HF_HOME", "huggingface"), ("MPLCONFIGDIR", "matplotlib"),
                   ("XDG_CACHE_HOME", "xdg-cache"), ("XDG_CONFIG_HOME", "xdg-config"),
                   ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                   ("RUSTUP_HOME", "rustup"), ("CARGO_HOME", "cargo")):
    os.environ[_var] = os.path.join(_SCRATCH, _sub)

import pytest  # noqa: E402
import torch  # noqa: E402

from specdec.defaults import bundled_dir  # noqa: E402
from specdec.models.config import ModelConfig  # noqa: E402
from specdec.models.linear import choose_kernel  # noqa: E402
from specdec.models.llama import LlamaModel  # noqa: E402
from specdec.models.loader import save_checkpoint  # noqa: E402

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parent.parent
TOKENIZER = bundled_dir() / "tokenizer.json"  # the bundled tokenizer, whatever $SPECDEC_MODELS says


def tiny_config(vocab: int = 8192, **kw) -> ModelConfig:
    base = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)
    base.update(kw)
    return ModelConfig(**base)


def make_model(seed: int = 0, std: float = 0.3, prepare: bool = True, **kw) -> LlamaModel:
    """A random model whose next-token distributions are peaked enough to be interesting."""
    torch.manual_seed(seed)
    m = LlamaModel(tiny_config(**kw))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std)
    m.eval()
    return m.prepare(choose_kernel()) if prepare else m


def perturbed(model: LlamaModel, noise: float, seed: int = 1) -> LlamaModel:
    """A draft: the model's weights plus Gaussian noise (acceptance falls as noise grows)."""
    torch.manual_seed(seed)
    d = LlamaModel(model.config)
    d.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in d.parameters():
            if p.dim() >= 2:
                p.add_(torch.randn_like(p) * noise)
    d.eval()
    return d.prepare(choose_kernel())


@pytest.fixture(scope="session")
def tiny_target() -> LlamaModel:
    return make_model(0)


@pytest.fixture(scope="session")
def tiny_draft(tiny_target) -> LlamaModel:
    return perturbed(tiny_target, 0.05)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory, tiny_target, tiny_draft) -> tuple[Path, Path]:
    """(target_dir, draft_dir): Hugging Face checkpoint dirs of the tiny pair, with our tokenizer."""
    root = tmp_path_factory.mktemp("ckpt")
    t = save_checkpoint(tiny_target, TOKENIZER, root / "target", dtype=torch.float32)
    d = save_checkpoint(tiny_draft, TOKENIZER, root / "draft", dtype=torch.float32)
    return t, d


def random_prompts(n: int, seed: int = 0, vocab: int = 8192, lo: int = 2, hi: int = 40) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(2, vocab, (L,), generator=g).tolist() for L in lens]


@pytest.fixture(autouse=True, scope="session")
def one_round_timing_window():
    """Tests check what the cost model does with its timings, not how it survives a noisy
    machine: one timing window per round row (the product takes the median of three,
    `CostModel.measure_rounds(repeats=3)`, which tripled the suite's calibrations). The tests
    of the repeats themselves pass `repeats` explicitly."""
    from specdec.costs.cost_model import CostModel
    fn = CostModel.measure_rounds
    saved = fn.__defaults__
    fn.__defaults__ = (False, 1)          # (remeasure, repeats)
    yield
    fn.__defaults__ = saved


def priced_rounds(prop, tree: float = 3.0, chain: float = 1.5, none: float = 1.0) -> None:
    """`--tree auto` on a fake clock: each round of `prop` (an auto tree proposer) takes `tree`,
    `chain` or `none` seconds by what it drafted, so the measured rates follow these prices
    instead of the test machine's timing."""
    now, inner = [0.0], prop.propose
    prop.auto_size.rates.clock = lambda: now[0]

    def propose(batch, k):
        draft = inner(batch, k)
        now[0] += tree if draft.parents is not None else chain if draft.tokens.shape[1] else none
        return draft
    prop.propose = propose
