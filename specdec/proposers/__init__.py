"""Proposers: cheap guessers of the next k tokens, built by name from a registry.
Importing the package registers the built-in ones."""
from . import auto, draft, feature_tree, layerskip, ngram, parallel, suffix  # noqa: F401  (register themselves)
from .base import Draft, NoProposer, Proposer, available, create, register

__all__ = ["Draft", "NoProposer", "Proposer", "available", "create", "register"]
