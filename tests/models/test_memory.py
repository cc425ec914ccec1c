"""Models and KV caches that would not fit are refused before anything large is allocated."""
import subprocess
import sys

import pytest

from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SpecConfig
from specdec.defaults import default_target
from specdec.errors import ResourceError
from specdec.models import loader, memory

GB = 2**30


def test_available_memory_is_read_from_the_os():
    have = memory.host_available()
    assert have is not None and 64 * 2**20 < have < 2**50


def test_an_over_size_cache_is_refused_before_it_is_allocated(tiny_target, tiny_draft):
    rows = 2 * memory.host_available() // tiny_target.cache_bytes(1, 256) + 1
    models = Models(tiny_target, None, tiny_draft)
    with pytest.raises(ResourceError, match=r"KV caches for --max-batch \d+ x --max-model-len 200 .*lower --max-batch"):
        make_engine(models, SpecConfig(method="draft", k=4), EngineConfig(max_batch=rows, max_model_len=200))
    with pytest.raises(ResourceError, match="KV cache of"):
        tiny_target.new_cache(rows, 256)


def test_an_over_size_checkpoint_is_refused_before_a_weight_is_read(tiny_dirs, monkeypatch):
    target, _ = tiny_dirs
    numel, stored = memory.checkpoint_bytes(target)
    need = stored + memory.FP32_COPIES * 4 * numel
    monkeypatch.setattr(memory, "host_available", lambda: need - 1)
    monkeypatch.setattr(loader, "_read_state_dict", lambda path: pytest.fail("weights were read"))
    with pytest.raises(ResourceError, match=r"loading target .* needs about .* GiB, but only .* in host memory"):
        loader.load_model(target)
    monkeypatch.setattr(memory, "host_available", lambda: need)            # just enough: the check passes
    with pytest.raises(pytest.fail.Exception, match="weights were read"):
        loader.load_model(target)


def test_an_unreadable_header_is_left_to_the_loader(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    assert memory.checkpoint_bytes(tmp_path) is None


@pytest.mark.parametrize("weights", ["float32", "int8"])
def test_the_load_estimate_covers_a_real_load(weights):
    """The peak resident memory of loading the bundled target (the compiled decoder's packing
    included) stays under the estimate, and the estimate is not a blanket refusal (< 2x).
    VmHWM, not ru_maxrss: the latter keeps the forking parent's (pytest's) peak across exec."""
    code = (
        "import torch; from pathlib import Path; from specdec.models import loader, memory\n"
        "torch.set_num_threads(1)\n"
        "def kb(f): return next(int(l.split()[1]) for l in Path('/proc/self/status').read_text().splitlines() if l.startswith(f))\n"
        "base = kb('VmRSS:') * 1024; path = Path(%r)\n"
        "numel, stored = memory.checkpoint_bytes(path)\n"
        "m = loader.load_model(path, weights=%r)\n"
        "peak = kb('VmHWM:') * 1024 - base\n"
        "print(peak, memory.load_bytes(path, %r, m.config.vocab_size * m.config.hidden_size)[0])\n") % (
            str(default_target()), weights, weights)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    peak, estimate = map(int, out.stdout.split())
    assert peak < estimate < 2 * peak, (peak / GB, estimate / GB)


def test_serve_refuses_an_over_size_batch_with_exit_code_2(tiny_dirs):
    target, draft = tiny_dirs
    rows = 4 * memory.host_available() // 1024                      # far more than fits, whatever the model
    r = subprocess.run([sys.executable, "-m", "specdec.cli", "serve", "--target", str(target), "--draft", str(draft),
                        "--k", "2", "--max-batch", str(rows), "--port", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "lower --max-batch" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
