"""specdec command line: generate | train | profile | analyze | serve."""
from __future__ import annotations

import argparse
import sys

from .errors import SpecdecError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specdec", description="Lossless speculative decoding, measured.")
    sub = p.add_subparsers(dest="command", required=True)
    from .train.commands import add_parser as add_train
    add_train(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except SpecdecError as e:
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
