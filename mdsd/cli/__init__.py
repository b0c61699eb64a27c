"""The ``mdsd`` command line. Each subcommand lives in its own module of this package.

A subcommand module defines ``add_parser(subparsers)``, which registers its parser and sets
``func`` (called with the parsed arguments, returning an exit code).

Exit status 2, one line: bad input or environment — a ``ValueError`` or ``TypeError`` raised by mdsd's own
code (mdsd raises them only for bad input, naming the argument), an ``OSError`` (a missing or unreadable
file), a missing package. Exit status 1, with the traceback: anything else, including a ``ValueError`` that
numpy, torch or another library raised inside mdsd — that is a bug in mdsd, and the message says so.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import traceback

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the mdsd package folder


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
    except (OSError, ModuleNotFoundError) as err:
        return _input_error(args, err)
    except (ValueError, TypeError) as err:
        if _raised_by_mdsd(err):
            return _input_error(args, err)
        return _internal_error(args, err)
    except Exception as err:  # noqa: BLE001 (reported as a bug, with its traceback)
        return _internal_error(args, err)


def _input_error(args: argparse.Namespace, err: BaseException) -> int:
    print(f"mdsd {args.command}: error: {err}", file=sys.stderr)
    return 2


def _internal_error(args: argparse.Namespace, err: BaseException) -> int:
    traceback.print_exception(err)
    print(
        f"mdsd {args.command}: internal error: {type(err).__name__}: {err}\n"
        "This is a bug in mdsd, not a problem with your input: please report it with the command line "
        "and the traceback above.",
        file=sys.stderr,
    )
    return 1


def _raised_by_mdsd(err: BaseException) -> bool:
    """Whether the innermost frame of ``err``'s traceback is mdsd's own code (an explicit raise)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE + os.sep)


if __name__ == "__main__":
    sys.exit(main())
