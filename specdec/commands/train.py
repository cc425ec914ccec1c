"""`specdec train`: see specdec/train/commands.py."""
from ..train.commands import add_parser  # noqa: F401
