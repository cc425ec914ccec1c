import sys, time, statistics, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from specdec.build import load_models, Models, make_engine
from specdec.config import SpecConfig, EngineConfig, SamplingParams
from specdec.defaults import default_target, default_draft
from specdec.analysis.workloads import load_workload
torch.set_num_threads(2)
m = load_models(default_target(), default_draft(), threads=2)
prompts = load_workload("code", m.tokenizer, n=32, prompt_tokens=128)
res = {}
for rep in range(3):
    for name, spec in (("off", SpecConfig(method="none", k=0)), ("auto", SpecConfig(method="draft", k="auto"))):
        eng = make_engine(m, spec, EngineConfig(max_batch=16, max_model_len=300))
        ks = []
        eng.on_round = lambda r: ks.append(r.k)
        t = time.perf_counter()
        seqs = eng.generate(prompts, [SamplingParams(max_new_tokens=32, ignore_eos=True)] * 32)
        dt = time.perf_counter() - t
        res.setdefault(name, []).append(sum(s.num_output for s in seqs) / dt)
        if rep == 0: print(name, "rounds", len(ks), "k>0 rounds", sum(k > 0 for k in ks))
print({k: [round(x) for x in v] for k, v in res.items()})
