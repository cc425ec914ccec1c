"""A real model as users hold it (a GGUF file, no draft) beside llama.cpp on the same weights.

    python benchmarks/peers.py --target SmolLM2-135M-Instruct.Q4_1.gguf --out DIR

peers.py hands a `.gguf` target here. Rows, each a pair on one set of weights:
- specdec float32 (the file dequantized) | llama.cpp f32 of the same dequantized weights;
- specdec int8 (rounded at load)          | llama.cpp Q8_0 made from that f32 file;
- specdec int4 (rounded at load)          | llama.cpp Q4_0 (--pure) made from that f32 file;
- specdec float32 (the file dequantized)  | llama.cpp on the file itself (its own Q4_1);
- specdec ngram and suffix (float32)      | llama.cpp lookup (f32), best k each.
The f32 file is llama.cpp's converter run on transformers' own reading of the GGUF (saved as
a folder). Workloads: `chat` (conversations through the model's chat template; no BOS
dropped, special tokens kept in the text llama.cpp is given), `code` and `prose`. Batch 1,
greedy, fixed lengths, medians over prompts x reps with the rows alternated (peers.measure).
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import torch

import llamacpp
import report
from runners import Skip, SpecdecRunner

FOLDER_CACHE = llamacpp.CACHE / "hf"       # transformers' reading of a GGUF, saved once per file


def hf_folder(gguf: Path) -> Path:
    """The GGUF read by transformers (dequantized, float32) as a Hugging Face folder."""
    out = FOLDER_CACHE / f"{gguf.stem}-{gguf.stat().st_size}"
    if (out / "model.safetensors").exists():
        return out
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["architectures"] = [type(model).__name__]
    tied = model.config.tie_word_embeddings
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    tok.save_pretrained(out)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file(sd, str(out / "model.safetensors.tmp"), metadata={"format": "pt"})
    (out / "model.safetensors.tmp").replace(out / "model.safetensors")
    return out


def chat_prompts(tok, n: int, prompt_tokens: int) -> list[list[int]]:
    """`n` single-turn chats (a question about a pydoc topic), through the chat template."""
    from specdec.analysis.workloads import prose_text
    from specdec.models.chat_template import ChatTemplate
    template = ChatTemplate(tok)
    paras = [p for p in prose_text().split("\n\n") if len(p) > 200]
    step = max(1, len(paras) // n)
    return [template.encode([{"role": "user", "content": f"Explain this briefly:\n{p[:prompt_tokens * 3]}"}])
            for p in paras[::step][:n]]


def quantized(f32: Path, kind: str) -> Path:
    """llama-quantize of the f32 file to `kind` (every matrix: --pure), cached beside it."""
    out = f32.with_name(f32.name.replace(".f32.gguf", f".{kind.lower()}.gguf"))
    if out.exists():
        return out
    bins, why = llamacpp.ensure_built(allow_build=False)
    if bins is None:
        raise RuntimeError(why)
    r = subprocess.run([str(bins / "llama-quantize"), "--pure", str(f32), str(out.with_suffix(".tmp")), kind],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"llama-quantize {kind} failed: {(r.stdout + r.stderr)[-1500:]}")
    out.with_suffix(".tmp").replace(out)
    return out


def rows(args, gguf: Path, log) -> tuple[list, list[dict], dict]:
    from specdec.build import load_models
    from specdec.config import SpecConfig
    max_len = args.prompt_tokens * 4 + args.new_tokens + 32
    runners, skipped = [], []
    models = {}
    for dtype in ("float32", "int8", "int4"):
        models[dtype] = load_models(gguf, None, weights=dtype)
        # float32's plain row is the reference the table divides by and compares outputs with
        wanted = [("specdec plain" + ("" if dtype == "float32" else f" {dtype}"), SpecConfig(method="none", k=0))]
        if dtype == "float32":
            wanted += [(f"specdec ngram k={k}", SpecConfig(method="ngram", k=k)) for k in args.ks]
            wanted += [(f"specdec suffix k={k}", SpecConfig(method="suffix", k=k)) for k in args.ks]
        for name, spec in wanted:
            try:
                runners.append(SpecdecRunner(name, models[dtype], spec, f"{dtype}, k={spec.k}", 2, max_len))
            except Skip as e:
                skipped.append({"group": "specdec", "name": name, "skip": str(e)})
    tok = models["float32"].tokenizer
    info: dict = {}
    bins, why = llamacpp.ensure_built(allow_build=not args.no_build)
    if bins is None or args.no_llamacpp:
        skipped.append({"group": "llama.cpp", "name": "llama.cpp (all rows)", "skip": why or "--no-llamacpp"})
        return runners, skipped, {"tokenizer": tok, "models": models}
    f32 = llamacpp.convert(hf_folder(gguf), outtype="f32")
    files = {"f32": f32, "Q8_0": quantized(f32, "Q8_0"), "Q4_0": quantized(f32, "Q4_0"), "Q4_1 (the file)": gguf}
    text = lambda ids: tok.tok.decode(list(ids), skip_special_tokens=False)   # noqa: E731 - specials stay in
    R = llamacpp.LlamaCppRunner
    for kind, path in files.items():
        runners.append(R(f"llama.cpp plain {kind}", "llama-completion", bins, path, text, f"{path.name}",
                         strip_bos=bool(tok.prefix)))
    for k in args.ks:
        runners.append(R(f"llama.cpp lookup k={k}", "llama-lookup", bins, f32, text, f"f32, --spec-draft-n-max {k}",
                         extra=["--spec-draft-n-max", str(k)], strip_bos=bool(tok.prefix)))
    info = {"files": {k: str(v) for k, v in files.items()}, "tokenizer": tok, "models": models, "bins": bins}
    return runners, skipped, info


def main(args, log) -> int:
    import peers
    gguf = Path(args.target).resolve()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    runners, skipped, info = rows(args, gguf, log)
    tok = info.pop("tokenizer")
    info.pop("models")
    prompts = {"chat": chat_prompts(tok, args.prompts, args.prompt_tokens)}
    other = [w for w in args.workloads if w != "chat"]
    if other:
        prompts.update(peers.load_prompts(tok, other, args.prompts, args.prompt_tokens))
    if "bins" in info:                   # llama.cpp must read each prompt as the same ids
        bins = info.pop("bins")
        mism = [f"{wl}[{i}]" for wl, ps in prompts.items() for i, p in enumerate(ps)
                if llamacpp.tokenize(bins, gguf, tok.tok.decode(p, skip_special_tokens=False)) != p]
        info["tokenization_mismatches"] = mism
        log(f"llama.cpp tokenization of our prompts matches: {not mism} {mism or ''}")
    args.workloads = list(prompts)
    t0 = time.time()
    runners = peers.tune(runners, prompts["chat"][0], args, log)
    runs = peers.measure(runners, prompts, args, log)
    ident = peers.identities(runners, runs, prompts, tok)
    table_rows = [{"group": r.group, "name": r.name, "setting": f"{r.setting}; threads={r.threads}",
                   "skip": getattr(r, "error", None), "identity": ident.get(r.name, {}),
                   "cells": {c: report.summarize(v) for c, v in runs.get(r.name, {}).items()}} for r in runners]
    table_rows += skipped
    md = report.markdown_table(table_rows, args.workloads, args.modes)
    results = {"machine": peers.machine_info(), "args": {k: str(v) for k, v in vars(args).items()},
               "llamacpp": info, "rows": table_rows, "runs": runs, "wall_s": time.time() - t0}
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "table.md").write_text(md + "\n")
    log(md)
    log(f"wrote {out / 'results.json'} and {out / 'table.md'}")
    return 0
