"""The ``mdsd`` command line. Each subcommand lives in its own module of this package.

A subcommand module defines ``add_parser(subparsers)``, which registers its parser and sets
``func`` (called with the parsed arguments, returning an exit code). Errors that come from bad
input (``ValueError``, ``TypeError``, ``OSError``, a missing package) print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdsd", description="Multi-draft speculative decoding: theory and measurement."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        importlib.import_module(f"{__name__}.{module}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, OSError, ModuleNotFoundError) as err:
        print(f"mdsd {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
