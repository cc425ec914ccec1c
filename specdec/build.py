"""Build an Engine from checkpoint directories: what the CLI, the server and the API call.

    models = load_models("models/target", "models/draft")
    engine = make_engine(models, SpecConfig(method="draft", k="auto"), EngineConfig())

This is where the machine is measured, never below, and cheaply, so that decoding starts at
once: `k="auto"` gets the adaptive policy over a prior of a few forwards (costs/prior.py, about
a second, once per machine) that learns what rounds cost from the rounds it runs
(adaptive/online.py), and `layerskip` without `layerskip_layers` gets its depth from a probe of
one forward (adaptive/layer_probe.py). `calibrate_costs` (`specdec profile`) is the full
measurement up front, cached, which both then read instead. The engine receives the proposer
and the policy ready-made.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
import sys
import weakref

import torch

from .adaptive.calibrate import round_timer
from .adaptive.layer_probe import depth_agreement, probed_layers
from .adaptive.layers import calibrated_layers
from .adaptive.online import OnlineRounds
from .adaptive.policy import AdaptiveK
from .config import AUTO_TREE_METHODS, EngineConfig, SpecConfig
from .costs.cost_model import CostModel
from .costs.key import CostKey
from .costs.prior import prior_costs
from .costs.profiling import grid_rows
from .proposers.tree_size import tree_profile
from .defaults import default_draft, default_head, default_parallel_draft, default_target
from .engine.engine import Engine, cache_length
from .engine.policy import KPolicy, simple_policy
from .errors import ConfigError
from .models.feature_head import FeatureHead
from .models.head_loader import load_head, load_mtp, shipped_head, shipped_heads
from .models.llama import LlamaModel
from .models.memory import require
from .models.loader import load_model, load_tokenizer
from .models.mask_token import read_mask
from .models.quantize import check_weights
from .models.tokenizer import Tokenizer
from .proposers import create as create_proposer
from .proposers.auto import DEFAULT_ARMS
from .proposers.base import Proposer
from .proposers.vocab_map import VocabMap

DEFAULT_K_MAX = 8           # the largest k the adaptive policy may choose unless told (`--k-max`)
NGRAM_MIN, NGRAM_MAX = 1, 4  # ngram's n range unless told (`--ngram-min`, `--ngram-max`)


@dataclass
class Models:
    target: LlamaModel
    tokenizer: Tokenizer
    draft: LlamaModel | None = None
    target_path: Path | None = None
    draft_path: Path | None = None
    head: FeatureHead | None = None         # the eagle or mtp proposer's weights


def default_pair(target: str | Path | None, draft: str | Path | None,
                 method: str | None = None) -> tuple[Path, Path | None]:
    """The checkpoints to load: the bundled target and draft when no target is named (for
    method `parallel`, the bundled parallel draft); a named target gets a draft only when one
    is named too."""
    if target is None:
        return default_target(), Path(draft) if draft else (default_parallel_draft() if method == "parallel"
                                                            else default_draft())
    return Path(target), Path(draft) if draft else None


def load_models(target: str | Path | None = None, draft: str | Path | None = None, device: str = "cpu",
                threads: int | None = None, compile: bool | None = None, weights: str | None = None,
                draft_weights: str | None = None, method: str | None = None,
                head: str | Path | None = None) -> Models:
    """Load the target (and draft; `default_pair` picks them); a draft whose tokenizer differs
    from the target's gets its `vocab_map` (proposers/vocab_map.py), or is refused with the reason. `compile`: use the compiled decoder (None: where it builds;
    see models/loader.py). `weights`, `draft_weights` (default: the target's): "float32",
    "int8", "int4" (models/quantize.py), or None: as each checkpoint stores them. `method`, `head`:
    see `feature_head`."""
    target, draft = default_pair(target, draft, method)
    for w in (weights, draft_weights or weights):
        check_weights(w)                                  # before minutes of loading
    if threads:
        torch.set_num_threads(threads)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but CUDA is not available")
    t = load_model(target, device=device, compile=compile, weights=weights)
    tok = load_tokenizer(target)
    d = None
    if draft is not None:
        d = load_model(draft, device=device, exact=False, compile=compile,   # a draft's numerics change no output
                       weights=draft_weights or weights)
        dtok = load_tokenizer(draft)
        d.mask_token = read_mask(draft, d.config.hidden_size)     # a parallel draft's (models/mask_token.py)
        if d.config.vocab_size != t.config.vocab_size or dtok.tok.get_vocab() != tok.tok.get_vocab():
            # another tokenizer: the draft drafts across vocabularies (proposers/cross_vocab.py), or a
            # ConfigError says why this pair cannot
            d.vocab_map = VocabMap.build(tok, dtok, t.config.vocab_size, d.config.vocab_size)
    return Models(t, tok, d, Path(target), Path(draft) if draft else None,
                  feature_head(t, Path(target), method, head))


def feature_head(target: LlamaModel, target_path: Path, method: str | None, head: str | Path | None
                 ) -> FeatureHead | None:
    """The feature head a method needs: `head` where named; for eagle (and auto, whose eagle arm
    reads it) without one, the shipped head trained for this target (`find_head`); for mtp, the
    target checkpoint's own MTP layer."""
    if method == "mtp":
        if head is not None:
            raise ConfigError("--head names an EAGLE head; --method mtp reads the target checkpoint's own MTP layers")
        return load_mtp(target_path, target)
    if head is None and method == "auto":
        head = find_head(target_path)         # an arm where auto_arms names eagle; else unused
    elif head is None and method == "eagle":
        head = find_head(target_path)
        if head is None:
            raise ConfigError("method 'eagle' needs a feature head trained for this target: --head DIR "
                              "(`specdec train eagle --target DIR_OR_GGUF --out DIR` trains one)")
    return load_head(head, target, target_path) if head is not None else None


def find_head(target_path: Path) -> Path | None:
    """The shipped EAGLE head for the checkpoint at `target_path`: the bundled head for the
    bundled target, else the bundled head folder that names this checkpoint's weights hash (a
    GGUF file as its package ships it, say); None where there is none."""
    if target_path.resolve() == default_target().resolve():
        return default_head()
    return shipped_head(target_path, shipped_heads())


def spec_config(method: str | None, k: int | str, k_max: int, has_draft: bool,
                options: Mapping[str, object], tree: int = 0) -> SpecConfig:
    """The SpecConfig for the loaded models, by the one rule the CLI and the API share: the
    method defaults to `draft` when a draft model is loaded, else `none`; `none` means k = 0;
    a fixed k above k_max raises k_max to it; ngram's n range defaults to NGRAM_MIN..NGRAM_MAX."""
    method = method or ("draft" if has_draft else "none")
    if method == "draft" and not has_draft:
        raise ConfigError("method 'draft' needs a draft model (--draft DIR; in Python, draft=DIR)")
    if method == "none":
        k = 0
    if isinstance(k, int) and not isinstance(k, bool) and isinstance(k_max, int):
        k_max = max(k_max, k)
    return SpecConfig(method=method, k=k, k_max=k_max, options={"ngram_min": NGRAM_MIN, "ngram_max": NGRAM_MAX,
                                                                **options}, tree=tree)


def resolve_spec(target: LlamaModel, spec: SpecConfig, calibrate: bool = False) -> SpecConfig:
    """`spec` with what the proposer needs measured filled in: layer-skip's depth, where a
    layerskip proposer (or an auto arm) is asked for without `layerskip_layers`: the depth
    `calibrate_costs` chose by decoding with each (cached), else the probe's (about a second,
    cached); with `calibrate`, decoded for now where none is cached."""
    opts = spec.opts
    arms = opts.get("auto_arms") or DEFAULT_ARMS
    if isinstance(arms, str):
        arms = [a.strip() for a in arms.split(",")]
    wants = spec.method == "layerskip" or (spec.method == "auto" and "layerskip" in arms)
    if (not wants or "layerskip_layers" in opts or spec.k == 0
            or target.config.num_hidden_layers < 2):
        return spec
    layers = calibrated_layers(target, measure=calibrate) or probed_layers(target)
    return replace(spec, options={**opts, "layerskip_layers": layers})


def make_policy(spec: SpecConfig, proposer: Proposer, target: LlamaModel, cost_model: CostModel | None = None,
                max_batch: int = 1) -> KPolicy:
    """The k policy for `spec`: fixed or heuristic, or for k = "auto" the adaptive policy over
    `cost_model`. Without one it starts cold and times no round: the prior's forwards at batch
    rows 1 and `max_batch` (costs/prior.py; from the cache, else timed now, about a second),
    the round tables `specdec profile` measured where the cache has them, and an online table
    that learns the other rounds' costs from those decoded (adaptive/online.py)."""
    if spec.k != "auto":
        return simple_policy(spec)
    if proposer.name == "none":
        return AdaptiveK(spec.k_max, proposer, None)
    k_max = min(spec.k_max, proposer.max_k or spec.k_max)
    subs = getattr(proposer, "arms", None) or [proposer]
    if cost_model is not None:
        return _measured_acceptance(AdaptiveK(k_max, proposer, cost_model), subs, target)
    cost_model = prior_costs(target, proposer, k_max, max_batch)
    for sub in subs:
        for sampled in ([False, True] if sub.name != "none" else []):
            cost_model.load_rounds(sub.cost_key(), sampled)
    plain = CostKey("none", "features" if proposer.uses_features else "")   # what a plain round runs
    return _measured_acceptance(AdaptiveK(k_max, proposer, cost_model, OnlineRounds(cost_model, plain=plain)),
                                subs, target)


def _measured_acceptance(policy: AdaptiveK, proposers: list[Proposer], target: LlamaModel) -> AdaptiveK:
    """`policy` with a layer-skip proposer's greedy acceptance starting from its depth's measured
    agreement (the calibration's or the probe's, cached when its depth was chosen) instead of the
    optimistic prior: a shallow draft's acceptance is known before its first round, and trying
    it on the prior's optimism costs whole draft forwards of the target's first layers."""
    for sub in proposers:
        a = depth_agreement(target, sub.layers) if sub.name == "layerskip" else None
        if a is not None:
            policy.acc.set_prior(sub.cost_key(), "greedy", a)
    return policy


def calibrate_costs(models: Models, spec: SpecConfig, max_batch: int = 1, remeasure: bool = False) -> CostModel:
    """The full measurement up front (`specdec profile`), for k = "auto" at the steady state from
    its first round: layer-skip's depth by decoding with each candidate, the forwards at every
    q and batch row up to `max_batch`, and real rounds (greedy and sampled, for the proposer or
    each arm of `auto`) at those rows. All cached (timed where the cache lacks them; the rounds
    all with `remeasure`), where `make_policy` and `resolve_spec` read them: minutes, once per
    machine."""
    spec = resolve_spec(models.target, replace(spec, k="auto"), calibrate=True)
    config = EngineConfig(max_batch=max_batch, max_model_len=models.target.config.max_position_embeddings)
    proposer = create_proposer(spec.method, models.target, spec, draft_model=models.draft, head=models.head,
                               rows=max_batch, max_len=cache_length(config, spec))
    k_max = min(spec.k_max, proposer.max_k or spec.k_max)
    rows = grid_rows(max_batch)
    cost_model = CostModel.load_or_measure(models.target, proposer, k_max=k_max, batch_sizes=rows)
    timer = round_timer(models.target, spec, models.draft, head=models.head)
    for sub in getattr(proposer, "arms", None) or [proposer]:
        for sampled in ([False, True] if sub.name != "none" else []):
            cost_model.measure_rounds(timer, sub.cost_key(), rows, sampled, remeasure=remeasure)
    return cost_model


# --tree auto's verify times, target -> {max_batch: t(b, q)}: timed once per target and batch
# size in a process (the analyzer builds engines for every lockstep group)
_TREE_COSTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def make_engine(models: Models, spec: SpecConfig, config: EngineConfig,
                cost_model: CostModel | None = None) -> Engine:
    """An Engine for `models`: the context clamped to the target's, the proposer built from
    the registry, the policy from `make_policy`."""
    if config.max_model_len > models.target.config.max_position_embeddings:
        config = replace(config, max_model_len=models.target.config.max_position_embeddings)
    spec = resolve_spec(models.target, spec)
    require_cache_memory(models, spec, config)
    method = spec.method if spec.k != 0 else "none"
    tree_cost = None
    if spec.tree == "auto" and method in AUTO_TREE_METHODS:   # a tree's size is weighed against these times
        timed = _TREE_COSTS.setdefault(models.target, {})
        if config.max_batch not in timed:              # once per target and batch size in a process
            print(f"specdec: timing the target's verify forwards for --tree auto (batch up to {config.max_batch})",
                  file=sys.stderr)
            timed[config.max_batch] = tree_profile(models.target, config.max_batch).t
        tree_cost = timed[config.max_batch]
    proposer = create_proposer(method, models.target, spec, draft_model=models.draft, head=models.head,
                               rows=config.max_batch, max_len=cache_length(config, spec), tree_cost=tree_cost)
    policy = make_policy(spec, proposer, models.target, cost_model, config.max_batch)
    return Engine(models.target, spec, config, proposer=proposer, policy=policy)


def require_cache_memory(models: Models, spec: SpecConfig, config: EngineConfig) -> None:
    """Refuse (ResourceError) an engine whose KV caches, the target's and the draft's, would
    not fit in the memory free now: checked before either is allocated or anything measured.
    The context is clamped to the target's, as make_engine does."""
    config = replace(config, max_model_len=min(config.max_model_len, models.target.config.max_position_embeddings))
    n = cache_length(config, spec)
    need = sum(m.cache_bytes(config.max_batch, n) for m in (models.target, models.draft) if m is not None)
    require(need, f"the KV caches for --max-batch {config.max_batch} x --max-model-len {config.max_model_len}",
            "lower --max-batch or --max-model-len", models.target.device)
