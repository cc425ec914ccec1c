"""Proposers: cheap guessers of the next k tokens, built by name from a registry."""
from .base import BaseProposer, Draft, NoProposer, Proposer, available, create, register

__all__ = ["BaseProposer", "Draft", "NoProposer", "Proposer", "available", "create", "register"]
