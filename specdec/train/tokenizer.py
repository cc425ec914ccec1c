"""Train the byte-level BPE tokenizer (HF `tokenizers`) on the training split."""
from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from ..corpus import corpus_files, read_text

SPECIAL = ["<s>", "</s>"]  # BOS = 0, EOS = 1


def train_tokenizer(out: str | Path, vocab_size: int = 8192) -> Path:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=True)
    tok.train_from_iterator((read_text(f) for f in corpus_files("train")), trainer=trainer)
    # the model is trained with a BOS before every document: the tokenizer says so itself
    tok.post_processor = processors.TemplateProcessing(single=f"{SPECIAL[0]} $A", pair=f"{SPECIAL[0]} $A {SPECIAL[0]} $B",
                                                       special_tokens=[(SPECIAL[0], 0)])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    return out
