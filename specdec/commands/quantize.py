"""`specdec quantize`: write a checkpoint's int8 or int4 copy, which later loads without rounding.

    specdec quantize --model DIR --out DIR_Q [--dtype int8|int4]

The folder holds the linears' quantized weights with their float32 scales
(`<name>.weight_scale`: per output channel for int8, per group of 32 inputs for int4), the
rest as stored, and config.json's `quantization_config` naming the format
(models/quantize.py); the tokenizer files are copied. transformers does not read these
formats; specdec loads the folder as its type by default (`--target DIR_Q`).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import CheckpointError, ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser("quantize", help="write an int8 or int4 copy of a checkpoint (loads without rounding)")
    p.add_argument("--model", type=Path, required=True, help="checkpoint directory to read")
    p.add_argument("--out", type=Path, required=True, help="directory to write (must not exist, or be empty)")
    p.add_argument("--dtype", choices=["int8", "int4"], default="int8", help="the weight type to write")
    p.set_defaults(func=run)


def _stored_float_dtype(path: Path):
    """The dtype the checkpoint stores its embedding in (the other float tensors are written
    in it too, so that they load back unchanged)."""
    import json

    import torch
    from safetensors import safe_open
    name = "model.embed_tokens.weight"
    index = path / "model.safetensors.index.json"
    f = path / (json.loads(index.read_text())["weight_map"][name] if index.exists() else "model.safetensors")
    with safe_open(str(f), framework="pt") as st:
        return st.get_tensor(name).dtype if name in st.keys() else torch.float32


def run(args) -> int:
    from ..models.loader import load_model, save_checkpoint
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise ConfigError(f"--out {args.out} exists and is not an empty directory")
    if args.out.resolve() == args.model.resolve():
        raise ConfigError("--out must differ from --model")
    model = load_model(args.model, weights=args.dtype, prepare=False)
    tok = args.model / "tokenizer.json"
    if not tok.exists():
        raise CheckpointError(f"no tokenizer.json in {args.model}")
    save_checkpoint(model, tok, args.out, dtype=_stored_float_dtype(args.model))
    for extra in ("tokenizer_config.json", "generation_config.json", "special_tokens_map.json"):
        if (args.model / extra).exists():
            shutil.copy2(args.model / extra, args.out / extra)
    size = lambda d: sum(f.stat().st_size for f in d.glob("*.safetensors"))  # noqa: E731
    print(f"{args.out}: {args.dtype} weights, {size(args.out) / 1e6:.1f} MB (from {size(args.model) / 1e6:.1f} MB)")
    return 0
