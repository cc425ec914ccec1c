"""`specdec train parallel`: a parallel draft for a target, from a draft of its vocabulary.

    specdec train parallel --target DIR --init DRAFT [--corpus extended|sharegpt] --minutes 20

Code targets train on the corpus's windows and the target's own samples (distill.py's mix);
a chat target (`--corpus sharegpt`) on ShareGPT's training split through its chat template and
its own replies (chat_data.py, as `specdec train eagle` does). The loss and the mask groups:
train/parallel.py. The export is the draft's checkpoint with its mask token beside it.
"""
from __future__ import annotations

from pathlib import Path

from ..models.loader import load_model
from .data import Batches, token_stream
from .parallel import exporter, parallel_loss, parallel_model
from .trainer import train

DEFAULT_INIT = Path("models/draft-distill")     # the bundled target's distilled draft


def train_parallel(args, tc, work: Path, out: Path, tok, model_card) -> dict:
    """Train and export; the run's state dict (tokens, steps, minutes, loss). `model_card(kind,
    cfg, state, corpus, init)`: the export's README (commands.py's)."""
    init = args.init or DEFAULT_INIT
    teacher = load_model(args.target, prepare=False)
    model = parallel_model(init, teacher)
    if args.corpus == "sharegpt":
        from .eagle_command import _chat_data
        teacher.prepare(_kernel())
        batch_fn, _stream, _vocab, what = _chat_data(args, tc, teacher, work)
    else:
        from .distill import mixed_batches
        batch_fn = mixed_batches(Batches(token_stream(tok, args.corpus), tc.batch, tc.seq_len, tc.seed),
                                 teacher, tok, seed=tc.seed)
        what = None
    # the draft's own tokenizer travels with it (a chat target's draft has the target's, not the bundled one)
    tokenizer = Path(init) / "tokenizer.json" if (Path(init) / "tokenizer.json").exists() else args.tokenizer
    cfg = model.draft.config

    def card(state):
        text = model_card("parallel", cfg, state, args.corpus, init)
        return text if what is None else text.replace("the Python standard library's train split", what, 1)
    return train(model, tc, batch_fn, parallel_loss(teacher, seed=tc.seed), work, out, tokenizer,
                 card_fn=card, export_fn=exporter(model, tokenizer, out, like=init if Path(init).is_dir() else None))


def _kernel():
    from ..models.linear import choose_kernel
    return choose_kernel()
