"""How mdsd's entry points (the ``mdsd`` command, the experiment scripts) report an exception.

Bad input or environment, exit status 2, one line ``PROG: error: MESSAGE``: a ``ValueError`` or
``TypeError`` raised by mdsd's own code (mdsd raises them only for bad input, naming the argument), an
``OSError`` (a missing or unreadable file), a missing package. Anything else, exit status 1, with the
traceback: including a ``ValueError`` that numpy, torch or another library raised inside mdsd — that is a bug
in mdsd, and the message says so.
"""

from __future__ import annotations

import linecache
import os
import sys
import traceback
from collections.abc import Iterable

__all__ = ["is_input_error", "raised_in", "report_exception", "PACKAGE"]

PACKAGE = os.path.dirname(os.path.abspath(__file__))  # the mdsd package folder


def raised_in(err: BaseException, places: Iterable[str], explicit: bool = False) -> bool:
    """Whether the innermost frame of ``err``'s traceback (the ``raise``) is in one of ``places``: a folder
    (every file under it) or a file; with ``explicit``, also that its line is a ``raise`` statement (not an
    operation that numpy or torch failed in, which has no frame of its own).

    >>> try:
    ...     int("x")
    ... except ValueError as err:
    ...     raised_in(err, [PACKAGE])  # raised by int(), called from this doctest: not mdsd's own raise
    False
    """
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    where = os.path.abspath(tb.tb_frame.f_code.co_filename)
    inside = any(where == place or where.startswith(place + os.sep) for place in map(os.path.abspath, places))
    return inside and (not explicit or linecache.getline(where, tb.tb_lineno).lstrip().startswith("raise"))


def is_input_error(err: BaseException, own: Iterable[str] = ()) -> bool:
    """Whether ``err`` says the input or the environment is bad (module docstring), not that mdsd has a
    bug. ``own`` adds files whose ``raise`` statements count as mdsd's (an experiment script's checks of its
    flags); an error numpy raises in such a file is still a bug."""
    if isinstance(err, (OSError, ModuleNotFoundError)):
        return True
    if not isinstance(err, (ValueError, TypeError)):
        return False
    return raised_in(err, [PACKAGE]) or raised_in(err, own, explicit=True)


def report_exception(err: BaseException, prog: str, own: Iterable[str] = (), what: str = "mdsd") -> int:
    """Print ``err`` for a user of the program ``prog`` and return its exit status: one line and 2 for bad
    input (:func:`is_input_error`); otherwise the traceback, a line that says it is a bug in ``what``, and
    1."""
    if is_input_error(err, own):
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    traceback.print_exception(err)
    print(
        f"{prog}: internal error: {type(err).__name__}: {err}\n"
        f"This is a bug in {what}, not a problem with your input: please report it with the command line "
        "and the traceback above.",
        file=sys.stderr,
    )
    return 1
