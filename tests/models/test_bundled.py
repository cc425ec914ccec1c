"""The bundled checkpoints: transformers loads them, logits match, and the CLI defaults work."""
import json

import pytest
import torch
import transformers

from specdec.cli import main
from specdec.defaults import MODELS_DIR, default_draft
from specdec.models.loader import load_model

NAMES = ("target", "draft", "draft-distill", "draft-parallel")


def test_every_bundled_checkpoint_is_there():
    """The tests below are parametrised over these folders: a missing one must fail, not
    silently take its tests with it."""
    for n in NAMES:
        assert (MODELS_DIR / n / "config.json").exists(), MODELS_DIR / n


@pytest.mark.parametrize("name", NAMES)
def test_transformers_loads_bundled_checkpoint_and_logits_match(name):
    path = MODELS_DIR / name
    assert json.loads((path / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    hf = transformers.LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    ours = load_model(path)
    tokens = torch.randint(2, 8192, (1, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = hf(tokens).logits
        got = ours(tokens, torch.arange(48)[None])
    assert torch.allclose(got, ref, atol=1e-3), (got - ref).abs().max()


def test_target_beats_drafts_on_held_out_code():
    from specdec.models.loader import load_tokenizer
    from specdec.train.data import perplexity, token_stream
    stream = token_stream(load_tokenizer(MODELS_DIR / "target"), "heldout")
    ppl = {n: perplexity(load_model(MODELS_DIR / n), stream, max_tokens=4096) for n in NAMES}
    assert all(ppl["target"] < 0.9 * ppl[n] for n in NAMES if n != "target"), ppl


def test_generate_with_no_flags_prints_python(capsys):
    assert default_draft().exists()
    code = main(["generate", "--prompt", "def parse_args(argv):", "--max-new-tokens", "48", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and len(out["token_ids"]) > 0
    text = out["text"]
    assert "\n" in text and any(w in text.lower() for w in ("return", "=", "(", "if ", "parser", '"""'))   # code or a docstring
    # the defaults speculate; what they print is plain greedy decoding's text, token for token
    assert main(["generate", "--prompt", "def parse_args(argv):", "--max-new-tokens", "48", "--json",
                 "--k", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == out["token_ids"]


def test_the_bundled_target_runs_a_row_invariant_kernel(monkeypatch):
    """Greedy speculation is lossless only if the target's forward is shape-invariant, so the
    target never takes a kernel by timing (docs/exactness.md); the draft may."""
    from specdec.build import load_models
    from specdec.models import linear
    if not linear._onednn_available(torch.device("cpu")):
        pytest.skip("oneDNN unavailable")
    monkeypatch.delenv("SPECDEC_LINEAR", raising=False)
    linear.choose_kernel.cache_clear()
    try:
        models = load_models(MODELS_DIR / "target", default_draft())
    finally:
        linear.choose_kernel.cache_clear()
    assert models.target.kernel.row_invariant
    assert models.draft.kernel.name in linear.KERNELS


def test_the_bundled_head_is_made_for_the_bundled_target(capsys):
    """models/eagle names the bundled target's weights hash; `--method eagle` uses it unasked,
    says what plain greedy says, and its drafts are accepted (a trained head, not a stub)."""
    import json
    from specdec.cli import main
    from specdec.defaults import default_head
    from specdec.models.head_loader import load_head
    from specdec.models.loader import load_model
    head_dir = default_head()
    assert head_dir is not None and head_dir == MODELS_DIR / "eagle"
    load_head(head_dir, load_model(MODELS_DIR / "target", prepare=False), MODELS_DIR / "target")   # hash checked
    common = ["generate", "--prompt", "def parse_args(argv):", "--max-new-tokens", "32", "--ignore-eos", "--json"]
    assert main(common + ["--method", "none"]) == 0
    plain = json.loads(capsys.readouterr().out)["token_ids"]
    assert main(common + ["--method", "eagle", "--k", "4"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["token_ids"] == plain and res["stats"]["mean_acceptance_length"] > 1.5, res["stats"]
