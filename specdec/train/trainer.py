"""Seeded, resumable training loop with AdamW and a warm-up + cosine schedule.

The cosine runs over whichever budget ends first, tokens or wall time, so a run with a
time limit still finishes with a decayed learning rate. State (weights, optimizer,
step, tokens, elapsed time) is saved to `<work>/state.pt` every few minutes, and the
model is exported as a Hugging Face checkpoint at the same time.

On a CUDA device the forward and backward run under bf16 autocast, and on the CPU too when
`bf16` is set (fp32 master weights and optimizer state either way). On the CPU it is opt-in:
where the cores have bf16 instructions (AVX-512 bf16, AMX) a step takes 0.55x the time of an
fp32 one (the target, 8 x 256 tokens, Zen 4), and where they have not (AVX2) it is slower. The
state file is the same on either device and precision, so a run can move between them.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from ..errors import ConfigError
from ..models.llama import LlamaModel
from ..models.loader import save_checkpoint


@dataclass(frozen=True)
class TrainConfig:
    tokens: int
    minutes: float
    lr: float = 1e-3
    min_lr_frac: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    batch: int = 8
    seq_len: int = 256
    seed: int = 0
    save_every_min: float = 5.0
    threads: int = 2
    device: str = "cpu"
    bf16: bool = False                          # bf16 autocast on the CPU too (always on CUDA)
    stop_after: float | None = None             # minutes this invocation trains before it saves and
                                                # ends (the schedule spans `minutes`; --resume goes on)

    def __post_init__(self):
        for name in ("tokens", "batch", "seq_len", "warmup_steps", "threads"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ConfigError(f"training: {name} must be a positive integer, got {getattr(self, name)!r}")
        if not (self.minutes > 0 and self.lr > 0 and 0 <= self.min_lr_frac <= 1):
            raise ConfigError("training: minutes and lr must be positive, min_lr_frac in [0, 1]")
        if self.stop_after is not None and not self.stop_after > 0:
            raise ConfigError(f"training: --stop-after must be positive minutes, got {self.stop_after!r}")
        if not isinstance(self.bf16, bool):
            raise ConfigError(f"training: bf16 must be True or False, got {self.bf16!r}")
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"training: device must be cpu or cuda, got {self.device!r}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("training: --device cuda, but torch sees no CUDA device here")


def lr_at(cfg: TrainConfig, step: int, progress: float) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    cos = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * cos)


def train(model: LlamaModel, cfg: TrainConfig, batch_fn: Callable[[int], tuple],
          loss_fn: Callable, work: Path, export: Path, tokenizer_json: Path,
          card_fn: Callable[[dict], str] | None = None,
          export_fn: Callable[[str | None], object] | None = None) -> dict:
    """Train until `cfg.tokens` or `cfg.minutes` is spent; resume from `work/state.pt`.
    `export_fn(card)` writes the export (default: `model` as a checkpoint in `export`)."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    work.mkdir(parents=True, exist_ok=True)
    dev = torch.device(cfg.device)
    model.to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    state = {"step": 0, "tokens": 0, "elapsed": 0.0, "loss": float("nan")}
    sp = work / "state.pt"
    if sp.exists():
        ck = torch.load(sp, map_location="cpu", weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
    per_step = cfg.batch * cfg.seq_len
    budget_s = cfg.minutes * 60

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, sp.with_suffix(".tmp"))
        sp.with_suffix(".tmp").replace(sp)
        card = card_fn(state) if card_fn else None
        model.to("cpu")                                 # the export is written from the CPU
        if export_fn is not None:
            export_fn(card)
        else:
            save_checkpoint(model, tokenizer_json, export, card=card)
        model.to(dev)

    model.train()
    last_save, last_log, ema = time.time(), time.time(), None
    stop_at = time.time() + cfg.stop_after * 60 if cfg.stop_after else float("inf")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeRemainingColumn()) as bar:
        task = bar.add_task(export.name, total=1.0, info="")
        while state["tokens"] < cfg.tokens and state["elapsed"] < budget_s and time.time() < stop_at:
            t0 = time.time()
            progress = max(state["tokens"] / cfg.tokens, state["elapsed"] / budget_s)
            for g in opt.param_groups:
                g["lr"] = lr_at(cfg, state["step"], progress)
            x, y = (t if t is None else t.to(dev, non_blocking=True) for t in batch_fn(state["step"]))
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda" or cfg.bf16):
                loss = loss_fn(model, x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            dt = time.time() - t0
            state["step"] += 1
            state["tokens"] += per_step
            state["elapsed"] += dt
            ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
            state["loss"] = ema
            bar.update(task, completed=min(1.0, progress),
                       info=f"step {state['step']} loss {ema:.3f} {per_step / dt:,.0f} tok/s "
                            f"{state['tokens'] / 1e6:.2f}M tok")
            if not bar.console.is_terminal and time.time() - last_log > 60:  # a log file: one line a minute
                bar.console.print(f"{export.name}: {progress:.1%} " + bar.tasks[0].fields["info"])
                last_log = time.time()
            if time.time() - last_save > cfg.save_every_min * 60:
                save()
                last_save = time.time()
    model.eval()
    save()
    model.to("cpu")
    return state


def lm_loss(model: LlamaModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    pos = torch.arange(x.shape[1], device=x.device).expand_as(x)
    logits = model(x, pos)                                                    # (B, T, V)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())


def init_weights(model: LlamaModel) -> None:
    """GPT-2 style init: N(0, 0.02), residual projections scaled by 1/sqrt(2L)."""
    L = model.config.num_hidden_layers
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            std = 0.02 / (2 * L) ** 0.5 if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            torch.nn.init.normal_(p, 0.0, std)
        elif "bias" in name:
            torch.nn.init.zeros_(p)
