"""`specdec.analyze`: the `specdec analyze` session from Python, its results as a dataclass.

    result = specdec.analyze(quick=True)            # the bundled pair, about 5 minutes
    print(result.verdict)
    for cell in result.cells: ...                   # the same data as results.json

The report (results.json, report.md, report.html, plots/) is written as the command writes
it, into `out` (default: a new temporary folder), and `Analysis.paths` names the files.
"""
from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..analysis.session import Progress, analyze as run_session
from ..analysis.settings import grid_settings
from ..analysis.conversations import encode_prompts, read_prompts
from ..analysis.workloads import load_workload, long_prompt_tokens, pick_workloads
from ..build import DEFAULT_K_MAX, default_pair, load_models, spec_config
from ..config import SpecConfig
from ..errors import ConfigError, PromptError
from .options import PathLike, speculation

GRIDS = ("star", "full")   # star: every workload/k at batch 1 and sweeps around it; full: every cell
RESULTS = "results.json"   # the file whose data an Analysis holds


@dataclass(frozen=True)
class Analysis:
    """The analysis, field for field as results.json holds it (JSON types: the keys of
    break_even and draft_cost_ratio are strings there too), and the report's paths."""
    meta: dict[str, Any]                  # models, settings, machine, wall time
    method: str                           # the proposer, in words
    verdict: str                          # the plain-words answer: does speculation pay?
    verdict_facts: dict[str, Any]
    draft_cost_ratio: dict[str, Any]      # batch -> t_draft / t_target
    cost_table: dict[str, Any]            # t(b, q) and whole-round times
    break_even: dict[str, dict[str, Any]]  # batch -> k -> the smallest acceptance that pays
    regimes: list[dict[str, Any]]         # named regimes with their measured cell and best k
    errors: dict[str, Any]                # prediction errors and the greedy-identity check
    cells: list[dict[str, Any]]           # every measured (workload, k, batch, temperature)
    cost_model_table: Any = None
    k_table: dict[str, Any] | None = None  # k by batch size, vLLM's mapping (k_table.json)
    paths: dict[str, Path] = field(default_factory=dict)     # json, md, html, k_table
    extra: dict[str, Any] = field(default_factory=dict)      # keys this class does not name

    @classmethod
    def load(cls, path: PathLike) -> Analysis:
        """Read a results.json (or the folder holding it) written by `specdec analyze`."""
        p = Path(path)
        p = p / RESULTS if p.is_dir() else p
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"cannot read analysis results {p}: {e}") from e
        named = {f.name for f in fields(cls)} - {"paths", "extra"}
        missing = sorted(named - set(data) - {"cost_model_table", "k_table"})
        if missing:
            raise ConfigError(f"{p} is not a specdec analysis: no {missing[0]!r}")
        folder = p.parent
        paths = {"json": p, "md": folder / "report.md", "html": folder / "report.html"}
        if (folder / "k_table.json").exists():
            paths["k_table"] = folder / "k_table.json"
        return cls(**{k: v for k, v in data.items() if k in named},
                   extra={k: v for k, v in data.items() if k not in named}, paths=paths)

    def to_dict(self) -> dict[str, Any]:
        """The results.json object."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("paths", "extra")}
        return {**out, **self.extra}


def analyze(target: PathLike | None = None, draft: PathLike | None = None, method: str | None = None, *,
            workload: str | Sequence[str] = "auto",
            prompts: Sequence[str] | Mapping[str, Sequence[str]] | Path | None = None,
            k: Sequence[int] | None = None, batch_sizes: Sequence[int] | None = None,
            temperatures: Sequence[float] | None = None, repeats: int | None = None,
            max_new_tokens: int | None = None, prompt_tokens: int | None = None, extend_s: float | None = None,
            quick: bool = False,
            grid: str = "star", out: PathLike | None = None, device: str = "cpu", threads: int | None = None,
            compile: bool | None = None, cached_costs: bool = False, progress: bool = False,
            **proposer_options: object) -> Analysis:
    """Measure plain against speculative decoding over (workload, k, batch, temperature),
    predict the speed-ups from measured costs, write the report and return it.

    target, draft, method and proposer options: as for `LLM` (default: the bundled pair).
    workload: "auto" (chat for a target with a chat template, else "all"), "all", one of code,
    long-code, prose, grounded, random, chat, or a list of them; or `prompts`, your own texts (a
    list, or a dict of name -> texts) or a prompt file (a Path: ShareGPT JSON, OpenAI-chat or
    {"prompt"} JSONL; analysis/conversations.py). k, batch_sizes, temperatures,
    repeats, max_new_tokens, prompt_tokens: the grid (default: `quick`'s or the full one);
    extend_s: seconds of extra groups for cells whose interval is wider than ±10% (None: a
    share of the decode time).
    cached_costs: reuse the cost model's cached step times; progress: bars on stderr.
    """
    s = grid_settings(quick, k=_listed(k), batch_sizes=_listed(batch_sizes), temperatures=_listed(temperatures),
                      repeats=repeats, max_new_tokens=max_new_tokens, prompt_tokens=prompt_tokens, extend_s=extend_s)
    if grid not in GRIDS:
        raise ConfigError(f"grid must be one of {', '.join(GRIDS)}, got {grid!r}")
    if prompts is None and workload != "auto":
        pick_workloads(workload, None)                     # a bad name is refused before loading
    want = speculation(draft, method, max(s["k"]), None, proposer_options)
    target_dir, draft_dir = default_pair(target, want.draft, want.method)
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="specdec-analysis-"))
    with Progress(disabled=not progress) as bars:
        bars.note("loading models and prompts")
        models = load_models(target_dir, draft_dir, device=device, threads=threads, compile=compile,
                             method=want.method)
        has_draft = models.draft is not None
        spec = spec_config(want.method, max(s["k"]), DEFAULT_K_MAX, has_draft, want.options)
        if spec.method == "none":
            raise ConfigError("nothing to analyze with method 'none': give draft=DIR or method=NAME")

        def spec_for_k(kk: int) -> SpecConfig:
            return spec_config("none" if kk == 0 else spec.method, kk, DEFAULT_K_MAX, has_draft, want.options)

        if isinstance(prompts, Path):
            encoded = {prompts.stem: encode_prompts(read_prompts(prompts).items, models.tokenizer)}
        elif prompts is not None:
            texts = dict(prompts) if isinstance(prompts, Mapping) else {
                "prompts": [prompts] if isinstance(prompts, str) else list(prompts)}
            encoded = {name: [models.tokenizer.encode(_text(t)) for t in ts] for name, ts in texts.items()}
        else:
            n = s["repeats"] * max(s["batch_sizes"])
            long_tokens = long_prompt_tokens(models.target.config.max_position_embeddings, s["max_new_tokens"])
            names, why = pick_workloads(workload, models.tokenizer)
            bars.note(f"workloads: {', '.join(names)} ({why})")
            encoded = {w: load_workload(w, models.tokenizer, n=n, prompt_tokens=s["prompt_tokens"],
                                        long_tokens=long_tokens) for w in names}
        described = (f"the draft model `{models.draft_path.name}`" if spec.method == "draft" and models.draft_path
                     else f"method `{spec.method}`")
        paths = run_session(models, encoded, spec_for_k, s, described, folder, bars, full=grid == "full",
                            quick=quick, device=device, remeasure=not cached_costs,
                            threads_fixed=threads is not None)
    result = Analysis.load(paths["json"])
    return Analysis(**{**{f.name: getattr(result, f.name) for f in fields(result)}, "paths": dict(paths)})


def _listed(values: Sequence[Any] | None) -> list[Any] | None:
    return None if values is None else list(values)


def _text(prompt: object) -> str:
    if not isinstance(prompt, str) or not prompt:
        raise PromptError("prompts must be non-empty strings")
    return prompt
