"""A sparse LP through HiGHS (stand-in for the shared ``mdsd.highs`` helper; same interface)."""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np
from scipy import sparse


@dataclass(frozen=True)
class LPSolution:
    x: np.ndarray
    row_dual: np.ndarray
    objective: float
    status: str


def solve_sparse_lp(c, A, row_lower, row_upper, col_lower, col_upper, maximize=True) -> LPSolution:
    """max (or min) c·x s.t. row_lower <= A x <= row_upper, col_lower <= x <= col_upper; raises unless
    HiGHS reports an optimum. Row duals y satisfy c − Aᵀy ≤ 0 at variables on their lower bound (max)."""
    A = sparse.csc_matrix(A)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
    inf = highspy.kHighsInf
    lp.col_cost_ = np.asarray(c, dtype=np.float64)
    lp.col_lower_ = np.nan_to_num(np.asarray(col_lower, dtype=np.float64), neginf=-inf, posinf=inf)
    lp.col_upper_ = np.nan_to_num(np.asarray(col_upper, dtype=np.float64), neginf=-inf, posinf=inf)
    lp.row_lower_ = np.nan_to_num(np.asarray(row_lower, dtype=np.float64), neginf=-inf, posinf=inf)
    lp.row_upper_ = np.nan_to_num(np.asarray(row_upper, dtype=np.float64), neginf=-inf, posinf=inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr
    lp.a_matrix_.index_ = A.indices
    lp.a_matrix_.value_ = A.data
    highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("primal_feasibility_tolerance", 1e-10)
    highs.setOptionValue("dual_feasibility_tolerance", 1e-10)
    highs.setOptionValue("small_matrix_value", 1e-15)
    highs.setOptionValue("presolve", "off")
    highs.passModel(lp)
    highs.run()
    status = highs.modelStatusToString(highs.getModelStatus())
    if status != "Optimal":
        raise RuntimeError(f"HiGHS did not solve the LP: {status}")
    solution = highs.getSolution()
    return LPSolution(
        x=np.asarray(solution.col_value),
        row_dual=np.asarray(solution.row_dual),
        objective=float(highs.getInfo().objective_function_value),
        status=status,
    )
