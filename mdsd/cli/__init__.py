"""The ``mdsd`` command line. Each subcommand lives in its own module of this package.

A subcommand module defines ``add_parser(subparsers)``, which registers its parser and sets
``func`` (called with the parsed arguments, returning an exit code).

Exit status 2, one line: bad input or environment — a ``ValueError`` or ``TypeError`` raised by mdsd's own
code (mdsd raises them only for bad input, naming the argument), an ``OSError`` (a missing or unreadable
file), a missing package. Exit status 1, with the traceback: anything else, including a ``ValueError`` that
numpy, torch or another library raised inside mdsd — that is a bug in mdsd, and the message says so. The
rule is :mod:`mdsd.errors`, which the experiment scripts share (:func:`mdsd.harness.experiment.run_script`).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from mdsd.errors import report_exception


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
    except Exception as err:  # noqa: BLE001 (bad input: one line, exit 2; anything else: a bug, exit 1)
        return report_exception(err, f"mdsd {args.command}")


if __name__ == "__main__":
    sys.exit(main())
