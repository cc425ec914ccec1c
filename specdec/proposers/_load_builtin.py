"""Importing this module registers every built-in proposer."""
import importlib

for _name in ("draft_model", "ngram", "suffix", "layerskip", "auto"):
    try:
        importlib.import_module(f"{__package__}.{_name}")
    except ModuleNotFoundError as e:  # a proposer module not written yet
        if e.name != f"{__package__}.{_name}":
            raise
