"""Choose layer-skip's depth L' by measurement: decode with every candidate and compare.

`measure_layers` decodes the given prompts with every candidate L' and reports acceptance,
mean acceptance length and tokens/s next to plain decoding; `choose_layers` picks the L'
with the highest measured tokens/s. `calibrated_layers` does this once per target on short
prompts the target samples itself (in-distribution by construction) and caches the choice
on disk; `specdec.build.calibrate_costs` (`specdec profile`) calls it, and a layerskip
proposer asked for without `layerskip_layers` takes the cached choice where there is one
(else the probe's, layer_probe.py).
"""
from __future__ import annotations

import hashlib
import json
import statistics
import weakref
from pathlib import Path

import torch

from ..config import EngineConfig, SamplingParams, SpecConfig
from ..costs.cache import identity_hash, model_identity
from ..defaults import cache_dir
from ..engine.engine import Engine, cache_length
from ..errors import ConfigError
from ..proposers.layerskip import LayerSkipProposer

_CHOSEN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # target -> calibrated L'


def _spec(k: int, drafting: bool) -> SpecConfig:
    return SpecConfig(method="layerskip", k=k) if drafting else SpecConfig(method="none", k=0)


def _run(target, proposer, k, prompts, new_tokens, threads_cfg):
    spec = _spec(k, proposer is not None)
    eng = Engine(target, spec, threads_cfg, proposer=proposer)
    eng.generate(prompts, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
    m = eng.metrics
    return {"tokens_per_s": m.generated_tokens / m.step_time_s if m.step_time_s else 0.0,
            "acceptance_rate": m.acceptance_rate, "mean_acceptance_length": m.mean_acceptance_length}


def measure_layers(target, prompts: list[list[int]], k: int = 4, new_tokens: int = 32,
                   candidates: list[int] | None = None, repeats: int = 1) -> list[dict]:
    """Greedy-decode `prompts` with layer-skip at every candidate L' (default 1..L-1) and plainly.

    Returns one dict per L' (layers, acceptance_rate, mean_acceptance_length, tokens_per_s,
    speedup over plain) plus a first entry with layers=0 for plain decoding. tokens/s counts
    decode rounds only (prefill excluded); medians over `repeats`, order alternated.
    """
    n = target.config.num_hidden_layers
    cands = candidates or list(range(1, n))
    if not prompts:
        raise ConfigError("measure_layers needs at least one prompt")
    longest = max(len(p) for p in prompts) + new_tokens + k + 2
    cfg = EngineConfig(max_batch=len(prompts), max_model_len=min(longest, target.config.max_position_embeddings))
    runs: dict[int, list[dict]] = {L: [] for L in [0] + cands}
    for r in range(repeats):
        order = [0] + cands if r % 2 == 0 else list(reversed(cands)) + [0]
        for L in order:
            prop = None if L == 0 else LayerSkipProposer(target, L, len(prompts), cache_length(cfg, _spec(k, True)))
            runs[L].append(_run(target, prop, k, prompts, new_tokens, cfg))
    plain = statistics.median(x["tokens_per_s"] for x in runs[0])
    out = []
    for L in [0] + cands:
        med = {key: statistics.median(x[key] for x in runs[L]) for key in runs[L][0]}
        out.append({"layers": L, **med, "speedup": med["tokens_per_s"] / plain if plain else 0.0})
    return out


def choose_layers(target, prompts, k: int = 4, new_tokens: int = 32, candidates=None, repeats: int = 1) -> int:
    """The L' with the highest measured tokens/s on `prompts` (see measure_layers)."""
    rows = [r for r in measure_layers(target, prompts, k, new_tokens, candidates, repeats) if r["layers"] > 0]
    return max(rows, key=lambda r: r["tokens_per_s"])["layers"]


@torch.inference_mode()
def self_prompts(target, n: int = 2, length: int = 24, seed: int = 0) -> list[list[int]]:
    """`n` prompts of `length` tokens sampled from the target itself after BOS (temperature 1)."""
    g = torch.Generator().manual_seed(seed)
    bos = target.config.bos_token_id if target.config.bos_token_id is not None else 0
    ids = torch.full((n, 1), bos, dtype=torch.long, device=target.device)
    cache = target.new_cache(n, length)            # one cached step per token, as decoding runs
    with torch.inference_mode():
        for t in range(length - 1):
            pos = torch.full((n, 1), t, dtype=torch.long, device=target.device)
            logits = target(ids[:, -1:], pos, cache)                                 # (n, 1, V)
            for row in range(n):
                cache.advance(row, 1)
            probs = torch.softmax(logits[:, -1].float(), -1).cpu()                  # (n, V)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=g).to(ids.device)], 1)
    return ids.tolist()


def _calibration_file(target, k: int, prefix: str = "") -> Path:
    """Where the choice for these weights, on this machine and thread count, is cached
    (`prefix`: another kind of choice, layer_probe.py's)."""
    h = hashlib.sha256(json.dumps(model_identity(target), sort_keys=True).encode() + str(k).encode())
    for p in target.parameters():                  # the weights decide acceptance: sample them
        h.update(p.detach().reshape(-1)[:4096].float().cpu().numpy().tobytes())
    d = cache_dir() / "layerskip"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{prefix}{identity_hash({'h': h.hexdigest()})}.json"


def calibrated_layers(target, k: int = 4, measure: bool = True) -> int | None:
    """L' for `target` measured once on self-sampled prompts, then remembered (in memory
    and in the specdec cache directory, keyed by weights, machine and threads). Without
    `measure`: the remembered choice, or None where there is none."""
    if target not in _CHOSEN:
        n = target.config.num_hidden_layers
        if n == 2:
            _CHOSEN[target] = 1
        else:
            path = _calibration_file(target, k)
            try:
                _CHOSEN[target] = int(json.loads(path.read_text())["layers"])
            except (OSError, ValueError, KeyError):
                if not measure:
                    return None
                rows = measure_layers(target, self_prompts(target), k=k, new_tokens=24)
                best = max((r for r in rows if r["layers"] > 0), key=lambda r: r["tokens_per_s"])
                path.write_text(json.dumps({"layers": best["layers"], "measured": rows}))
                _CHOSEN[target] = best["layers"]
    return _CHOSEN[target]
