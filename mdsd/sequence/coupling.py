"""docs/mathematics.md §7's sequence-level coupling LP as written: π(T, y, m) over drafted trees T, target
sequences y = y_1..y_{L+1} and stops m <= match(T, y).

.. math:: \\max \\sum_{T, y, m} (m + 1)\\, \\pi(T, y, m) \\quad \\text{s.t.} \\quad
          \\sum_{y, m} \\pi = D(T), \\quad \\sum_{T, m} \\pi = P(y), \\quad
          \\sum_T \\pi(T, y, m) = a_m(y_{1..m+1})\\, P(y_{m+2..L+1} \\mid y_{1..m+1}),\\; a_m \\ge 0,

where match(T, y) is the depth of the longest path of T that is a prefix of y. The last rows (the stop
is a stopping time of y) make the verifier lossless; without them (``lossless=False``) the program is
the best coupling of T and y, Sun et al.'s "idealised" verifier. Up to #T · n^{L+1} · (L + 1) variables:
the compact program of :mod:`mdsd.sequence.optimum` is the one to use beyond tiny cases.
"""

from __future__ import annotations

import itertools

from mdsd.sequence.models import SequenceModel
from mdsd.sequence.program import Program

__all__ = ["coupling_program", "match"]


def match(paths: frozenset[tuple[int, ...]], y: tuple[int, ...]) -> int:
    """The depth of the longest path of a tree (its set of token paths) that is a prefix of y.

    >>> match(frozenset({(0,), (0, 1), (1,)}), (0, 1, 1))
    2
    """
    m = 0
    while m < len(y) and y[: m + 1] in paths:
        m += 1
    return m


def coupling_program(
    target: SequenceModel, classes: dict, depth: int, context: tuple[int, ...], lossless: bool
) -> tuple[Program, dict, dict]:
    """The program, [((tree, s), column)] for every column (several y share one emitted s: the plan sums
    them), and {(tree, y, m): column}."""
    n = target.n
    prog = Program()
    keys = list(classes)
    tree_row = prog.add_rows([classes[key] for key in keys])
    ys = list(itertools.product(range(n), repeat=depth + 1))
    prob_y = {y: target.prob(y, context) for y in ys}
    y_row = prog.add_rows([prob_y[y] for y in ys])
    stop_row = prog.add_rows([0.0] * (len(ys) * (depth + 1))) if lossless else None
    decode, pi = [], {}
    for i, key in enumerate(keys):
        paths = frozenset(key)
        for j, y in enumerate(ys):
            for m in range(match(paths, y) + 1):
                entries = [(tree_row + i, 1.0), (y_row + j, 1.0)]
                if lossless:
                    entries.append((stop_row + j * (depth + 1) + m, 1.0))
                col = prog.add_column(m + 1, classes[key], entries)
                pi[key, y, m] = col
                decode.append(((key, y[: m + 1]), col))
    if lossless:  # a_m(s), s = y_1..y_{m+1}: enters the stop row of every y extending s
        for length in range(1, depth + 2):
            for s in itertools.product(range(n), repeat=length):
                entries = [
                    (stop_row + j * (depth + 1) + length - 1, -target.prob(y[length:], context + s))
                    for j, y in enumerate(ys)
                    if y[:length] == s
                ]
                prog.add_column(0.0, 1.0, entries)
    return prog, decode, pi
