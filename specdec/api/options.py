"""The API's arguments turned into specdec's configuration: which checkpoints, which proposer
and k (from `method=`/`k=` or from vLLM's `speculative_config` dict), and proposer options.

Once the models are loaded, `build.spec_config` turns what was asked for into a SpecConfig by
the command line's rules. Bad input raises ConfigError with one line, as the CLI prints it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..config import SpecConfig
from ..errors import ConfigError
from ..proposers import available

# vLLM's speculative_config["method"] names -> specdec's proposers; specdec's own names
# (draft, ngram, suffix, layerskip, auto, none) are accepted as they are
VLLM_METHODS = {"draft_model": "draft", "ngram": "ngram", "suffix": "suffix", "eagle": "eagle",
                "eagle3": "eagle", "mtp": "mtp"}

# the speculative_config keys understood: vLLM's names, and the proposer option each sets
# ("" for those handled apart: method, model, num_speculative_tokens)
VLLM_KEYS = {"method": "", "model": "", "num_speculative_tokens": "",
             "prompt_lookup_min": "ngram_min", "prompt_lookup_max": "ngram_max"}

PathLike = str | Path


@dataclass(frozen=True)
class Speculation:
    """What the arguments ask for: a draft checkpoint (or None), a method (None: decided once
    the models are loaded), k, and proposer options."""
    draft: Path | None
    method: str | None
    k: int | str
    options: dict[str, object]
    head: Path | None = None      # eagle's head: vLLM names it speculative_config["model"]


def speculation(draft: PathLike | None, method: str | None, k: int | str,
                speculative_config: Mapping[str, object] | None,
                proposer_options: Mapping[str, object]) -> Speculation:
    """Merge `draft=`/`method=`/`k=` with vLLM's `speculative_config`; a setting given both
    ways is refused rather than silently overridden."""
    options = checked_options(proposer_options)
    path = Path(draft) if draft is not None else None
    if speculative_config is None:
        return Speculation(path, _method(method) if method is not None else None, k, options)
    if not isinstance(speculative_config, Mapping):
        raise ConfigError(f"speculative_config must be a dict, got {type(speculative_config).__name__}")
    unknown = sorted(set(speculative_config) - set(VLLM_KEYS))
    if unknown:
        raise ConfigError(f"unsupported speculative_config key {unknown[0]!r}; supported: {', '.join(VLLM_KEYS)}")
    cfg = dict(speculative_config)
    if "model" in cfg:
        if path is not None:
            raise ConfigError("the draft is given twice: draft= and speculative_config['model']")
        model = cfg["model"]
        if not isinstance(model, (str, Path)):
            raise ConfigError(f"speculative_config['model'] must be a checkpoint directory, got {model!r}")
        path = Path(model)
    if "method" in cfg:
        if method is not None:
            raise ConfigError("the method is given twice: method= and speculative_config['method']")
        method = _vllm_method(cfg["method"])
    elif method is None and "model" in cfg:
        method = "draft"                      # vLLM infers draft_model from a model path
    if "num_speculative_tokens" in cfg:
        n = cfg["num_speculative_tokens"]
        if not isinstance(n, (int, str)) or isinstance(n, bool):
            raise ConfigError(f"speculative_config['num_speculative_tokens'] must be an integer, got {n!r}")
        k = n                                 # its range: SpecConfig's check
    for key, option in VLLM_KEYS.items():
        if option and key in cfg:
            options[option] = cfg[key]
    method = _method(method) if method is not None else None
    if method == "eagle" and "model" in cfg:
        return Speculation(None, method, k, options, head=path)
    return Speculation(path, method, k, options)


def check_k(k: int | str, k_max: int) -> None:
    """Refuse a bad k or k_max before any model is loaded (SpecConfig's own checks)."""
    SpecConfig(method="none", k=k, k_max=k_max)


def checked_options(options: Mapping[str, object]) -> dict[str, object]:
    """Proposer options are named after their proposer (ngram_max, layerskip_layers,
    suffix_depth, auto_arms...): any other keyword is a typo, refused."""
    prefixes = tuple(f"{name}_" for name in available())
    for key in options:
        if not key.startswith(prefixes):
            raise ConfigError(f"unknown option {key!r}: engine options are k_max, max_batch, max_model_len, "
                              f"device, threads and compile; proposer options start with a method name "
                              f"({', '.join(available())})")
    return dict(options)


def _method(name: object) -> str:
    if not isinstance(name, str) or name not in available():
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(available())}")
    return name


def _vllm_method(name: object) -> str:
    if isinstance(name, str) and name in VLLM_METHODS:
        return VLLM_METHODS[name]
    if isinstance(name, str) and name in available():
        return name
    known = sorted(set(VLLM_METHODS) | set(available()))
    raise ConfigError(f"speculative_config method {name!r} is not supported; choose one of {', '.join(known)}")
