"""`specdec serve` under the field's load tools, guidellm and aiperf, run unmodified.

    python benchmarks/serve_peers.py --install            # once: the tools' own venv
    python benchmarks/serve_peers.py --out benchmarks/results/serve_peers
    python benchmarks/serve_peers.py --smoke --out /tmp/peers   # 3 requests per tool, c = 1

The tools live in a venv of their own outside the repository (--venv, default
~/.cache/specdec/loadtools-venv; never in CI, never in pyproject). For speculation off
(`--k 0`) and on (`--k K`, the bundled draft), it starts `specdec serve` on 127.0.0.1 (the
bundled pair), then runs each tool with its own command line at every concurrency:
synthetic prompts of --isl tokens, exactly --osl output tokens (both tools send
`ignore_eos`), --requests per level (default max(8, 2c)), streaming completions. It reads
TTFT, ITL and throughput from each tool's own JSON export and writes
<out>/serve_peers.json and <out>/serve_peers.md (the tools' exports and logs: <out>/runs/). All traffic stays on
127.0.0.1; the tokenizer is the bundled checkpoint's folder.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx


TOOLS = {"guidellm": "0.8.1", "aiperf": "0.13.0"}   # the versions the server was tried with (issue 24)
REPO = Path(__file__).resolve().parent.parent    # serve this checkout's specdec
VENV = Path.home() / ".cache" / "specdec" / "loadtools-venv"
START_TIMEOUT_S = 300      # loading the bundled pair and building the native decoder
TOOL_TIMEOUT_S = 600       # one tool run at one level; a hang is reported, not waited out


def install(venv: Path) -> None:
    """Create the tools' venv and pip-install the pinned versions into it."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q"] + [f"{n}=={v}" for n, v in TOOLS.items()],
                   check=True)


def serve(port: int, k: str, log: Path) -> subprocess.Popen:
    """`specdec serve` on 127.0.0.1:port with `--k k`, once /health answers."""
    cmd = [sys.executable, "-m", "specdec.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--k", k, "--max-batch", "16", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=REPO)
    end = time.time() + START_TIMEOUT_S
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"specdec serve exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"specdec serve did not answer /health in {START_TIMEOUT_S} s; see {log}")


def guidellm(venv, url, model, tok, c, n, isl, osl, out: Path) -> list[str]:
    return [str(venv / "bin" / "guidellm"), "run", "--backend", f"kind=openai_http,target={url},model={model}",
            "--profile", f"kind=concurrent,streams={c}", "--constraint", f"kind=max_requests,count={n}",
            "--tokenizer", f"kind=huggingface_auto,model={tok}",
            "--data", f"kind=synthetic_text,prompt_tokens={isl},output_tokens={osl}",
            "--output", f"kind=json,path={out / 'guidellm.json'}", "--disable-progress"]


def aiperf(venv, url, model, tok, c, n, isl, osl, out: Path) -> list[str]:
    return [str(venv / "bin" / "aiperf"), "profile", "--model", model, "--url", url,
            "--endpoint-type", "completions", "--streaming", "--concurrency", str(c), "--request-count", str(n),
            "--isl", str(isl), "--osl", str(osl), "--extra-inputs", "ignore_eos:true", "--tokenizer", tok,
            "--artifact-dir", str(out), "--ui-type", "none"]


def read_guidellm(out: Path) -> dict:
    m = json.loads((out / "guidellm.json").read_text())["benchmarks"][0]["metrics"]
    ok = lambda name: m[name]["successful"]   # noqa: E731
    return {"ttft_ms": ok("time_to_first_token_ms")["median"], "itl_ms": ok("inter_token_latency_ms")["median"],
            "out_tok_s": ok("output_tokens_per_second")["mean"], "req_s": ok("requests_per_second")["mean"],
            "requests": ok("request_latency")["count"], "errors": m["request_totals"]["errored"]}


def read_aiperf(out: Path) -> dict:
    a = json.loads((out / "profile_export_aiperf.json").read_text())
    errors = sum(e.get("count", 0) for e in a.get("error_summary") or [])
    return {"ttft_ms": a["time_to_first_token"]["p50"], "itl_ms": a["inter_token_latency"]["p50"],
            "out_tok_s": a["output_token_throughput"]["avg"], "req_s": a["request_throughput"]["avg"],
            "requests": a["request_count"]["avg"], "errors": errors}


RUNNERS = {"guidellm": (guidellm, read_guidellm), "aiperf": (aiperf, read_aiperf)}


def table(rows: list[dict]) -> str:
    lines = ["| tool | speculation | concurrency | requests | TTFT p50 (ms) | ITL p50 (ms) | output tok/s | req/s | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['tool']} | {r['spec']} | {r['c']} | failed: {r['error']} | | | | | |")
            continue
        lines.append(f"| {r['tool']} | {r['spec']} | {r['c']} | {r['requests']:.0f} | {r['ttft_ms']:.1f} | "
                     f"{r['itl_ms']:.2f} | {r['out_tok_s']:.0f} | {r['req_s']:.2f} | {r['errors']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/serve_peers"))
    ap.add_argument("--venv", type=Path, default=VENV)
    ap.add_argument("--install", action="store_true", help="create the venv and install the tools, then exit")
    ap.add_argument("--concurrency", default="1,8,16")
    ap.add_argument("--requests", type=int, help="requests per level (default max(8, 2c))")
    ap.add_argument("--isl", type=int, default=64, help="prompt tokens")
    ap.add_argument("--osl", type=int, default=32, help="output tokens per request")
    ap.add_argument("--k", default="4", help="draft tokens per round when speculation is on")
    ap.add_argument("--port", type=int, default=8124)
    ap.add_argument("--tools", default="guidellm,aiperf")
    ap.add_argument("--smoke", action="store_true", help="3 requests per tool at c = 1, speculation on")
    args = ap.parse_args()
    args.out = args.out.resolve()       # the tools run in their own folders
    if args.install:
        install(args.venv)
        return 0
    missing = [t for t in args.tools.split(",") if not (args.venv / "bin" / t).exists()]
    if missing:
        raise SystemExit(f"{', '.join(missing)} not in {args.venv}; run with --install first")
    levels = [1] if args.smoke else [int(c) for c in args.concurrency.split(",")]
    specs = {"on": args.k} if args.smoke else {"off": "0", "on": args.k}
    url = f"http://127.0.0.1:{args.port}"
    env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1"}
    (args.out / "runs").mkdir(parents=True, exist_ok=True)     # the tools' own exports and logs
    rows = []
    for spec, k in specs.items():
        server = serve(args.port, k, args.out / "runs" / f"serve-{spec}.log")
        try:
            card = httpx.get(url + "/v1/models").json()["data"][0]
            model, tok = card["id"], card["root"]      # root: the served checkpoint (its tokenizer)
            for tool in args.tools.split(","):
                command, read = RUNNERS[tool]
                for c in levels:
                    n = 3 if args.smoke else args.requests or max(8, 2 * c)
                    run_dir = args.out / "runs" / f"{tool}-{spec}-c{c}"
                    run_dir.mkdir(parents=True, exist_ok=True)
                    cmd = command(args.venv, url, model, tok, c, n, args.isl, args.osl, run_dir)
                    print(f"[{spec}] {tool} c={c}: {' '.join(cmd)}", flush=True)
                    row = {"tool": tool, "spec": f"{spec} (k {k})" if spec == "on" else spec, "c": c, "cmd": cmd}
                    try:
                        with (run_dir / "tool.log").open("w") as log:
                            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                timeout=TOOL_TIMEOUT_S, cwd=run_dir).returncode
                        row.update(read(run_dir) if rc == 0 else {"error": f"exit {rc}, see {run_dir}/tool.log"})
                    except (subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
                        row["error"] = f"{type(e).__name__}: {e}"
                    rows.append(row)
                    print("   ", {k: v for k, v in row.items() if k != "cmd"}, flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)
    (args.out / "serve_peers.json").write_text(json.dumps(rows, indent=1))
    (args.out / "serve_peers.md").write_text(table(rows))
    print(table(rows))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
