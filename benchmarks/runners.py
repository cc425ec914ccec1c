"""The in-process peers: specdec's engine and Hugging Face transformers' `generate`.

Every runner has `name`, `group`, `setting`, `threads` and
`run(prompt_ids, greedy, seed, n) -> {'n_new', 'seconds', 'tokens', 'acceptance'}`.
Timing covers the whole generation call (prefill included), never model loading.
Fixed lengths: specdec `ignore_eos=True`, HF `min_new_tokens=n` (EOS suppressed).
"""
from __future__ import annotations

import time

import torch


class Skip(Exception):
    """This row cannot run here (method not registered, missing dependency...)."""


class SpecdecRunner:
    group = "specdec"

    def __init__(self, name: str, models, spec, setting: str = "", threads: int = 2, max_len: int = 1024):
        from specdec.config import EngineConfig
        from specdec.build import make_engine
        self.name, self.setting, self.threads, self.spec = name, setting, threads, spec
        self.build = lambda: make_engine(models, spec, EngineConfig(max_batch=1, max_model_len=max_len))
        try:
            self.engine = self.build()
        except Exception as e:  # noqa: BLE001 - any failure to build the row is a clear skip
            raise Skip(f"{type(e).__name__}: {e}") from e

    def run(self, prompt_ids, greedy: bool, seed: int, n: int) -> dict:
        """One generation on a fresh engine (built untimed), as each llama.cpp run is a fresh
        process: a repeated prompt must not find its own earlier output in the engine (the
        suffix proposer's index of earlier requests, auto's per-arm record)."""
        from specdec.config import SamplingParams
        torch.set_num_threads(self.threads)
        self.engine = self.build()
        params = SamplingParams(temperature=0.0 if greedy else 1.0, seed=seed, max_new_tokens=n,
                                ignore_eos=True)
        m = self.engine.metrics
        d0, a0, r0 = m.num_draft_tokens, m.num_accepted_tokens, m.num_drafts
        t0 = time.perf_counter()
        seq = self.engine.generate([list(prompt_ids)], params)[0]
        dt = time.perf_counter() - t0
        drafted = m.num_draft_tokens - d0
        return {"n_new": seq.num_output, "seconds": dt, "tokens": seq.output_ids,
                "acceptance": (m.num_accepted_tokens - a0) / drafted if drafted else None,
                "accept_len": 1 + (m.num_accepted_tokens - a0) / (m.num_drafts - r0) if m.num_drafts > r0 else None}


def load_hf(path):
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        raise Skip(f"transformers not installed ({e})") from e
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


class HFRunner:
    """`model.generate` with optional assistant model or prompt lookup.

    assistant: (model, {'num_assistant_tokens': .., 'num_assistant_tokens_schedule': ..}) or None;
    an empty dict keeps the assistant's defaults (read from its generation_config each run)."""
    group = "HF transformers"

    def __init__(self, name: str, model, setting: str = "", threads: int = 2, assistant=None,
                 prompt_lookup: int | None = None):
        self.name, self.model, self.setting, self.threads = name, model, setting, threads
        self.assistant, self.prompt_lookup = assistant, prompt_lookup
        if assistant is not None:
            self._defaults = {k: getattr(assistant[0].generation_config, k, None) for k in
                              ("num_assistant_tokens", "num_assistant_tokens_schedule",
                               "assistant_confidence_threshold")}

    def _kwargs(self, greedy: bool, n: int) -> dict:
        kw = dict(max_new_tokens=n, min_new_tokens=n, pad_token_id=self.model.config.eos_token_id)
        kw.update(dict(do_sample=False) if greedy else dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0))
        if self.assistant is not None:
            model, overrides = self.assistant
            gc = model.generation_config
            for k, v in {**self._defaults, **overrides}.items():
                setattr(gc, k, v)
            kw["assistant_model"] = model
        if self.prompt_lookup:
            kw["prompt_lookup_num_tokens"] = self.prompt_lookup
        return kw

    @torch.inference_mode()
    def run(self, prompt_ids, greedy: bool, seed: int, n: int) -> dict:
        torch.set_num_threads(self.threads)
        torch.manual_seed(seed)
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        kw = self._kwargs(greedy, n)
        t0 = time.perf_counter()
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        dt = time.perf_counter() - t0
        new = out[0, ids.shape[1]:].tolist()
        return {"n_new": len(new), "seconds": dt, "tokens": new, "acceptance": None}


def specdec_rows(models, ks, threads: int, max_len: int) -> tuple[list, list[dict]]:
    """(runners, skipped) for specdec. `ks` are the fixed draft lengths to try; the best one is
    chosen later by the orchestrator (rows named 'specdec draft k=..')."""
    from specdec.config import SpecConfig
    wanted = [("specdec plain", SpecConfig(method="none", k=0), "k=0")]
    if models.draft is not None:
        wanted += [(f"specdec draft k={k}", SpecConfig(method="draft", k=k), f"k={k}") for k in ks]
        wanted.append(("specdec adaptive", SpecConfig(method="draft", k="auto"), "draft, k=auto"))
    wanted += [("specdec ngram", SpecConfig(method="ngram", k=max(ks)), f"k={max(ks)}"),
               ("specdec auto", SpecConfig(method="auto", k="auto"), "method=auto, k=auto")]
    runners, skipped = [], []
    if models.draft is not None:  # reference row: the draft's own decode speed, for c = t_draft / t_target
        from specdec.build import Models
        dm = Models(target=models.draft, tokenizer=models.tokenizer)
        try:
            runners.append(SpecdecRunner("specdec plain (draft model)", dm, SpecConfig(method="none", k=0),
                                         "draft model alone, k=0", threads, max_len))
        except Skip as e:
            skipped.append({"group": "specdec", "name": "specdec plain (draft model)", "skip": str(e)})
    for name, spec, setting in wanted:
        try:
            runners.append(SpecdecRunner(name, models, spec, setting, threads, max_len))
        except Skip as e:
            skipped.append({"group": "specdec", "name": name, "skip": str(e)})
    return runners, skipped


def _resolved(gc):
    """The generation config with transformers' global defaults filled in (as generate does)."""
    import copy
    gc = copy.deepcopy(gc)
    try:
        gc.update(**gc._get_default_generation_params(), defaults_only=True)
    except (AttributeError, TypeError):
        pass
    return gc


def hf_rows(target_dir, draft_dir, ks, threads: int) -> tuple[list, list[dict]]:
    """(runners, skipped) for Hugging Face: plain, assisted (defaults), assisted fixed k
    (one per k; the best is chosen later), prompt lookup."""
    try:
        tgt = load_hf(target_dir)
        dft = load_hf(draft_dir) if draft_dir else None
    except Skip as e:
        return [], [{"group": "HF transformers", "name": "HF (all rows)", "skip": str(e)}]
    rows = [HFRunner("HF plain", tgt, "generate", threads)]
    if dft is not None:
        d = _resolved(dft.generation_config)
        rows.append(HFRunner("HF assisted (defaults)", tgt, f"num_assistant_tokens={d.num_assistant_tokens}, "
                             f"{d.num_assistant_tokens_schedule}, threshold={d.assistant_confidence_threshold}",
                             threads, assistant=(dft, {})))
        for k in ks:
            rows.append(HFRunner(f"HF assisted (fixed k) k={k}", tgt, f"num_assistant_tokens={k}, constant, threshold=0",
                                 threads, assistant=(dft, {"num_assistant_tokens": k,
                                                           "num_assistant_tokens_schedule": "constant",
                                                           "assistant_confidence_threshold": 0.0})))
    rows.append(HFRunner("HF prompt lookup", tgt, f"prompt_lookup_num_tokens={max(ks)}", threads,
                         prompt_lookup=max(ks)))
    return rows, []


def profile(runner, prompt_ids, n: int, row_limit: int = 25) -> str:
    """Where one greedy generation of `runner` spends its time: torch.profiler's op table
    (self CPU time) plus the wall time, as text for the closing note of docs/benchmarks.md."""
    from torch.profiler import ProfilerActivity, profile as tprofile
    runner.run(prompt_ids, True, 0, n)  # warm
    with tprofile(activities=[ProfilerActivity.CPU]) as prof:
        res = runner.run(prompt_ids, True, 0, n)
    head = f"## {runner.name}: {res['n_new']} tokens in {res['seconds']:.3f} s ({res['n_new'] / res['seconds']:.1f} tok/s)\n"
    return head + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=row_limit) + "\n"
