import time, torch
from specdec.models.loader import load_model
from specdec.train.trainer import lm_loss
torch.set_num_threads(2)
m = load_model("specdec/bundled/target"); m.train()
opt = torch.optim.AdamW(m.parameters(), lr=1e-5)
x = torch.randint(0, 8192, (8, 256)); y = torch.randint(0, 8192, (8, 256))
def step(bf16):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = lm_loss(m, x, y)
    opt.zero_grad(); loss.backward(); opt.step()
for bf16 in (False, True, False, True):
    step(bf16)
    ts = []
    for _ in range(4):
        t = time.perf_counter(); step(bf16); ts.append(time.perf_counter() - t)
    ts.sort(); print("bf16" if bf16 else "fp32", f"median {ts[2]:.3f}s  {2048/ts[2]:.0f} tok/s", flush=True)
