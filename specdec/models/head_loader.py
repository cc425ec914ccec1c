"""Feature heads on disk: an EAGLE head folder, or MTP layers inside a target checkpoint.

    eagle/  config.json (HeadConfig: its shape, its target's architecture and weights hash)
            model.safetensors (the head's weights in DeepSeek-V3's MTP names, and draft_vocab)
    target/ config.json with "num_nextn_predict_layers": n, and the head's weights under
            model.layers.{num_hidden_layers + i}. (DeepSeek-V3's layout; the first is used)

Both hold the same module (models/feature_head.py); neither holds an embedding or an output
head: the target's are shared.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..defaults import MODELS_DIR
from ..errors import CheckpointError
from .eagle3 import is_eagle3, refuse_eagle3
from .feature_head import HEAD_ARCHITECTURE, FeatureHead, HeadConfig, check_compatible
from .llama import LlamaModel

MTP_KEY = "num_nextn_predict_layers"    # DeepSeek-V3's config field: how many MTP layers follow


def weights_files(checkpoint: str | Path) -> list[Path]:
    """A checkpoint's weights file(s): the file itself for a GGUF, else its safetensors."""
    path = Path(checkpoint)
    if path.is_file():
        return [path]
    return [path / "model.safetensors"] if (path / "model.safetensors").exists() else sorted(path.glob("*.safetensors"))


def weights_bytes(checkpoint: str | Path) -> int:
    """The size of a checkpoint's weights file(s)."""
    return sum(f.stat().st_size for f in weights_files(checkpoint))


def weights_sha256(checkpoint: str | Path) -> str:
    """SHA-256 of a checkpoint's weights file(s): what a head names as its target. A checkpoint
    that is one file (a GGUF) is hashed whole."""
    h = hashlib.sha256()
    for f in weights_files(checkpoint):
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def shipped_heads() -> list[Path]:
    """Every EAGLE head folder among the bundled ones (each names its target by weights hash;
    `shipped_head` picks the one trained for a given target)."""
    if not MODELS_DIR.is_dir():
        return []
    return [d for d in sorted(MODELS_DIR.iterdir())
            if (d / "config.json").is_file() and HEAD_ARCHITECTURE in (d / "config.json").read_text()]


def shipped_head(target_path: str | Path, folders: list[Path]) -> Path | None:
    """The first of `folders` (EAGLE head folders) whose config names the checkpoint at
    `target_path` as its target, by weights hash; the target is hashed at most once, and only
    when a head's recorded size (where it has one) is the target's."""
    size, sha = weights_bytes(target_path), None
    for folder in folders:
        try:
            d = json.loads((folder / "config.json").read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue                                   # not a head: load_head would say why
        want = d.get("target_sha256") if isinstance(d, dict) else None
        if not want or d.get("target_bytes") not in (None, 0, size):
            continue
        sha = sha or weights_sha256(target_path)
        if want == sha:
            return folder
    return None


def mtp_prefix(num_hidden_layers: int, i: int = 0) -> str:
    return f"model.layers.{num_hidden_layers + i}."


def save_head(head: FeatureHead, out: str | Path, card: str | None = None, dtype=torch.float16) -> Path:
    """Write an EAGLE head folder (weights as `dtype`, draft_vocab as int64)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.weights().items()}
    sd["draft_vocab"] = head.draft_vocab.detach().cpu().contiguous()
    tmp = out / "model.safetensors.tmp"
    save_file(sd, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(head.config.to_dict(), indent=2) + "\n")
    if card:
        (out / "README.md").write_text(card)
    return out


def _build(cfg: HeadConfig, sd: dict, where: Path) -> FeatureHead:
    head = FeatureHead(cfg)
    sd = {k: v.float() if v.is_floating_point() else v for k, v in sd.items()}
    if "draft_vocab" not in sd:
        sd["draft_vocab"] = torch.arange(cfg.draft_vocab_size)
    try:
        head.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"head weights in {where} do not match its config: {' '.join(str(e).split())[:300]}") from e
    vocab = head.draft_vocab
    if vocab.numel() and (vocab.min() < 0 or vocab.max() >= cfg.vocab_size or vocab.unique().numel() != vocab.numel()):
        raise CheckpointError(f"head in {where}: draft_vocab must list distinct token ids below {cfg.vocab_size}")
    return head.eval()


def _read(path: Path) -> dict:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"corrupt weights in {path.parent}: {e}") from e


def load_head(path: str | Path, target: LlamaModel, target_path: str | Path | None = None) -> FeatureHead:
    """An EAGLE head folder, checked against `target` (hidden size, vocabulary, and the weights
    hash of `target_path` when given)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise CheckpointError(f"no feature head in {path} (config.json not found)")
    try:
        d = json.loads((path / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"corrupt config.json in {path}: {e}") from e
    if not isinstance(d, dict):
        raise CheckpointError(f"corrupt config.json in {path}: not an object")
    if is_eagle3(d):
        refuse_eagle3(path, target)                # a ConfigError naming what differs
    cfg = HeadConfig.from_dict(d)
    sha = weights_sha256(target_path) if target_path is not None and cfg.target_sha256 else None
    check_compatible(cfg, target.config, sha, f"the head in {path}")
    if not (path / "model.safetensors").is_file():
        raise CheckpointError(f"no model.safetensors in {path}")
    head = _build(cfg, _read(path / "model.safetensors"), path)
    head.source = "eagle"
    return head


def load_mtp(target_path: str | Path, target: LlamaModel) -> FeatureHead:
    """The first MTP layer a target checkpoint carries (config.json's num_nextn_predict_layers)."""
    path = Path(target_path)
    d = json.loads((path / "config.json").read_text())
    if int(d.get(MTP_KEY) or 0) < 1:
        raise CheckpointError(f"{path} has no MTP layers (config.json's {MTP_KEY} is not >= 1): "
                              "--method mtp reads a checkpoint's own; `specdec train eagle --mtp` writes one")
    prefix = mtp_prefix(target.config.num_hidden_layers)
    sd = {}
    for f in ([path / "model.safetensors"] if (path / "model.safetensors").exists() else sorted(path.glob("*.safetensors"))):
        sd.update({k[len(prefix):]: v for k, v in _read(f).items() if k.startswith(prefix)})
    if not sd:
        raise CheckpointError(f"{path} declares {MTP_KEY} but holds no weights under {prefix}*")
    cfg = HeadConfig.for_target(target.config)
    if "mlp.gate_proj.weight" in sd:                  # the layer's own width may differ from the target's
        cfg = HeadConfig(**{**cfg.__dict__, "intermediate_size": sd["mlp.gate_proj.weight"].shape[0]})
    head = _build(cfg, sd, path)
    head.source = "mtp"
    return head


def write_mtp(head: FeatureHead, target_path: str | Path, out: str | Path, dtype=torch.float16) -> Path:
    """A copy of the target checkpoint in `out` that carries `head` as its MTP layer (the full
    vocabulary: the layout has no draft vocabulary)."""
    src, out = Path(target_path), Path(out)
    if src.resolve() == out.resolve():
        raise CheckpointError("--mtp writes a copy of the target: give --out another folder")
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", "config.json", "README.md"):
            shutil.copyfile(f, out / f.name)
    d = json.loads((src / "config.json").read_text())
    sd = _read(src / "model.safetensors")
    prefix = mtp_prefix(int(d["num_hidden_layers"]))
    sd.update({prefix + k: v.detach().to("cpu", dtype).contiguous() for k, v in head.weights().items()})
    tmp = out / "model.safetensors.tmp"
    save_file(sd, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    d[MTP_KEY] = 1
    (out / "config.json").write_text(json.dumps(d, indent=2) + "\n")
    return out
