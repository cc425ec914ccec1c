"""k = auto from an empty cache: how soon the first token comes, and what the cold start costs
in throughput beside the fully calibrated path (`specdec profile` first).

    python benchmarks/cold_start.py first-token [--methods draft,ngram,suffix,layerskip,eagle,auto]
    python benchmarks/cold_start.py llm          # README's example: LLM() with its default max_batch
    python benchmarks/cold_start.py serve [--method draft]
    python benchmarks/cold_start.py throughput [--methods ...] [--prompts 4] [--repeats 3] [--new-tokens 256]
    python benchmarks/cold_start.py all --out benchmarks/results/first_token
    python benchmarks/cold_start.py all --target SmolLM2-135M-Instruct.Q4_1.gguf --methods ngram,suffix,layerskip,auto

--target: another checkpoint than the bundled pair (a folder or a GGUF file, with no draft of
its own); the throughput prompts are then held-out ShareGPT first turns through its chat template
(`specdec[data]`) where it has one.

The specdec measured is the one of the checkout this script is in (or $SPECDEC_CODE's, e.g. an
older commit's `git archive` for a before/after), whatever is installed. Start-up: each run is
a fresh process with an empty $SPECDEC_CACHE (a new temporary folder,
so the compiled decoder is built there too, while loading). A wrapper around
`build.load_models` stamps the moment the models are loaded; from there the figure runs to the
first token `specdec generate --prompt "def f(x):"` prints (first-token), to `LLM()` returning
(llm), or to `/health` answering 200 and to a first chat completion's reply (serve).

Throughput (cold vs calibrated tok/s): benchmarks/cold_throughput.py.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]    # the checkout this script belongs to: its specdec is measured
METHODS = ("draft", "ngram", "suffix", "layerskip", "eagle", "auto")
PROMPT = "def f(x):"
START_TIMEOUT_S = 300          # a start-up slower than this is a failure, not a figure
QUIET_CORES = 0.1              # other processes' mean use of the cores during a figure, at most: on
                               # 2 cores, one busy neighbour slows the compiled decoder's OpenMP
                               # threads up to 15x (their barriers wait for a descheduled thread)
TRIES = 6                      # a figure disturbed by another process is taken again, this often


def cpu_model() -> str:
    """The model name plus family and model (a virtual machine may shorten the name to "AMD EPYC")."""
    try:
        info: dict[str, str] = {}
        for key, _, value in (line.partition(":") for line in Path("/proc/cpuinfo").read_text().splitlines()):
            info.setdefault(key.strip(), value.strip())
        return f"{info['model name']} family {info.get('cpu family', '?')} model {info.get('model', '?')}"
    except (OSError, KeyError):
        return platform.processor()


# ---- children: the real entry points, with the load stamped --------------------------------

def _stamp(what: str) -> None:
    print(f"@{what} {time.time():.6f}", file=sys.stderr, flush=True)


def _wrap_load(module) -> None:
    real = module.load_models

    def load_models(*a, **kw):
        out = real(*a, **kw)
        _stamp("loaded")
        return out
    module.load_models = load_models


def child_generate(argv: list[str]) -> int:
    import specdec.commands.generate as gen
    from specdec.cli import main
    _wrap_load(gen)
    real_write, seen = sys.stdout.write, [False]

    def write(text):
        if text and not seen[0]:
            seen[0] = True
            _stamp("first")
        return real_write(text)
    sys.stdout.write = write
    return main(["generate", *argv])


def child_llm(target: str | None, method: str | None) -> int:
    import specdec.api.llm as api
    from specdec import LLM, SamplingParams
    _wrap_load(api)
    llm = LLM(target=target, method=method)
    _stamp("ready")
    llm.generate([PROMPT], SamplingParams(max_new_tokens=1))
    _stamp("first")
    return 0


def child_serve(argv: list[str]) -> int:
    import specdec.build as build
    from specdec.cli import main
    _wrap_load(build)
    return main(["serve", *argv])


# ---- the parent ------------------------------------------------------------------------------

def _busy_s() -> float | None:
    """Seconds of CPU all processes have used, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _ours_s() -> float:
    import resource
    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def quietly(fn, *args) -> dict:
    """fn(*args) -> dict, taken again (up to TRIES) while other processes used more than
    QUIET_CORES of the cores meanwhile (this process and its children excluded); the figure
    carries `others_cores`, what they used."""
    from specdec.cpu_load import busy_cores
    for _ in range(TRIES):
        while (busy_cores(2.0) or 0.0) > QUIET_CORES:
            time.sleep(5)
        t, busy, ours = time.time(), _busy_s(), _ours_s()
        out = fn(*args)
        wall = time.time() - t
        others = ((_busy_s() - busy) - (_ours_s() - ours)) / wall if busy is not None else float("nan")
        out["others_cores"] = max(0.0, others)
        if not others > QUIET_CORES:
            return out
        print(f"  (others used {others:.2f} cores meanwhile: again)", flush=True)
    raise SystemExit(f"no quiet window in {TRIES} tries")


def _env(cache: Path) -> dict:
    """A child's environment: the empty cache, and the specdec under measure first on its path."""
    path = os.pathsep.join(p for p in (os.environ.get("SPECDEC_CODE", str(ROOT)), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "SPECDEC_CACHE": str(cache), "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def _spawn(kind: str, args: list[str], cache: Path, threads: int) -> subprocess.Popen:
    env = _env(cache)
    return subprocess.Popen([sys.executable, __file__, f"_child-{kind}", *args, "--threads", str(threads)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


def _stamps(stderr: str) -> dict[str, float]:
    return {line.split()[0][1:]: float(line.split()[1]) for line in stderr.splitlines() if line.startswith("@")}


def _target_args(target: Path | None) -> list[str]:
    return [] if target is None else ["--target", str(target)]


def first_token(method: str, threads: int, target: Path | None = None) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="specdec-cold-"))
    try:
        t0 = time.time()
        proc = _spawn("generate", ["--prompt", PROMPT, "--method", method, "--max-new-tokens", "32",
                                   *_target_args(target)], cache, threads)
        out, err = proc.communicate(timeout=START_TIMEOUT_S)
        s = _stamps(err)
        if proc.returncode or "first" not in s:
            raise SystemExit(f"generate --method {method} failed:\n{err[-3000:]}")
        return {"method": method, "load_s": s["loaded"] - t0, "first_token_after_load_s": s["first"] - s["loaded"],
                "stderr": [line for line in err.splitlines() if line.startswith("specdec:")]}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def llm_ready(threads: int, target: Path | None = None, method: str | None = None) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="specdec-cold-"))
    try:
        t0 = time.time()
        proc = _spawn("llm", [*_target_args(target), *(["--method", method] if method else [])], cache, threads)
        _out, err = proc.communicate(timeout=START_TIMEOUT_S)
        s = _stamps(err)
        if proc.returncode or "ready" not in s:
            raise SystemExit(f"LLM() failed:\n{err[-3000:]}")
        return {"load_s": s["loaded"] - t0, "ready_after_load_s": s["ready"] - s["loaded"],
                "first_token_after_load_s": s["first"] - s["loaded"], "total_s": s["ready"] - t0}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def serve_ready(method: str, threads: int, target: Path | None = None) -> dict:
    import httpx
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cache = Path(tempfile.mkdtemp(prefix="specdec-cold-"))
    url = f"http://127.0.0.1:{port}"
    err_path = cache.parent / f"{cache.name}.stderr"
    try:
        t0 = time.time()
        with open(err_path, "w") as err_file:
            env = _env(cache)
            proc = subprocess.Popen([sys.executable, __file__, "_child-serve", "--method", method, "--port", str(port),
                                     "--log-level", "warning", "--threads", str(threads), *_target_args(target)],
                                    stdout=subprocess.DEVNULL, stderr=err_file, env=env, text=True)
            t_health = None
            while t_health is None:
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        t_health = time.time()
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.time() - t0 > START_TIMEOUT_S:
                    raise SystemExit(f"serve did not answer /health:\n{err_path.read_text()[-3000:]}")
                time.sleep(0.05)
            body = {"messages": [{"role": "user", "content": "Write a function f(x)."}], "max_tokens": 16}
            r = httpx.post(url + "/v1/chat/completions", json=body, timeout=START_TIMEOUT_S)
            t_chat = time.time()
            r.raise_for_status()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        s = _stamps(err_path.read_text())
        return {"method": method, "load_s": s["loaded"] - t0, "health_after_load_s": t_health - s["loaded"],
                "chat_after_load_s": t_chat - s["loaded"]}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        err_path.unlink(missing_ok=True)


def render(results: dict) -> str:
    lines = [f"CPU: {results['cpu']}; torch threads {results['threads']}; {results['date']}; "
             f"target: {results.get('target') or 'the bundled pair'}", "", f"`{results['command']}`", ""]
    if "first_token" in results:
        lines += ["## specdec generate --prompt \"def f(x):\" (k = auto, empty cache)", "",
                  "| method | load s (incl. compiling the decoder) | first token after load, s |", "|---|---:|---:|"]
        lines += [f"| {r['method']} | {r['load_s']:.2f} | {r['first_token_after_load_s']:.2f} |"
                  for r in results["first_token"]]
        lines.append("")
    if "llm" in results:
        r = results["llm"]
        lines += ["## LLM() (max_batch 8, empty cache)", "",
                  f"load {r['load_s']:.2f} s; ready {r['ready_after_load_s']:.2f} s after load "
                  f"({r['total_s']:.2f} s in all); first token {r['first_token_after_load_s']:.2f} s after load", ""]
    if "serve" in results:
        r = results["serve"]
        lines += [f"## specdec serve --method {r['method']} (max_batch 8, empty cache)", "",
                  f"load {r['load_s']:.2f} s; /health 200 {r['health_after_load_s']:.2f} s after load; "
                  f"first chat completion {r['chat_after_load_s']:.2f} s after load", ""]
    if "throughput" in results:
        lines += ["## tok/s, 256 new tokens, cold vs calibrated (greedy, batch 1)", "",
                  "Each statistic beside its noise floor: the same statistic of the calibrated path's second "
                  "run against its first (with --control).", "",
                  "| method | cold tok/s | calibrated tok/s | ratio of medians | its noise floor | "
                  "median per-pair ratio | its noise floor |", "|---|---:|---:|---:|---:|---:|---:|"]
        for m, r in results["throughput"].items():
            again = [p["calibrated_again"] for p in r["pairs"] if "calibrated_again" in p]
            floor_rom = (f"{statistics.median(again) / statistics.median(p['calibrated'] for p in r['pairs']):.3f}"
                         if again else "-")
            floor_pair = f"{r['control_median_pair_ratio']:.3f}" if "control_median_pair_ratio" in r else "-"
            lines.append(f"| {m} | {r['cold_tok_s']:.1f} | {r['calibrated_tok_s']:.1f} | {r['ratio_of_medians']:.3f} | "
                         f"{floor_rom} | {r['median_pair_ratio']:.3f} | {floor_pair} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    code = os.environ.get("SPECDEC_CODE", str(ROOT))         # another checkout's specdec: $SPECDEC_CODE
    if sys.path[:1] != [code]:
        sys.path.insert(0, code)
    if argv and argv[0].startswith("_child-"):             # a fresh process, run by the parent
        kind, rest = argv[0], argv[1:]
        if kind == "_child-llm":
            import torch
            opt = lambda name: rest[rest.index(name) + 1] if name in rest else None  # noqa: E731
            torch.set_num_threads(int(opt("--threads")))
            return child_llm(opt("--target"), opt("--method"))
        return {"_child-generate": child_generate, "_child-serve": child_serve}[kind](rest)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["first-token", "llm", "serve", "throughput", "all"])
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--method", help="serve's and LLM()'s method (default: serve's draft, LLM()'s own default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--control", action="store_true",
                    help="throughput: run the calibrated path twice per pair (the noise floor)")
    ap.add_argument("--target", type=Path, help="a checkpoint folder or GGUF file instead of the bundled pair")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    results: dict = {"cpu": cpu_model(), "threads": args.threads, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "command": " ".join(["python", "benchmarks/cold_start.py", *argv]),
                     "target": args.target and args.target.name}
    if args.what in ("first-token", "all"):
        results["first_token"] = []
        for m in methods:
            results["first_token"].append(quietly(first_token, m, args.threads, args.target))
            r = results["first_token"][-1]
            print(f"generate --method {m}: load {r['load_s']:.2f} s, first token {r['first_token_after_load_s']:.2f} s "
                  "after load", flush=True)
    if args.what in ("llm", "all"):
        results["llm"] = quietly(llm_ready, args.threads, args.target, args.method)
        print(f"LLM(): ready {results['llm']['ready_after_load_s']:.2f} s after load", flush=True)
    if args.what in ("serve", "all"):
        results["serve"] = quietly(serve_ready, args.method or "draft", args.threads, args.target)
        print(f"serve: /health {results['serve']['health_after_load_s']:.2f} s, chat "
              f"{results['serve']['chat_after_load_s']:.2f} s after load", flush=True)
    if args.what in ("throughput", "all"):
        from cold_throughput import throughput    # benchmarks/cold_throughput.py
        results["throughput"] = throughput(methods, args.prompts, args.repeats, args.new_tokens, args.threads,
                                           args.control, args.target)
    text = render(results)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        name = args.what.replace("-", "_")
        if args.target is not None:            # beside the bundled pair's files: smollm2_first_token.md, ..
            name = f"{args.target.stem.split('-')[0].lower()}_{name}"
        (args.out / f"{name}.json").write_text(json.dumps(results, indent=1))
        (args.out / f"{name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
