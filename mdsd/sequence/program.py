"""A linear program with equality rows, its HiGHS solve and its certificate: the plumbing that the
sequence-level LPs (:mod:`mdsd.sequence.optimum`, :mod:`mdsd.sequence.coupling`) share.

Every program here is ``max c·x s.t. A x = b, 0 <= x <= ub``. For any row prices y,

.. math:: c \\cdot x = b \\cdot y + (c - A^\\top y) \\cdot x
          \\le b \\cdot y + \\sum_j (c - A^\\top y)_j^+ \\, ub_j,

so the dual returned by the solver gives an upper bound that holds whatever its rounding: the
certificate :attr:`Solved.bound`. The optimum is proven to within ``bound − value``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from mdsd.highs import LPError, solve_sparse_lp

CERTIFIED_GAP = 1e-7  # "optimal" needs bound − value and the primal residual below this
# HiGHS drops matrix entries below small_matrix_value (default 1e-9; 1e-12 is its floor): conditionals
# p(t | u) below it become 0, moving the optimum by at most about n · 1e-12 per row
_BASE = {"small_matrix_value": 1e-12}
# At low temperatures (conditionals down to 1e-9, tree probabilities down to 1e-40) HiGHS's default
# scaling sometimes ends in "Unknown" or with a loose dual: then the same program is solved again
# unscaled, then by the interior-point method, and the first certified answer is kept.
ATTEMPTS = ({}, {"simplex_scale_strategy": 0}, {"solver": "ipm"})


@dataclass
class Program:
    """An equality-form LP built column by column: ``max c·x, A x = b, 0 <= x <= ub``."""

    num_rows: int = 0
    b: list[float] = field(default_factory=list)
    c: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)

    def add_rows(self, rhs: list[float] | np.ndarray) -> int:
        """Append equality rows with right-hand sides ``rhs``; return the index of the first."""
        first = self.num_rows
        self.b.extend(float(v) for v in rhs)
        self.num_rows += len(rhs)
        return first

    def add_column(self, cost: float, upper: float, entries: list[tuple[int, float]]) -> int:
        """Append one variable with objective ``cost``, bound ``upper`` and (row, coefficient) entries."""
        j = len(self.c)
        self.c.append(float(cost))
        self.ub.append(float(upper))
        for row, value in entries:
            self.rows.append(row)
            self.cols.append(j)
            self.vals.append(float(value))
        return j

    @property
    def num_columns(self) -> int:
        return len(self.c)

    def sizes(self) -> dict[str, int]:
        return {"variables": self.num_columns, "constraints": self.num_rows, "nonzeros": len(self.vals)}


@dataclass(frozen=True)
class Solved:
    """A solved program: primal ``x``, row prices ``y``, ``value`` = c·x, the certified ``bound``."""

    x: np.ndarray
    y: np.ndarray
    value: float
    bound: float
    residual: float  # max |A x − b|
    seconds: float
    attempt: int = 0  # which of ATTEMPTS produced it

    @property
    def certified(self) -> bool:
        return self.bound - self.value <= CERTIFIED_GAP and self.residual <= CERTIFIED_GAP


def solve(program: Program) -> Solved:
    """Solve ``program`` with HiGHS and recompute value, residual and the dual bound in float64; the
    first of :data:`ATTEMPTS` that is certified wins, else the one with the smallest gap (uncertified).
    Raises ``LPError`` if no attempt ends optimal."""
    start = time.perf_counter()
    shape = (program.num_rows, program.num_columns)
    A = sparse.csc_matrix((program.vals, (program.rows, program.cols)), shape=shape)
    b, c, ub = np.array(program.b), np.array(program.c), np.array(program.ub)
    best, errors = None, []
    for attempt, options in enumerate(ATTEMPTS):
        try:
            out = solve_sparse_lp(c, A, b, b, np.zeros(c.size), ub, maximize=True, options=_BASE | options)
        except LPError as err:
            errors.append(str(err))
            continue
        x = np.clip(out.x, 0.0, ub)
        y = out.row_dual
        bound = float(b @ y + np.clip(c - A.T @ y, 0.0, None) @ ub)
        residual = float(np.max(np.abs(A @ x - b), initial=0.0))
        solved = Solved(x, y, float(c @ x), bound, residual, time.perf_counter() - start, attempt)
        if solved.certified:
            return solved
        if best is None or solved.bound - solved.value < best.bound - best.value:
            best = solved
    if best is None:
        raise LPError("; ".join(errors))
    return best
