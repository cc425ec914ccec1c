"""t(1, q) of the random Qwen2.5-0.5B shape (benchmarks/real_size.py's checkpoint), 3 rounds
of 4 timed forwards at q = 1, 2, 3, 4, 5, 9, 256 cached keys, medians. The int8 decode tile was
chosen with this loop (then a scratch copy of it): one panel a tile against two gave t(1) =
20.7 / 21.1 / 20.7 ms against 22.2 / 22.2 ms, separate runs minutes apart, 2026-12-05, AMD
EPYC family 25 model 1 (Zen 3), 2 threads.

    python benchmarks/results/int8/checks/decode_curve.py int8|float32
"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import real_size as rs  # noqa: E402

from specdec.analysis.what_if import forward_times  # noqa: E402
from specdec.models.loader import load_model  # noqa: E402

torch.set_num_threads(2)
m = load_model(rs.checkpoint("qwen2.5-0.5b"), weights=sys.argv[1])
qs = [1, 2, 3, 4, 5, 9]
runs = [forward_times(m, [1], qs, 4) for _ in range(3)]
t = {q: statistics.median(r[(1, q)] for r in runs) for q in qs}
print(sys.argv[1], " ".join(f"{q}:{t[q] * 1e3:.1f}ms({t[q] / t[1]:.2f})" for q in qs))
