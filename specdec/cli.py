"""specdec command line: generate | trace | train | profile | analyze | serve.

Each subcommand lives in `specdec/commands/<name>.py` and exposes `add_parser(subparsers)`,
which sets `func(args) -> int`. Errors caused by bad input (SpecdecError) print one line
and exit with code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from .errors import SpecdecError

COMMANDS = ("generate", "trace", "train", "profile", "analyze", "serve", "quantize")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own exit code 2, one line
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="specdec", description="Lossless speculative decoding, measured.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"specdec.commands.{name}").add_parser(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except SpecdecError as e:
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
