"""Load and save Hugging Face checkpoint directories, and load GGUF files.

A directory holds `config.json`, `model.safetensors` (or a sharded
`model.safetensors.index.json`) and `tokenizer.json`. Weights may be stored in
fp16/bf16; they are upcast to float32 at load because bf16 compute is unusably slow
on the CPUs we target. A GGUF file (llama.cpp's format, models/gguf_file.py) loads the same
way: its config and its weights, dequantized to float32, take the folder's place.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import CheckpointError, ConfigError
from .config import ModelConfig
from .gguf_file import read_gguf
from .llama import LlamaModel
from .linear import choose_kernel
from .memory import check_checkpoint, gguf_sizes
from .quantize import (QUANT_CONFIGS, check_weights, quant_layout, quantized_names,
                       round_state_dict, stored_weights)
from .chat_template import SPECIAL_NAMES
from .tokenizer import Tokenizer, TokenizerRules


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    try:
        if single.exists():
            return load_file(str(single))
        if index.exists():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            sd = {}
            for f in files:
                sd.update(load_file(str(path / f)))
            return sd
    except (SafetensorError, OSError, json.JSONDecodeError, KeyError) as e:
        raise CheckpointError(f"corrupt weights in {path}: {e}") from e
    raise CheckpointError(f"no model.safetensors or model.safetensors.index.json in {path}")


def empty_model(cfg: ModelConfig, weights: str) -> LlamaModel:
    """The module the load fills. int8 or int4: built on the meta device in that layout and
    given uninitialised storage, so that no float32 copy of the linear weights ever exists
    (the stored tensors are rounded one by one as they load)."""
    check_weights(weights, cfg)
    if weights == "float32":
        return LlamaModel(cfg)
    with torch.device("meta"):
        model = LlamaModel(cfg)
        quant_layout(model, weights)
    return model.to_empty(device="cpu")


def load_model(path: str | Path, device: str = "cpu", dtype=torch.float32,
               prepare: bool = True, exact: bool = True, compile: bool | None = None,
               weights: str | None = None) -> LlamaModel:
    """Build a `LlamaModel` from a checkpoint directory or a GGUF file (models/gguf_file.py)
    and load its weights. `exact`: a
    row-invariant linear kernel (a target's; models/linear.py), else the fastest (a draft's).
    `compile`: the compiled decoder (models/native on the CPU, CUDA graphs on CUDA) where it
    builds (None, the default), always (True: a ConfigError where it cannot) or never (False:
    eager PyTorch). `weights`: "float32", "int8" or "int4" (rounded at load,
    models/quantize.py), or None: as stored (what `specdec quantize` wrote, else float32; a
    GGUF's weights are dequantized to float32, then rounded like a float32 folder's)."""
    path = Path(path)
    check_weights(weights)
    if path.is_file():                                      # a GGUF, or read_gguf says what it is not
        ck = read_gguf(path)                                # checked whole before a weight is read
        cfg, raw, sizes = ModelConfig.from_dict(ck.config), ck.config, gguf_sizes(ck)
    elif path.is_dir():
        cfg = ModelConfig.from_file(path / "config.json")
        raw, sizes, ck = json.loads((path / "config.json").read_text()), None, None
    else:
        raise CheckpointError(f"checkpoint not found: {path} (a Hugging Face checkpoint folder or a .gguf file)")
    stored = stored_weights(raw)
    mtp = bool(raw.get("num_nextn_predict_layers"))         # MTP layers ride along: not decoded here
    weights = weights or stored
    if stored != "float32" and weights != stored:
        raise ConfigError(f"{path.name} stores {stored} weights (written by `specdec quantize`): load it "
                          f"with --dtype {stored}, or without --dtype")
    check_weights(weights, cfg)
    check_checkpoint(path, device, weights, cfg.vocab_size * cfg.hidden_size, sizes)   # before any weight is read
    model = empty_model(cfg, weights)
    if ck is not None:                                      # a Q4_0 file's int4 load keeps its blocks exactly
        sd = ck.state_dict(int4=quantized_names(model) if weights == "int4" else ())
    else:
        sd = _read_state_dict(path)
    if ("model.embed_tokens.weight" in sd and (cfg.tie_word_embeddings or "lm_head.weight" not in sd)
            and "lm_head.weight_scale" not in sd):
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]  # tied, or omitted by the checkpoint
    sd = {k: v for k, v in sd.items() if not k.endswith("rotary_emb.inv_freq") and not (mtp and _mtp_key(k, cfg))}
    if weights != "float32" and stored == "float32":
        round_state_dict(sd, [n for n in quantized_names(model) if n + ".weight_scale" not in sd], weights)
    try:
        model.load_state_dict(sd, strict=True)             # copied into the fp32 parameters tensor by tensor
    except RuntimeError as e:
        detail = " ".join(str(e).split())[:300]
        raise CheckpointError(f"weights in {path} do not match config.json: {detail}") from e
    exact_int4 = sum(k.endswith(".weight_scale") for k in sd) if ck is not None else 0
    del sd
    model.reset_rope()
    model = model.to(device=device, dtype=dtype)
    model.provenance = provenance(path, ck, stored, weights, exact_int4)
    if prepare:
        model.prepare(choose_kernel(torch.device(device).type, cfg.hidden_size,
                                    cfg.intermediate_size, exact, native=compile is not False))
        if torch.device(device).type == "cuda" and compile is not False:
            from .cuda_graphs import CudaGraphs
            model.runner.use_graphs(CudaGraphs(model, exact=exact))
        elif compile and model.runner.path != "native":
            from .native import load, supported
            why = supported(model) or ("no C compiler could build it" if load() is None else "unknown")
            raise ConfigError(f"--compile: the native decoder cannot run {path.name}: {why}")
    return model


def provenance(path: Path, ck, stored: str, weights: str, exact_int4: int) -> dict:
    """What a loaded model's weights are and how they came to be, for `generate --json` and
    the analysis report: the file, the types it stores (a GGUF's GGML types, by count), the
    type the decoder computes with, and how the one became the other."""
    if ck is None:
        how = "as stored" if weights == stored else f"rounded to {weights} at load"
        return {"file": path.name, "stored": {stored: None}, "weights": weights, "how": how}
    if weights == "float32":
        how = "dequantized to float32 at load"
    else:
        how = (f"dequantized to float32, then rounded to {weights} at load"
               + (f" ({exact_int4} Q4_0 matrices held exactly as stored)" if exact_int4 else ""))
    return {"file": path.name, "stored": ck.type_counts(), "weights": weights, "how": how}


def _mtp_key(key: str, cfg: ModelConfig) -> bool:
    """A weight of an MTP layer (models/head_loader.py): layers past num_hidden_layers, which
    the decoder does not run (--method mtp reads them)."""
    parts = key.split(".")
    return (len(parts) > 2 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdigit()
            and int(parts[2]) >= cfg.num_hidden_layers)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A checkpoint folder's tokenizer: tokenizer.json, with the rules tokenizer_config.json
    states (special-token flags and strings) and the chat template from wherever the folder
    keeps it (models/chat_template.py)."""
    path = Path(path)
    if path.is_file():                                   # a GGUF file: its metadata says all of it
        ck = read_gguf(path)
        return Tokenizer.from_str(ck.tokenizer_json, bos_id=ck.config.get("bos_token_id"),
                                  eos_id=ck.config.get("eos_token_id"), rules=_rules(ck.tokenizer_config, None),
                                  origin=f"the vocabulary of {path.name}")
    cfg = _json(path / "config.json")
    tcfg = _json(path / "tokenizer_config.json")
    gen = _json(path / "generation_config.json")
    return Tokenizer.from_file(path / "tokenizer.json", bos_id=cfg.get("bos_token_id", gen.get("bos_token_id")),
                               eos_id=gen.get("eos_token_id", cfg.get("eos_token_id")),
                               rules=_rules(tcfg, _folder_template(path, tcfg)))


def _rules(tcfg: dict, template: str | None) -> TokenizerRules:
    """tokenizer_config.json's (or a GGUF file's) special-token flags and strings, and the
    chat template (a folder's from wherever it keeps it; a GGUF's from its metadata)."""
    return TokenizerRules(add_bos=tcfg.get("add_bos_token"), add_eos=tcfg.get("add_eos_token"),
                          special_tokens={n: s for n in SPECIAL_NAMES if (s := _token_str(tcfg.get(n)))},
                          chat_template=template if template is not None else tcfg.get("chat_template") or None)


def _json(path: Path) -> dict:
    """A JSON object file's contents; {} where the file is absent; CheckpointError where corrupt."""
    if not path.exists():
        return {}
    try:
        d = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"corrupt {path.name} in {path.parent}: {e}") from e
    if not isinstance(d, dict):
        raise CheckpointError(f"corrupt {path.name} in {path.parent}: not a JSON object")
    return d


def _folder_template(path: Path, tcfg: dict) -> str | None:
    """The folder's chat template: chat_template.jinja, chat_template.json, then
    tokenizer_config.json's (a string, or named templates: the one named "default")."""
    if (path / "chat_template.jinja").exists():
        return (path / "chat_template.jinja").read_text()
    tmpl = _json(path / "chat_template.json").get("chat_template") or tcfg.get("chat_template")
    if isinstance(tmpl, list):
        tmpl = next((t.get("template") for t in tmpl if isinstance(t, dict) and t.get("name") == "default"), None)
    return tmpl if isinstance(tmpl, str) and tmpl else None


def _token_str(tok) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(tok, dict):
        tok = tok.get("content")
    return tok if isinstance(tok, str) else None


def save_checkpoint(model: LlamaModel, tokenizer_json: str | Path, out: str | Path,
                    dtype=torch.float16, card: str | None = None) -> Path:
    """Write a Hugging Face checkpoint directory (float weights stored as `dtype`). A model with
    quantized weights keeps them, with their float32 scales, and says so in config.json (its
    lm_head is untied: stored apart from the embedding)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    quantized = model.weight_dtype != "float32"
    cfg = replace(model.config, tie_word_embeddings=False) if quantized else model.config
    keep = lambda k, v: v.dtype in (torch.int8, torch.uint8) or k.endswith(".weight_scale")  # noqa: E731
    sd = {k: v.detach().to("cpu", None if keep(k, v) else dtype).contiguous() for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    tmp = out / "model.safetensors.tmp"
    save_file(sd, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    hf = cfg.to_hf_dict()
    if quantized:
        hf["quantization_config"] = QUANT_CONFIGS[model.weight_dtype]
    (out / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    tok = Path(tokenizer_json)
    if tok.resolve() != (out / "tokenizer.json").resolve():
        (out / "tokenizer.json").write_text(tok.read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": None, "add_bos_token": True, "model_max_length": cfg.max_position_embeddings,
    }, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "do_sample": False,
    }, indent=2) + "\n")
    if card:
        (out / "README.md").write_text(card)
    return out
