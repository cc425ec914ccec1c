"""`cold_start.py throughput`: k = auto started cold against the fully calibrated path.

Throughput: one process, the bundled pair loaded once, torch threads set (--threads). The
calibrated path runs `build.calibrate_costs` once into its own cache folder (for every method,
at max_batch 1, `specdec generate`'s for one prompt); each cold run gets a new empty cache
folder, so its engine starts from the prior and learns online. Per method, prompts (code and
prose, 64 tokens) x repeats, cold and calibrated side by side, their order cycled; tok/s is
the new tokens over `Engine.generate`'s wall time (prefill included), greedy. Reported: the ratio
of the medians and the median of the per-pair ratios.
"""
from __future__ import annotations

import itertools
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from cold_start import quietly      # benchmarks/cold_start.py: a figure taken again when disturbed


def throughput(methods: list[str], n_prompts: int, repeats: int, new_tokens: int, threads: int,
               control: bool = False, target: Path | None = None) -> dict:
    """Cold vs calibrated tok/s per method (see the module doc); `control`: each pair also runs
    the calibrated path a second time, whose ratio to the first is the comparison's noise floor."""
    import torch
    from specdec.analysis.workloads import load_workload
    from specdec.build import calibrate_costs, load_models, make_engine, spec_config
    from specdec.build import DEFAULT_K_MAX
    from specdec.config import EngineConfig, SamplingParams
    import specdec.adaptive.layer_probe as probe
    import specdec.adaptive.layers as layers

    torch.set_num_threads(threads)
    root = Path(tempfile.mkdtemp(prefix="specdec-throughput-"))
    calibrated = root / "calibrated"
    os.environ["SPECDEC_CACHE"] = str(calibrated)
    if target is None:
        models = load_models(method="eagle")               # the bundled pair and the bundled head
        half = max(1, n_prompts // 2)
        prompts = (load_workload("code", models.tokenizer, n=half, prompt_tokens=64)
                   + load_workload("prose", models.tokenizer, n=n_prompts - half, prompt_tokens=64))
    else:                                                  # a real checkpoint: its own chat prompts
        from specdec.analysis.conversations import chat_workload
        models = load_models(target=target, method="eagle" if "eagle" in methods else None)
        prompts = chat_workload(models.tokenizer, n_prompts, max_tokens=256)
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    config = EngineConfig(max_batch=1, max_model_len=models.target.config.max_position_embeddings)
    out = {}

    def one(spec, path: str, prompt) -> float:
        """tok/s of one generation on an engine of `path`: cold (a new empty cache) or calibrated."""
        if path == "cold":
            folder = Path(tempfile.mkdtemp(prefix="cold-", dir=root))
            os.environ["SPECDEC_CACHE"] = str(folder)
            probe._PROBED.clear()
        else:
            os.environ["SPECDEC_CACHE"] = str(calibrated)
        layers._CHOSEN.clear()
        eng = make_engine(models, spec, config)
        t = time.perf_counter()
        seq = eng.generate([prompt], params)[0]
        rate = seq.num_output / (time.perf_counter() - t)
        if path == "cold":
            shutil.rmtree(folder, ignore_errors=True)
        return rate

    def pair(spec, order, prompt) -> dict:
        return {path: one(spec, path.removesuffix("_again"), prompt) for path in order}

    # The runs' order within a pair, cycled over the pairs: cold first as often as calibrated, and
    # with `control` every run in every place (a run's place in its pair may bias it by itself).
    orders = ([list(o) for o in itertools.permutations(["cold", "calibrated", "calibrated_again"])]
              if control else [["cold", "calibrated"], ["calibrated", "cold"]])

    def calibrate(spec) -> dict:
        os.environ["SPECDEC_CACHE"] = str(calibrated)
        t = time.perf_counter()
        calibrate_costs(models, spec, max_batch=1)
        return {"calibrate_s": time.perf_counter() - t}

    try:
        for method in methods:
            spec = spec_config(method, "auto", DEFAULT_K_MAX, True, {})
            calib = quietly(calibrate, spec)
            pairs = [quietly(pair, spec, orders[(r + i) % len(orders)], prompt)
                     for r in range(repeats) for i, prompt in enumerate(prompts)]
            cold, cal = [p["cold"] for p in pairs], [p["calibrated"] for p in pairs]
            again = [p["calibrated_again"] / p["calibrated"] for p in pairs if "calibrated_again" in p]
            out[method] = {"calibrate_s": calib["calibrate_s"], "cold_tok_s": statistics.median(cold),
                           **({"control_median_pair_ratio": statistics.median(again)} if again else {}),
                           "calibrated_tok_s": statistics.median(cal),
                           "ratio_of_medians": statistics.median(cold) / statistics.median(cal),
                           "median_pair_ratio": statistics.median(c / k for c, k in zip(cold, cal)),
                           "pairs": pairs}
            print(f"{method}: cold {out[method]['cold_tok_s']:.1f} tok/s, calibrated {out[method]['calibrated_tok_s']:.1f}"
                  f" tok/s, ratio {out[method]['ratio_of_medians']:.3f} (pairs {out[method]['median_pair_ratio']:.3f})",
                  flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out
