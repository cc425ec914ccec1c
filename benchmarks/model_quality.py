"""How well a target writes code: the quality figures of issue "Default models", for any checkpoint.

- held-out perplexity on code (the standard library's held-out files, first 64k tokens) and
  on prose (`pydoc_data/topics.py`), as benchmarks/model_card.py measures it;
- the repetition fraction (specdec/repetition.py: the share of generated tokens that repeat
  an earlier 8-gram of the same output) of 128 new tokens after each of 20 held-out code
  prompts, greedy and at T = 0.8 (median over prompts, and the token-weighted mean);
- for several checkpoints at once, each on the same prompts and seeds;
- the same fraction of the held-out text's own next 128 tokens after each prompt (the
  "reference" row): how much real code repeats itself over that span, the floor a model that
  writes like its data would show.

    python benchmarks/model_quality.py [--models specdec/bundled/target,~/.cache/...] [--out results/quality]

Quality, not speed: the figures do not depend on the machine's load.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from specdec.repetition import mean_repetition, repetition_fraction
from specdec.analysis.workloads import load_workload
from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.defaults import MODELS_DIR
from specdec.models.loader import load_model, load_tokenizer
from specdec.train.data import perplexity, token_stream


def quality(path: Path, n: int, new_tokens: int, prompt_tokens: int) -> dict:
    tok = load_tokenizer(path)
    model = load_model(path)
    res = {"model": str(path)}
    for name, split in (("code", "heldout"), ("prose", "prose")):
        res[f"perplexity_{name}"] = perplexity(model, token_stream(tok, split))
    prompts = load_workload("code", tok, n=n, prompt_tokens=prompt_tokens)
    eng = make_engine(Models(model, tok, None), SpecConfig(method="none", k=0),
                      EngineConfig(max_batch=min(8, n), max_model_len=prompt_tokens + new_tokens + 8))
    for label, temp in (("greedy", 0.0), ("T=0.8", 0.8)):
        params = [SamplingParams(temperature=temp, seed=i, max_new_tokens=new_tokens, ignore_eos=True)
                  for i in range(n)]
        outs = [s.output_ids for s in eng.generate(prompts, params)]
        fr = [repetition_fraction(o) for o in outs]
        res[f"repetition_{label}"] = {"median": statistics.median(fr), "mean": mean_repetition(outs),
                                      "per_prompt": fr}
        res[f"sample_{label}"] = tok.decode(outs[0])
    return res


def reference_continuations(tok, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """The held-out files' own next `new_tokens` tokens after each prompt (BOS dropped), found by
    searching the files' token streams."""
    import numpy as np
    from specdec.corpus import corpus_files, read_text
    docs = [np.asarray(tok.encode(read_text(f), add_special_tokens=False), dtype=np.uint16) for f in corpus_files("heldout")]
    blobs = [d.tobytes() for d in docs]
    out = []
    for p in prompts:
        key = np.asarray(p[1:], dtype=np.uint16).tobytes()
        for d, blob in zip(docs, blobs):
            at = blob.find(key)
            while at != -1 and at % 2:                        # a match must start on a token
                at = blob.find(key, at + 1)
            if at != -1:
                end = at // 2 + len(p) - 1
                out.append(d[end:end + new_tokens].tolist())
                break
        else:
            raise RuntimeError("a prompt was not found in the held-out files")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=str(MODELS_DIR / "target"), help="comma-separated checkpoint dirs")
    ap.add_argument("--n", type=int, default=20, help="held-out code prompts")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("results/quality"))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    rows = [quality(Path(m).expanduser(), a.n, a.new_tokens, a.prompt_tokens) for m in a.models.split(",")]
    tok = load_tokenizer(Path(a.models.split(",")[0]).expanduser())
    ref = reference_continuations(tok, load_workload("code", tok, n=a.n, prompt_tokens=a.prompt_tokens), a.new_tokens)
    fr = [repetition_fraction(o) for o in ref]
    reference = {"median": statistics.median(fr), "mean": mean_repetition(ref), "per_prompt": fr,
                 "lengths": [len(o) for o in ref]}
    md = ["| model | ppl code | ppl prose | repetition greedy (median / mean) | repetition T=0.8 (median / mean) |",
          "|---|---:|---:|---:|---:|",
          f"| reference: the held-out text's own continuation | | | {reference['median']:.2f} / {reference['mean']:.2f} | |"]
    for r in rows:
        g, s = r["repetition_greedy"], r["repetition_T=0.8"]
        md.append(f"| {r['model']} | {r['perplexity_code']:.2f} | {r['perplexity_prose']:.1f} | "
                  f"{g['median']:.2f} / {g['mean']:.2f} | {s['median']:.2f} / {s['mean']:.2f} |")
    cmd = "python benchmarks/model_quality.py " + " ".join(sys.argv[1:] if argv is None else argv)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "quality.json").write_text(json.dumps({"command": cmd, "reference": reference, "rows": rows}, indent=1))
    (a.out / "quality.md").write_text(f"{a.n} held-out code prompts of {a.prompt_tokens} tokens, {a.new_tokens} "
                                      f"new tokens each. `{cmd}`\n\n" + "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
