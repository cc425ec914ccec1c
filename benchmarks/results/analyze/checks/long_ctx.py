"""Does t(1, q, L) extrapolate linearly from L = 128, 512 to L = 1950?"""
import torch
from specdec.build import load_models
from specdec.costs.profiling import time_forwards
m = load_models(threads=2); torch.set_num_threads(2)
qs = [1, 2, 4, 7]
for rep in range(2):
    t = {L: time_forwards(m.target, 1, L, qs, min_time=0.2) for L in (128, 512, 1950)}
    for q in qs:
        a, b, c = t[128][q], t[512][q], t[1950][q]
        ext = a + (b - a) / (512 - 128) * (1950 - 128)
        print(f"q={q} t128={a*1e3:.2f} t512={b*1e3:.2f} t1950={c*1e3:.2f} extrapolated={ext*1e3:.2f} ms  ratio1950 t(q)/t(1)={c/t[1950][1]:.2f} vs ext {ext/(t[128][1]+(t[512][1]-t[128][1])/384*1822):.2f}", flush=True)
