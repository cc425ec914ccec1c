"""In-run round cost vs the calibration's, code b=1 T=0. Step times in ms, medians."""
import statistics, sys, time, torch
from specdec.build import load_models
from specdec.config import SamplingParams, SpecConfig
from specdec.analysis.measure import lockstep_runs
from specdec.analysis.workloads import load_workload
from specdec.adaptive.calibrate import round_timer
from specdec.costs.key import CostKey

models = load_models(threads=2)
torch.set_num_threads(2)
prompts = load_workload("code", models.tokenizer, 6, 64)
spec = lambda k: SpecConfig(method="draft" if k else "none", k=k, k_max=max(k, 1))
def med(run): return statistics.median(run.steps and [s[1] for s in run.steps]) * 1e3
def mean(run): return statistics.mean([s[1] for s in run.steps]) * 1e3
for rep in range(2):
    for ks in ([0, 1, 3, 6], [0, 6]):
        res = {k: [] for k in ks}
        for i in range(3):
            p = prompts[i:i + 1]
            params = [SamplingParams(temperature=0.0, max_new_tokens=64, ignore_eos=True)]
            runs = lockstep_runs(models, {k: spec(k) for k in ks}, p, params, 150)
            for k in ks: res[k].append((med(runs[k]), mean(runs[k])))
        print("lockstep", ks, {k: (round(statistics.mean(a for a, _ in v), 2), round(statistics.mean(b for _, b in v), 2)) for k, v in res.items()}, flush=True)
    timer = round_timer(models.target, spec(6), models.draft)
    got = timer(CostKey("draft", "draft"), 1, [0, 1, 3, 6], False)
    print("calibration", {k: round(v[0] * 1e3, 2) for k, v in got.items()}, flush=True)
