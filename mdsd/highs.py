"""Sparse linear programs solved by HiGHS (highspy), silently, with an error unless the optimum is proven.

One call takes the LP

.. math:: \\max_x \\text{ (or } \\min_x) \\; c^\\top x \\quad \\text{s.t.} \\quad
          r_\\ell \\le A x \\le r_u, \\; x_\\ell \\le x \\le x_u,

runs the dual simplex (Huangfu & Hall, "Parallelizing the dual revised simplex method", Math. Prog. Comp.
2018) and returns the primal point, the row duals and the objective. HiGHS prints a banner on the C
stdout the first time a solver is created in a process, whatever its options; :func:`quiet` sends file
descriptor 1 to /dev/null around every call, so command-line ``--json`` output stays parseable.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import highspy
import numpy as np
from scipy import sparse

__all__ = ["LPError", "LPSolution", "quiet", "solve_sparse_lp"]

_TOLERANCE = 1e-10  # primal and dual feasibility tolerance (HiGHS's default 1e-7 is too loose for α*)
_LOCK = threading.Lock()  # file descriptor 1 is process-wide


class LPError(RuntimeError):
    """HiGHS did not prove an optimum (infeasible, unbounded, a limit hit, a solver failure)."""


@dataclass(frozen=True)
class LPSolution:
    """An optimal solution of :func:`solve_sparse_lp`.

    Attributes
    ----------
    x : ndarray [num_col]
        Optimal primal values.
    row_dual : ndarray [num_row]
        Row duals as HiGHS reports them: the rate of change of the optimal objective per unit of the row's
        active bound (for maximisation too), zero for rows with slack.
    objective : float
        :math:`c^\\top x` at the optimum.
    status : str
        HiGHS's model status text ("Optimal"; anything else raises :class:`LPError`).
    """

    x: np.ndarray
    row_dual: np.ndarray
    objective: float
    status: str


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence everything written to file descriptor 1 (C and Python) inside the block.

    HiGHS writes its banner with C stdio, past ``sys.stdout``; redirecting the descriptor is the only
    way to keep it out of a program's output. C buffers are flushed before the descriptor comes back.
    """
    with _LOCK:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as devnull:
                os.dup2(devnull.fileno(), 1)
            yield
        finally:
            ctypes.CDLL(None).fflush(None)
            os.dup2(saved, 1)
            os.close(saved)


def _vector(value: object, size: int, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (size,):
        raise ValueError(f"{name} must have shape ({size},), got {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    return arr


def _run(lp: highspy.HighsLp, presolve: bool, options: dict[str, object]) -> highspy.Highs:
    with quiet():
        highs = highspy.Highs()
        highs.setOptionValue("output_flag", False)
        highs.setOptionValue("solver", "simplex")
        highs.setOptionValue("presolve", "on" if presolve else "off")
        highs.setOptionValue("primal_feasibility_tolerance", _TOLERANCE)
        highs.setOptionValue("dual_feasibility_tolerance", _TOLERANCE)
        for key, value in options.items():
            if highs.setOptionValue(key, value) != highspy.HighsStatus.kOk:
                raise ValueError(f"options: HiGHS rejects {key} = {value!r}")
        highs.passModel(lp)
        highs.run()
    return highs


def solve_sparse_lp(
    c: object,
    A: sparse.spmatrix | sparse.sparray,
    row_lower: object,
    row_upper: object,
    col_lower: object,
    col_upper: object,
    maximize: bool = True,
    *,
    options: dict[str, object] | None = None,
) -> LPSolution:
    """Solve a sparse LP with HiGHS's simplex; raise :class:`LPError` unless the optimum is proven.

    .. math:: \\operatorname{opt}_x \\; c^\\top x \\quad \\text{s.t.} \\quad
              \\text{row\\_lower} \\le A x \\le \\text{row\\_upper}, \\;
              \\text{col\\_lower} \\le x \\le \\text{col\\_upper}.

    Parameters
    ----------
    c : array_like [num_col]
        Objective coefficients.
    A : scipy sparse matrix [num_row, num_col]
        Constraint matrix (any sparse format).
    row_lower, row_upper, col_lower, col_upper : array_like
        Bounds; ``-np.inf`` / ``np.inf`` where absent, equal lower and upper for an equality.
    maximize : bool
        Maximise (default) or minimise.
    options : dict, optional
        Extra HiGHS options (e.g. ``{"time_limit": 60.0}``), set after the defaults: simplex, presolve on,
        feasibility tolerances 1e-10, no output.

    Returns
    -------
    LPSolution
        ``x``, ``row_dual``, ``objective``, ``status``.

    Raises
    ------
    LPError
        When HiGHS's model status is not optimal. A run that presolve leaves unsolved is repeated once
        with presolve off first (HiGHS's presolve has declared feasible LPs with entries near 1e-11
        infeasible).
    ValueError
        On inconsistent shapes or NaN bounds.

    >>> import numpy as np
    >>> from scipy import sparse
    >>> A = sparse.csr_matrix([[1.0, 2.0]])  # max x0 + x1 s.t. x0 + 2 x1 <= 4, 0 <= x0 <= 3, x1 >= 0
    >>> lp = solve_sparse_lp([1.0, 1.0], A, [-np.inf], [4.0], [0.0, 0.0], [3.0, np.inf])
    >>> lp.x.tolist(), lp.row_dual.tolist(), lp.objective  # x = (3, 1/2); one more unit of row bound: +1/2
    ([3.0, 0.5], [0.5], 3.5)
    """
    if not sparse.issparse(A):
        raise ValueError(f"A must be a scipy sparse matrix, got {type(A).__name__}")
    num_row, num_col = A.shape
    matrix = sparse.csc_matrix(A, dtype=np.float64)
    if not np.isfinite(matrix.data).all():
        raise ValueError("A contains NaN or infinite entries")
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = num_col, num_row
    lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
    lp.col_cost_ = _vector(c, num_col, "c")
    if not np.isfinite(lp.col_cost_).all():
        raise ValueError("c contains infinite entries")
    lp.col_lower_ = _vector(col_lower, num_col, "col_lower")
    lp.col_upper_ = _vector(col_upper, num_col, "col_upper")
    lp.row_lower_ = _vector(row_lower, num_row, "row_lower")
    lp.row_upper_ = _vector(row_upper, num_row, "row_upper")
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = matrix.indptr
    lp.a_matrix_.index_ = matrix.indices
    lp.a_matrix_.value_ = matrix.data
    settings = dict(options or {})
    highs = _run(lp, presolve=True, options=settings)
    if highs.getModelStatus() != highspy.HighsModelStatus.kOptimal and "presolve" not in settings:
        highs = _run(lp, presolve=False, options=settings)
    status = highs.modelStatusToString(highs.getModelStatus())
    if highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise LPError(f"HiGHS did not solve the LP ({num_row} rows, {num_col} columns): {status}")
    solution = highs.getSolution()
    return LPSolution(
        x=np.array(solution.col_value, dtype=np.float64),
        row_dual=np.array(solution.row_dual, dtype=np.float64),
        objective=float(highs.getInfo().objective_function_value),
        status=status,
    )
