import statistics, sys, time, torch
from specdec.build import load_models, make_engine, Models
from specdec.config import SpecConfig, EngineConfig, SamplingParams
from specdec.analysis.workloads import load_workload
from specdec.defaults import default_target, default_draft, default_head
torch.set_num_threads(2)
m = load_models(default_target(), default_draft(), head=default_head())
prompts = load_workload("code", m.tokenizer, n=4, prompt_tokens=128)
variants = [("none", {}), ("draft", {}), ("eagle", {}), ("eagle", {"eagle_dtype": "int8"}),
            ("eagle", {"eagle_vocab": 2048}), ("eagle", {"eagle_dtype": "int8", "eagle_vocab": 2048}),
            ("draft8", {})]
def run(method, opts, temp):
    draft = m.draft
    if method == "draft8":
        method = "draft"; draft = m.draft8
    eng = make_engine(Models(m.target, m.tokenizer, draft if method == "draft" else None, head=m.head),
                      SpecConfig(method=method, k=0 if method == "none" else 4, options=opts),
                      EngineConfig(max_batch=1, max_model_len=400))
    ps = [SamplingParams(max_new_tokens=128, ignore_eos=True, temperature=temp, seed=i) for i in range(len(prompts))]
    t = time.perf_counter(); seqs = eng.generate(prompts, ps); dt = time.perf_counter() - t
    return sum(s.num_output for s in seqs) / dt, eng.metrics.mean_acceptance_length
from specdec.models.loader import load_model
m.draft8 = load_model(default_draft(), exact=False, weights="int8")
for temp in (0.0, 1.0):
    res = {i: [] for i in range(len(variants))}
    for r in range(3):
        order = range(len(variants)) if r % 2 == 0 else reversed(range(len(variants)))
        for i in order:
            res[i].append(run(*variants[i], temp))
    plain = statistics.median(x[0] for x in res[0])
    for i, (meth, opts) in enumerate(variants):
        tps = statistics.median(x[0] for x in res[i]); mal = statistics.median(x[1] for x in res[i])
        print(f"T={temp} {meth} {opts}: {tps:.1f} tok/s ({tps/plain:.2f}x plain), mean acc length {mal:.2f}", flush=True)
