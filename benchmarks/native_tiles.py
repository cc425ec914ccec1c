"""The native decoder of the working tree against the one at a git revision, side by side.

Both libraries are built here with the decoder's own flags and timed in one process,
interleaved round by round, on the bundled target: its linears alone (`sd_linear`, 111 MB
of weights that stream past the last-level cache) at M rows, and its whole cached forward
(256 cached tokens) at T positions. Outputs must be bitwise equal between the two builds:
a kernel change may move time, never a bit, unless `--new-rounding` says that the change
is a new summation order on purpose (then they must agree within 1e-4 relative; each build
stays shape-invariant on its own, which tests/engine/test_invariance.py checks).

    python benchmarks/native_tiles.py [--against HEAD] [--rounds 3] [--march -march=native]
        [--new-rounding] [--out results/native_tiles]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from specdec.build import load_models
from specdec.costs.cache import _cpu_name
from specdec.models.native import build
from specdec.models.native.abi import declare
from specdec.models.native.forward import NativeForward

NATIVE = Path(build.__file__).parent
ROWS = (1, 2, 3, 4, 5, 6, 9)       # verify at k = 0..8
CACHED = 256                      # context in the forward, as decode_cost.py uses
CALLS = 25                        # timed passes per (build, size, round); the median is kept
P = ctypes.c_void_p


def compile_at(rev: str | None, march: str, tmp: Path) -> ctypes.CDLL:
    """The decoder from the working tree (rev None) or from `rev`, built into tmp."""
    src = tmp / (rev or "tree")
    src.mkdir(parents=True, exist_ok=True)
    names = ([f.name for f in NATIVE.glob("*.[ch]")] if rev is None else subprocess.run(
        ["git", "ls-tree", "--name-only", rev, "./"], capture_output=True, text=True,
        check=True, cwd=NATIVE).stdout.split())
    for f in [Path(n).name for n in names if n.endswith((".c", ".h"))]:
        text = (NATIVE / f).read_text() if rev is None else subprocess.run(
            ["git", "show", f"{rev}:specdec/models/native/{f}"], capture_output=True, text=True,
            check=True, cwd=NATIVE).stdout
        (src / f).write_text(text)
    flags = [march if f == "-march=native" else f for f in build.FLAGS]
    subprocess.run(["cc", *flags, str(src / "decoder.c"), "-o", str(src / "d.so"), "-lm"], check=True)
    return declare(ctypes.CDLL(str(src / "d.so")))       # a rev before models/native/abi.py fails here


def timed(fn) -> float:
    ts = []
    for _ in range(CALLS):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="HEAD")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--march", default="-march=native", help="e.g. -march=znver3 for the AVX2 path")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-rounding", action="store_true", help="the builds sum in different orders on purpose")
    ap.add_argument("--out", type=Path, default=Path("results/native_tiles"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_models().target
    modules = [m for m in target.modules() if isinstance(m, torch.nn.Linear)]
    linears = [m.weight.detach() for m in modules]
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        libs = {args.against: compile_at(args.against, args.march, Path(tmp)),
                "tree": compile_at(None, args.march, Path(tmp))}
        fwd = {name: NativeForward(target, lib) for name, lib in libs.items()}
        packed = {name: f._pack_all([(m,) for m in modules])[0] for name, f in fwd.items()}
        caches = {name: target.new_cache(1, CACHED + 16) for name in libs}
        prompt = torch.randint(2, target.config.vocab_size, (1, CACHED), generator=torch.Generator().manual_seed(0))
        for name in libs:
            fwd[name](prompt, torch.arange(CACHED)[None], caches[name])
        lin = {n: {m: [] for m in ROWS} for n in libs}
        step = {n: {m: [] for m in ROWS} for n in libs}
        for _ in range(args.rounds):
            for m in ROWS:
                xs = [torch.randn(m, w.shape[1]) for w in linears]
                ys = {n: [torch.empty(m, w.shape[0]) for w in linears] for n in libs}
                toks = torch.randint(2, target.config.vocab_size, (1, m))
                pos = (torch.arange(m) + CACHED)[None]
                outs = {}
                for n, lib in libs.items():
                    def run_linears(n=n, lib=lib):
                        for x, p, y, w in zip(xs, packed[n], ys[n], linears):
                            lib.sd_linear(P(x.data_ptr()), m, w.shape[1], P(p.data_ptr()), w.shape[0],
                                          P(y.data_ptr()), args.threads)
                    lin[n][m].append(timed(run_linears))
                    step[n][m].append(timed(lambda n=n: fwd[n](toks, pos, caches[n])))
                    outs[n] = (torch.cat([y.flatten() for y in ys[n]]), fwd[n](toks, pos, caches[n]))
                a, b = outs.values()
                if args.new_rounding:
                    assert all(torch.allclose(u, v, rtol=1e-4, atol=1e-4) for u, v in zip(a, b)), f"outputs differ at {m} rows"
                else:
                    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), f"outputs differ at {m} rows"
    med = lambda d: {m: statistics.median(v) * 1e3 for m, v in d.items()}  # noqa: E731
    result = {"cpu": _cpu_name(), "march": args.march, "threads": args.threads, "rounds": args.rounds,
              "linears_ms": {n: med(lin[n]) for n in libs}, "forward_ms": {n: med(step[n]) for n in libs},
              "command": "python benchmarks/native_tiles.py " + " ".join(argv or [])}
    md = [f"Native decoder, tree against {args.against}: bundled target, {args.threads} threads, {args.march}, "
          f"median of {args.rounds} rounds x {CALLS} calls; {result['cpu']}", "",
          "| build | what | " + " | ".join(f"{m} rows" for m in ROWS) + " | t(9)/t(1) |",
          "|---|---|" + "---|" * (len(ROWS) + 1)]
    for what, table in (("linears, ms", result["linears_ms"]), ("forward, ms", result["forward_ms"])):
        for n, row in table.items():
            md.append(f"| {n} | {what} | " + " | ".join(f"{row[m]:.2f}" for m in ROWS) + f" | {row[9] / row[1]:.2f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    (args.out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return result


if __name__ == "__main__":
    main()
